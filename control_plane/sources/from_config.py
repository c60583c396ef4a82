"""The config file's ``sources:`` → the concrete sources, seen through their protocols."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.config import ControlPlaneConfig
from control_plane.sources.base import EndpointSource, RouteSource, Source
from control_plane.sources.git import GitSettings, GitSource
from control_plane.sources.kubernetes.source import KubernetesSettings, KubernetesSource
from control_plane.sources.static_endpoints import StaticEndpointsSource
from servicekit.audit import AuditSink


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


def sources_from_config(config: ControlPlaneConfig, *, audit: AuditSink) -> Sources:
    git = tuple(
        GitSource(
            GitSettings(
                name=repo.name,
                repo=config.repo_location(repo.repo),
                branch=repo.branch,
                path=repo.path,
                poll_interval=repo.poll_interval.seconds,
                fetch_timeout=repo.fetch_timeout.seconds,
                **({"cache_dir": config.resolve(repo.cache_dir)} if repo.cache_dir else {}),
            ),
            audit=audit,
        )
        for repo in config.sources.git
    )
    static = config.sources.static_endpoints
    files = (
        (StaticEndpointsSource(config.resolve(static.file), poll_interval=static.poll_interval.seconds),)
        if static is not None
        else ()
    )
    kube = config.sources.kubernetes
    cluster = (
        (
            KubernetesSource(
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
                    **({"lease_namespace": kube.lease_namespace} if kube.lease_namespace else {}),
                )
            ),
        )
        if kube is not None
        else ()
    )
    # Kubernetes endpoints first; the static file for services the cluster does not have.
    return Sources(
        routes=(*git, *cluster), endpoints=(*cluster, *files), every=(*git, *files, *cluster), git=git,
        kubernetes=cluster[0] if cluster else None,
    )
