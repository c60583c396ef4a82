"""`--source` of `gatehouse validate` and `gatehouse render`: which Git source's namespace
binding judges the files, so they refuse what that source would refuse."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from control_plane.config import ControlPlaneConfig, load_config
from control_plane.model.route import Route
from control_plane.model.namespace_binding import NamespaceBinding
from control_plane.sources.from_config import git_binding


class NoSuchSource(ValueError):
    """The config has no Git source to judge by, or ``--source`` names none of them."""


def add_source_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source", metavar="NAME",
        help="with --config: the Git source (sources.git[].name) these files are for; its namespaces bind them "
             "(default: the only Git source)",
    )


def binding_for(config: ControlPlaneConfig, name: str | None) -> NamespaceBinding | None:
    """The named Git source's binding; the only one's without a name; None: no Git source."""
    names = [repo.name for repo in config.sources.git]
    if name is None:
        if not names:
            return None
        if len(names) > 1:
            raise NoSuchSource(f"--source: the config has several Git sources ({', '.join(names)}); name the one these files are for")
        return git_binding(config, 0)
    if name not in names:
        raise NoSuchSource(f"--source: {name!r} is not a Git source of the config ({', '.join(names) or 'it has none'})")
    return git_binding(config, names.index(name))


def config_and_binding(path: Path | None, source: str | None) -> tuple[ControlPlaneConfig | None, NamespaceBinding | None]:
    """``--config`` and ``--source`` of validate and render: the config (None without
    ``--config``) and the Git binding that judges the files. Raises ``ConfigError`` or
    ``NoSuchSource`` with the reason."""
    if path is None:
        return None, None
    config = load_config(path)
    return config, binding_for(config, source)


def shared_namespace_notes(config: ControlPlaneConfig, routes: Sequence[Route]) -> list[str]:
    """The namespaces these files claim that the config's Kubernetes source also watches:
    there a Route object with the same id as a file's route is replaced by it (the object
    gets Accepted=False, Conflict). Validate cannot see the cluster, so it says where it can happen."""
    kube = config.sources.kubernetes
    if kube is None:
        return []
    claimed = sorted({route.namespace for route in routes if not kube.namespaces or route.namespace in kube.namespaces})
    return [
        f"namespace {namespace}: sources.kubernetes watches it too; a Route object there with the same id as a route in these "
        "files is replaced by it (the object gets Accepted=False, reason Conflict; /status lists it under the Git source's replaces)"
        for namespace in claimed
    ]
