# The two commands the README opens with: `make dev` and `make test`.
.PHONY: setup dev test typecheck lint unit integration bench

setup:
	@scripts/setup

dev: setup
	.venv/bin/gatehouse dev

typecheck: setup
	.venv/bin/mypy

lint: setup
	.venv/bin/ruff check .

test: setup typecheck lint
	.venv/bin/pytest -q

unit: setup
	.venv/bin/pytest -q tests/unit

integration: setup
	.venv/bin/pytest -q tests/integration tests/e2e

bench: setup
	.venv/bin/python bench/propagation.py
