"""A whole local gateway for tests and benchmarks: Git route repo, static endpoints file,
sample upstreams, the control plane and Envoy, all real processes on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gatehouse.envoy_bootstrap import render_bootstrap

from .control_plane import ControlPlaneProcess
from .envoy import EnvoyProcess
from .http_client import Client, get, wait_for
from .ports import free_port
from .route_repo import RouteRepo
from .upstream import EchoUpstream


class GatewayStack:
    def __init__(
        self,
        directory: Path,
        *,
        upstreams: tuple[str, ...] = ("svc-a", "svc-b"),
        delta: bool = False,
        poll_interval: str = "200ms",
        node_id: str = "gateway-0",
        envoy_runtime: dict[str, Any] | None = None,
        control_plane_extra: dict[str, Any] | None = None,
        kubernetes: dict[str, Any] | None = None,
        git_namespaces: list[str] | None = None,
    ) -> None:
        self.directory = directory
        self.repo = RouteRepo(directory / "repo")
        self.endpoints_path = directory / "endpoints.yaml"
        self.upstream_names = upstreams
        self.delta = delta
        self.node_id = node_id
        self.envoy_runtime = envoy_runtime or {}
        self.listener_port = free_port()
        self.upstreams: dict[str, EchoUpstream] = {}
        self.control_plane = ControlPlaneProcess.write_config(
            directory,
            repo=self.repo.root,
            endpoints=self.endpoints_path,
            listener_port=self.listener_port,
            poll_interval=poll_interval,
            extra=control_plane_extra,
            kubernetes=kubernetes,
            git_namespaces=git_namespaces,
        )
        self.envoy: EnvoyProcess | None = None
        self._extra_envoys: list[EnvoyProcess] = []

    # -- lifecycle -----------------------------------------------------------------

    def start_upstreams(self) -> None:
        logs = self.directory / "logs"
        for name in self.upstream_names:
            if name not in self.upstreams:
                self.upstreams[name] = EchoUpstream.start(name, log_dir=logs)

    def start(self, *, wait_path: str | None = None) -> None:
        """Start upstreams, control plane and Envoy. The repo must have a commit already."""
        self.start_upstreams()
        if not self.endpoints_path.exists():
            self.set_endpoints({name: [u.address] for name, u in self.upstreams.items()})
        self.control_plane.start()
        self.envoy = self.start_envoy(self.node_id)
        self.envoy.wait_live()
        if wait_path is not None:
            self.wait_status(wait_path, 200)

    def start_envoy(
        self,
        node_id: str,
        *,
        cluster: str = "gateway",
        runtime: dict[str, Any] | None = None,
        control_plane: ControlPlaneProcess | None = None,
    ) -> EnvoyProcess:
        """Another Envoy on this control plane (or on ``control_plane``, another replica);
        ``runtime`` replaces the stack's runtime layer."""
        admin_port = free_port()
        bootstrap = render_bootstrap(
            xds_host="127.0.0.1",
            xds_port=(control_plane or self.control_plane).xds_port,
            admin_port=admin_port,
            node_id=node_id,
            node_cluster=cluster,
            delta=self.delta,
        )
        layer = self.envoy_runtime if runtime is None else runtime
        if layer:
            bootstrap["layered_runtime"] = {"layers": [{"name": "test", "static_layer": layer}]}
        envoy = EnvoyProcess.start(bootstrap, log_dir=self.directory / "logs", admin_port=admin_port, name=f"envoy-{node_id}")
        if self.envoy is not None:
            self._extra_envoys.append(envoy)
        return envoy

    def stop(self) -> None:
        for envoy in [*self._extra_envoys, *([self.envoy] if self.envoy else [])]:
            envoy.stop()
        self.control_plane.stop()
        for upstream in self.upstreams.values():
            upstream.stop()

    # -- inputs ----------------------------------------------------------------------

    def set_endpoints(self, services: dict[str, list[str]]) -> None:
        """Rewrite the static endpoints file atomically (the control plane polls it)."""
        temporary = self.endpoints_path.with_suffix(".tmp")
        temporary.write_text(yaml.safe_dump({"services": services}))
        temporary.replace(self.endpoints_path)

    def configure_gateway(self, **fields: Any) -> None:
        """Merge ``fields`` (camelCase, as in the file) into the control plane's ``gateway:``
        block; before ``start``."""
        path = self.control_plane.config_path
        config = yaml.safe_load(path.read_text())
        config["gateway"].update(fields)
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def commit_routes(self, files: dict[str, list[dict[str, Any]] | str], message: str = "routes") -> str:
        for filename, docs in files.items():
            self.repo.write(filename, docs)
        return self.repo.commit(message)

    # -- observations ----------------------------------------------------------------

    def get(self, path: str, **kwargs: Any) -> Any:
        return get(self.listener_port, path, **kwargs)

    def client(self) -> Client:
        return Client(self.listener_port)

    def wait_status(self, path: str, status: int, timeout: float = 10.0) -> float:
        return wait_for(lambda: self._status(path) == status, timeout, f"{path} → {status}")

    def wait_upstream(self, path: str, upstream: str, timeout: float = 10.0) -> float:
        return wait_for(lambda: self._upstream(path) == upstream, timeout, f"{path} served by {upstream}")

    def _status(self, path: str) -> int:
        try:
            return int(self.get(path).status)
        except OSError:
            return 0

    def _upstream(self, path: str) -> str | None:
        try:
            reply = self.get(path)
        except OSError:
            return None
        return reply.upstream if reply.status == 200 else None

    def __enter__(self) -> GatewayStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
