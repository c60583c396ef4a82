"""The config file's ``sources:`` → the concrete sources, seen through their protocols."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from control_plane.config import ControlPlaneConfig, GitRepo, Kubernetes
from control_plane.model.namespace_binding import NamespaceBinding
from control_plane.sources.base import EndpointSource, RouteSource, Source
from control_plane.sources.git import GitSettings, GitSource
from control_plane.sources.static_endpoints import StaticEndpointsSource
from servicekit.audit import AuditSink

if TYPE_CHECKING:
    from control_plane.sources.kubernetes.source import KubernetesSource

log = structlog.get_logger(component="control_plane")


@dataclass(frozen=True)
class Sources:
    routes: tuple[RouteSource, ...]
    endpoints: tuple[EndpointSource, ...]
    """In precedence order: the first whose table knows a service answers for it."""
    every: tuple[Source, ...]
    """Each source once (Kubernetes is both kinds), in the order ``/status`` lists them."""
    git: tuple[GitSource, ...]
    """The ones an operator can ask to sync now (``POST /sync``)."""
    kubernetes: KubernetesSource | None = None
    """The cluster source, which also shares the breaker board between replicas."""


def git_binding(config: ControlPlaneConfig, index: int) -> NamespaceBinding:
    """The namespaces the files of ``sources.git[index]`` may claim."""
    repo = config.sources.git[index]
    return NamespaceBinding.of(f"sources.git[{index}]", repo.namespaces, repo.namespaces_by_path)


def _warn_unbound(index: int, repo: GitRepo) -> None:
    if repo.namespaces is None:
        log.warning(
            "git_source_unbound", source=repo.name,
            detail=f"sources.git[{index}].namespaces is not set: its files may claim only namespace 'default'; "
                   "list the namespaces this repository may claim",
        )


def sources_from_config(config: ControlPlaneConfig, *, audit: AuditSink) -> Sources:
    for index, repo in enumerate(config.sources.git):
        _warn_unbound(index, repo)
    git = tuple(
        GitSource(
            GitSettings(
                name=repo.name,
                repo=config.repo_location(repo.repo),
                branch=repo.branch,
                path=repo.path,
                poll_interval=repo.poll_interval.seconds,
                fetch_timeout=repo.fetch_timeout.seconds,
                binding=git_binding(config, index),
                **({"cache_dir": config.resolve(repo.cache_dir)} if repo.cache_dir else {}),
            ),
            audit=audit,
        )
        for index, repo in enumerate(config.sources.git)
    )
    static = config.sources.static_endpoints
    files = (
        (StaticEndpointsSource(config.resolve(static.file), poll_interval=static.poll_interval.seconds),)
        if static is not None
        else ()
    )
    kube = config.sources.kubernetes
    cluster = (_kubernetes_source(config, kube),) if kube is not None else ()
    # Kubernetes endpoints first; the static file for services the cluster does not have.
    return Sources(
        routes=(*git, *cluster), endpoints=(*cluster, *files), every=(*git, *files, *cluster), git=git,
        kubernetes=cluster[0] if cluster else None,
    )


def _kubernetes_source(config: ControlPlaneConfig, kube: Kubernetes) -> KubernetesSource:
    """Imported here: the Kubernetes client is a second of CPU to load, in every control
    plane that has no cluster to watch too."""
    from control_plane.sources.kubernetes.endpoint_trust import EndpointSliceTrust
    from control_plane.sources.kubernetes.source import KubernetesSettings, KubernetesSource

    return KubernetesSource(
        KubernetesSettings(
            kubeconfig=str(config.resolve(kube.kubeconfig)) if kube.kubeconfig else None,
            namespaces=tuple(kube.namespaces),
            lease_name=kube.lease_name,
            lease_duration=kube.lease_duration.seconds,
            lease_renew=kube.lease_renew.seconds,
            write_status=kube.write_status,
            api_keys=kube.api_keys,
            breaker_board=kube.breaker_board.config_map if kube.breaker_board else None,
            route_acks=kube.route_acks.config_map if kube.route_acks else None,
            endpoint_trust=EndpointSliceTrust.from_lists(
                kube.endpoint_slices.trusted_managers, [str(r) for r in kube.endpoint_slices.address_ranges]
            ),
            **({"lease_namespace": kube.lease_namespace} if kube.lease_namespace else {}),
        )
    )
