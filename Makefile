# The two commands the README opens with: `make dev` and `make test`.
# `make dev` installs only what the dev stack runs (scripts/setup dev); `make test` and
# the other targets install the test tools too (scripts/setup test), as CI does.
.PHONY: setup setup-dev setup-test dev test test-lanes test-serial typecheck lint unit integration bench cluster cluster-down

# Extra arguments for `gatehouse dev`, e.g. `make dev DEV_ARGS=--check`.
DEV_ARGS ?=

setup: setup-test

setup-dev:
	@scripts/setup dev

setup-test:
	@scripts/setup test

dev: setup-dev
	.venv/bin/gatehouse dev $(DEV_ARGS)

typecheck: setup-test
	.venv/bin/mypy

lint: setup-test
	.venv/bin/ruff check .

# Two phases (docs/testing.md): every test not marked serial on TEST_WORKERS pytest-xdist
# workers, one test file per worker at a time (a module's shared stack starts once); then the
# serial ones (tests/serial_tests.py: timing bounds, fixed windows, the real cluster) alone.
# tests/e2e/test_dev_stack.py runs `gatehouse dev --check` (the newcomer's path) as one of the tests.
TEST_WORKERS ?= 3
test: setup-test typecheck lint
	.venv/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial"
	.venv/bin/pytest -q -m serial

# The same two sets at once (scripts/test-lanes): faster, but not yet the default
# (docs/testing.md, "Two lanes at once").
test-lanes: setup-test typecheck lint
	TEST_WORKERS=$(TEST_WORKERS) scripts/test-lanes

# Every test in one pytest process, as `make test` ran before issue 34.
test-serial: setup-test typecheck lint
	.venv/bin/pytest -q

unit: setup-test
	.venv/bin/pytest -q tests/unit

integration: setup-test
	.venv/bin/pytest -q tests/integration tests/e2e

# A single-node Kubernetes cluster in a network namespace of its own, the image built from
# the Dockerfile, the chart installed and examples/k8s/ applied (docs/cluster.md).
cluster: setup-test
	scripts/cluster up

cluster-down:
	scripts/cluster down

bench: setup-test
	.venv/bin/python -m bench.propagation
