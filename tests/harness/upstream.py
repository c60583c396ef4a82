"""Sample upstream HTTP services (examples/upstream/echo.py) as real processes."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from .netns import TestNetwork
from .ports import free_port
from .processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
ECHO_SCRIPT = REPO_ROOT / "examples" / "upstream" / "echo.py"


def health_ok(port: int, host: str = "127.0.0.1") -> bool:
    """True if GET /health answers 200 (the server is serving, not just bound)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=0.5) as response:
            status: int = response.status
            return status == 200
    except OSError:  # includes URLError and HTTPError (non-2xx)
        return False


class EchoUpstream:
    """One echo service: answers every request with JSON naming itself (header x-upstream)."""

    def __init__(self, process: ManagedProcess, *, name: str, port: int, host: str = "127.0.0.1") -> None:
        self.process = process
        self.name = name
        self.port = port
        self.host = host

    @classmethod
    def start(
        cls,
        name: str,
        *,
        log_dir: Path,
        port: int | None = None,
        start_timeout: float = 15.0,
        host: str = "127.0.0.1",
        network: TestNetwork | None = None,
    ) -> EchoUpstream:
        """Start `echo.py --name <name>` with this interpreter; return once /health is 200.

        With ``network``, it runs inside that namespace (``host`` is one of its addresses).
        """
        chosen = port if port is not None else free_port()
        argv = [sys.executable, str(ECHO_SCRIPT), "--name", name, "--port", str(chosen), "--host", host]
        if network is not None:
            argv = network.argv(argv)
        process = ManagedProcess.start(argv, name=f"upstream-{name}", log_dir=log_dir, cwd=REPO_ROOT)
        try:
            process.wait_until(lambda: health_ok(chosen, host), start_timeout, f"GET /health on {host}:{chosen}")
        except TimeoutError:
            process.stop()
            raise
        return cls(process, name=name, port=chosen, host=host)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self, timeout: float = 10.0) -> None:
        self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: an upstream crash, for outlier-detection and retry tests."""
        self.process.kill()

    def __repr__(self) -> str:
        return f"EchoUpstream(name={self.name!r}, address={self.address}, pid={self.pid})"
