"""One verdict line per step of `gatehouse dev`, and a stop at the first failure.

    ok   redis up on 127.0.0.1:40123 (0.1 s)
    FAIL envoy serving http://127.0.0.1:8080/api/v2/checkout: envoy (pid 4711) exited before ...

A step is a block (`with steps.step(name):`) or a check (`steps.check(name, action)`, where
the action returns None when all is well, or the reason it is not). The first failure
prints its FAIL line (the reason's first line; any further lines, such as a log tail, go
to the details stream) and raises StepFailed, so no later step runs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


class StepError(Exception):
    """A step cannot go on; the message is the reason shown on its FAIL line."""


class StepFailed(Exception):
    """A step failed and its FAIL line has been printed; later steps must not run."""

    def __init__(self, step: str, reason: str) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


# What a step may raise that means "this step failed" rather than "a bug": the stack's own
# errors, a service that did not come up in time (ManagedProcess.wait_until), a process that
# could not be run.
STEP_ERRORS: tuple[type[BaseException], ...] = (StepError, TimeoutError, OSError, subprocess.SubprocessError)


class Steps:
    def __init__(self, *, out: TextIO | None = None, details: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stdout
        self._details = details if details is not None else sys.stderr
        self.passed: list[str] = []

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        except STEP_ERRORS as exc:
            self._fail(name, str(exc) or type(exc).__name__)
            raise StepFailed(name, str(exc)) from exc
        self.passed.append(name)
        print(f"ok   {name} ({time.monotonic() - started:.1f} s)", file=self._out, flush=True)

    def check(self, name: str, action: Callable[[], str | None]) -> None:
        with self.step(name):
            reason = action()
            if reason is not None:
                raise StepError(reason)

    def _fail(self, name: str, reason: str) -> None:
        first, _, rest = reason.strip().partition("\n")
        print(f"FAIL {name}: {first}", file=self._out, flush=True)
        if rest:
            print("\n".join(f"     {line}" for line in rest.splitlines()), file=self._details, flush=True)
