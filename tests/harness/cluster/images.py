"""The cluster's images, built here without a registry, cached by what they are made of.

- base: ``debootstrap --variant=minbase`` of this machine's Debian release from the mirror
  its apt uses, plus what the Dockerfile's ``python -m venv`` needs (python3, python3-venv,
  python-is-python3, ca-certificates). Cached as a rootfs tarball keyed by the recipe.
- gatehouse: the project's Dockerfile, unchanged, with ``--build-arg PYTHON_IMAGE=<base>``.
- redis: containerfiles/redis.Containerfile (Debian's redis-server on the base).
- pause: containerfiles/pause.Containerfile (Debian's static catatonit in pause mode).

Built with podman (Debian) into a podman store of our own under the cache, with
``--network=host`` (a build container on podman's default network would add a bridge
to the machine's namespace) and runc with explicit rlimits (cluster-notes.md: crun
refuses this machine's hybrid cgroups, and rlimits cannot be raised here). podman's
layer cache decides what to rebuild; each image is saved once per image id as an OCI
archive and imported into the cluster's containerd (namespace k8s.io) at every ``up``.

Behind a TLS-inspecting proxy, pip inside the build needs the machine's CA bundle (a
venv's pip trusts only its own certifi): the bundle named by GATEHOUSE_BUILD_CA_BUNDLE,
else PIP_CERT, REQUESTS_CA_BUNDLE or SSL_CERT_FILE, is mounted into every build step
with an /etc/pip.conf naming it. The Dockerfile needs no change for that.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.kubernetes import cache_dir

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent / "containerfiles"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
GATEHOUSE_REPOSITORY = "docker.io/library/gatehouse"
REDIS_REPOSITORY = "localhost/gatehouse-cluster/redis"
PAUSE_REPOSITORY = "localhost/gatehouse-cluster/pause"
BASE_REPOSITORY = "localhost/gatehouse-cluster/base"


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class Image:
    """A built image: its full reference in containerd and its OCI archive in the cache."""

    name: str
    reference: str
    archive: Path

    @property
    def repository(self) -> str:
        return self.reference.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]


def images_cache() -> Path:
    return cache_dir() / "images"


def _say(message: str) -> None:
    print(f"cluster: {message}", flush=True)


def _run(argv: list[str], what: str, timeout: float = 1800, log: Path | None = None) -> str:
    if log is not None:
        with open(log, "ab") as out:
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        if result.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise ImageError(f"{what} failed (exit {result.returncode}); last lines of {log}:\n{tail}")
        return ""
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if completed.returncode != 0:
        raise ImageError(f"{what} failed (exit {completed.returncode}): {completed.stderr.strip()[-2000:]}")
    return completed.stdout


def podman_argv() -> list[str]:
    store = cache_dir() / "podman"
    return [
        "podman", "--root", str(store / "root"), "--runroot", str(store / "runroot"),
        "--cgroup-manager=cgroupfs", "--events-backend=none", "--runtime=runc",
    ]  # fmt: skip


def _build_argv() -> list[str]:
    argv = [*podman_argv(), "build", "--network=host", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "--layers"]
    bundle = ca_bundle()
    if bundle is not None:
        conf = images_cache() / "pip.conf"
        conf.write_text("[global]\ncert = /etc/ssl/certs/gatehouse-build-ca.pem\n")
        argv += ["--volume", f"{bundle}:/etc/ssl/certs/gatehouse-build-ca.pem:ro", "--volume", f"{conf}:/etc/pip.conf:ro"]
    return argv


def ca_bundle() -> str | None:
    for variable in ("GATEHOUSE_BUILD_CA_BUNDLE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(variable)
        if value and os.path.isfile(value):
            return os.path.realpath(value)
    return None


# --- the debootstrap base -------------------------------------------------------------------


def debian_release() -> tuple[str, str]:
    """(codename, mirror URL) of this machine's Debian, from os-release and apt's sources."""
    codename = ""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip().strip('"')
    if not codename:
        raise ImageError("no VERSION_CODENAME in /etc/os-release: not a Debian release debootstrap knows")
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in sources:
        if not source.is_file():
            continue
        text = source.read_text(errors="replace")
        for stanza in re.split(r"\n\s*\n", text):  # deb822 (.sources)
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and codename in suites.group(1).split():
                return codename, uris.group(1)
        for line in text.splitlines():  # one-line format
            match = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line + " ")
            if match and match.group(2) == codename:
                return codename, match.group(1)
    raise ImageError(f"no apt source for {codename} in /etc/apt: cannot tell debootstrap which mirror to use")


def _debootstrap_version() -> str:
    return _run(["dpkg-query", "-W", "-f=${Version}", "debootstrap"], "dpkg-query debootstrap").strip()


def base_image(log: Path) -> str:
    """The base image's reference in podman's store, built (debootstrap) when missing."""
    codename, mirror = debian_release()
    recipe = f"{codename} {mirror} minbase {','.join(BASE_PACKAGES)} debootstrap={_debootstrap_version()}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    reference = f"{BASE_REPOSITORY}:{key}"
    if _podman_has(reference):
        return reference
    tarball = images_cache() / f"base-{key}.tar"
    if not tarball.is_file():
        _say(f"building the base image: debootstrap {codename} from {mirror} (about 2 minutes)")
        start = time.monotonic()
        images_cache().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=images_cache()) as work:
            rootfs = Path(work) / "rootfs"
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", codename, str(rootfs), mirror],
                 "debootstrap", log=log)
            shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
            (rootfs / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
            partial = tarball.with_suffix(".tmp")
            _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], "tar of the base rootfs")
            partial.rename(tarball)
        _say(f"base image built in {time.monotonic() - start:.0f}s")
    _run([*podman_argv(), "import", str(tarball), reference], "podman import of the base image")
    return reference


def _podman_has(reference: str) -> bool:
    result = subprocess.run([*podman_argv(), "image", "exists", reference], capture_output=True, timeout=60, check=False)
    return result.returncode == 0


def _image_id(reference: str) -> str:
    return _run([*podman_argv(), "image", "inspect", "--format", "{{.Id}}", reference], f"podman image inspect {reference}").strip()


def _build(name: str, repository: str, containerfile: Path, context: Path, build_args: dict[str, str], log: Path) -> Image:
    """podman build (its layer cache decides what runs), then the image's OCI archive,
    saved once per image id. The tag is the id's prefix: a changed image is a new tag."""
    staging = f"{repository}:building"
    argv = [*_build_argv(), "-f", str(containerfile), "-t", staging]
    for key, value in build_args.items():
        argv += ["--build-arg", f"{key}={value}"]
    start = time.monotonic()
    _run([*argv, str(context)], f"podman build of the {name} image", log=log)
    image_id = _image_id(staging)
    reference = f"{repository}:local-{image_id[:12]}"
    archive = images_cache() / f"{name}-{image_id[:12]}.oci.tar"
    if not archive.is_file():
        _run([*podman_argv(), "tag", staging, reference], "podman tag")
        partial = archive.with_suffix(".tmp")
        partial.unlink(missing_ok=True)
        _run([*podman_argv(), "save", "--format", "oci-archive", "--uncompressed", "-o", str(partial), reference],
             f"podman save of the {name} image")
        partial.rename(archive)
        for stale in images_cache().glob(f"{name}-*.oci.tar"):
            if stale != archive:
                stale.unlink(missing_ok=True)
        _say(f"{name} image {reference} built in {time.monotonic() - start:.0f}s")
    return Image(name, reference, archive)


