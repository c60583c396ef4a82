"""The CLI loads only the command it runs, and its table names every command a module adds."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from gatehouse import cli

ROOT = Path(__file__).resolve().parents[3]


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subparsers.choices)


def test_the_table_is_every_command_the_modules_add() -> None:
    assert _choices(cli.build_parser()) == list(cli.COMMANDS)


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_a_command_alone_is_what_its_module_adds(command: str) -> None:
    assert command in _choices(cli.build_parser(command))


@pytest.mark.parametrize(
    ("command", "not_loaded"),
    [
        ("ext-authz", ("control_plane.runtime", "kubernetes", "ratelimit_svc.runtime")),
        ("ratelimit", ("control_plane.runtime", "kubernetes", "ext_authz.runtime")),
        ("telemetry", ("control_plane.runtime", "kubernetes", "ext_authz.runtime")),
        ("control-plane", ("ext_authz.runtime", "ratelimit_svc.runtime", "telemetry.runtime", "kubernetes")),
    ],
)
def test_a_service_loads_no_other_services_code(command: str, not_loaded: tuple[str, ...]) -> None:
    """Each service and each ext_authz worker starts through the CLI; loading every command
    cost each about 2 s of CPU. The control plane loads the Kubernetes client only for a
    config with a Kubernetes source."""
    code = (
        "import sys\nfrom gatehouse.cli import build_parser\n"
        f"build_parser({command!r})\n"
        "print(' '.join(sorted(m for m in sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert f"gatehouse.commands.{cli.COMMANDS[command]}" in loaded
    for module in not_loaded:
        assert module not in loaded, f"{command} loaded {module}"


def test_version_and_errors_still_answer() -> None:
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gatehouse", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)

    assert run("--version").stdout.strip().startswith("gatehouse ")
    unknown = run("nosuch")
    assert unknown.returncode == 2 and "invalid choice: 'nosuch'" in unknown.stderr
    missing = run()
    assert missing.returncode == 2 and "COMMAND" in missing.stderr
