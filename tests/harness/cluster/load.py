"""wrk, run inside the cluster's namespace, and what its report says."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from .cluster import Cluster


@dataclass(frozen=True)
class WrkResult:
    requests: int
    non_2xx_3xx: int
    connect_errors: int
    read_errors: int
    write_errors: int
    timeouts: int
    report: str

    @property
    def failed(self) -> int:
        return self.non_2xx_3xx + self.connect_errors + self.read_errors + self.write_errors + self.timeouts


def parse(report: str) -> WrkResult:
    requests = re.search(r"(\d+) requests in", report)
    if requests is None:
        raise ValueError(f"not a wrk report:\n{report}")
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", report)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", report)
    connect, read, write, timeout = (int(g) for g in errors.groups()) if errors else (0, 0, 0, 0)
    return WrkResult(int(requests.group(1)), int(non_2xx.group(1)) if non_2xx else 0, connect, read, write, timeout, report)


class Wrk:
    """``wrk`` in the background: ``start()``, then ``stop()`` (SIGINT: wrk prints its report)
    or ``wait()`` for its duration."""

    def __init__(self, cluster: Cluster, url: str, *, duration: float, connections: int = 4,
                 headers: Sequence[str] = (), timeout: str = "5s") -> None:
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{int(duration)}s", f"--timeout={timeout}"]
        for header in headers:
            argv += ["-H", header]
        self.argv = cluster.exec_argv([*argv, url])
        self.env = cluster.env()
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> Wrk:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env)  # noqa: S603
        return self

    def wait(self, timeout: float = 600) -> WrkResult:
        assert self.process is not None
        out, _ = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, out
        return parse(out)

    def stop(self) -> WrkResult:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        return self.wait(30)