def build_all(log: Path) -> dict[str, Image]:
    """Every image the cluster needs, from the cache when nothing changed."""
    images_cache().mkdir(parents=True, exist_ok=True)
    base = base_image(log)
    built = {
        "gatehouse": _build("gatehouse", GATEHOUSE_REPOSITORY, REPO / "Dockerfile", REPO, {"PYTHON_IMAGE": base}, log),
        "redis": _build("redis", REDIS_REPOSITORY, HERE / "redis.Containerfile", HERE, {"BASE": base}, log),
    }
    with tempfile.TemporaryDirectory(prefix="pause-", dir=images_cache()) as context:
        catatonit = shutil.which("catatonit") or "/usr/bin/catatonit"
        shutil.copy2(catatonit, Path(context) / "catatonit")
        built["pause"] = _build("pause", PAUSE_REPOSITORY, HERE / "pause.Containerfile", Path(context), {}, log)
    return built


def ctr_argv(containerd_socket: Path) -> list[str]:
    """``ctr`` on the cluster's containerd, in the k8s.io namespace (what the kubelet sees)."""
    return ["ctr", "--address", str(containerd_socket), "--namespace", "k8s.io"]


def import_into(containerd_socket: Path, images: list[Image]) -> None:
    """``ctr images import`` of each archive, unless containerd has that reference already
    (the tag is the image id's prefix)."""
    ctr = ctr_argv(containerd_socket)
    present = set(_run([*ctr, "images", "ls", "--quiet"], "ctr images ls").split())
    for image in images:
        if image.reference in present:
            continue
        _run([*ctr, "images", "import", str(image.archive)], f"ctr images import {image.archive.name}")


def tag(containerd_socket: Path, reference: str, target: str) -> None:
    """``target`` as another name of the imported ``reference``."""
    _run([*ctr_argv(containerd_socket), "images", "tag", "--force", reference, target], f"ctr images tag {reference} {target}", timeout=60)
