"""The control plane's exception tree.

    ControlPlaneError
     ├── InvalidRoutesError     one or more route documents are invalid (all problems at once)
     ├── InvalidEndpointsError  the static endpoints file is invalid
     ├── SourceError            a source could not be read (``transient`` says whether to retry)
     │    └── Gone              a Kubernetes watch's resourceVersion no longer exists: relist
     │                          (sources/kubernetes/watch.py)
     └── RequestError           ValueError too: a request to the admin port refused with 400;
          │                     ``str()`` names the field and the rule
          ├── OperatorRequestError  a breaker move (breakers/operator_api.py)
          └── TallyBodyError        telemetry's tally batch (breakers/tally_api.py)

A bad config file is the kernel's ``servicekit.errors.ConfigError``, the same for every
service. Every error carries what an operator needs to act: which file or object, which field,
and why. Lower-level errors (YAML, pydantic, git) are converted at the edge that reads
them, never deeper.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a document was refused: where, which field, why."""

    location: str
    field: str
    reason: str

    def __str__(self) -> str:
        if self.field:
            return f"{self.location}: {self.field}: {self.reason}"
        return f"{self.location}: {self.reason}"


class ControlPlaneError(Exception):
    """Base of every error the control plane raises on purpose."""


class _ProblemsError(ControlPlaneError):
    def __init__(self, problems: list[Problem], *, context: str = "") -> None:
        self.problems = problems
        self.context = context
        head = f"{context}: " if context else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{head}{len(problems)} problem(s)\n{lines}")


class InvalidRoutesError(_ProblemsError):
    """One or more route documents are invalid; ``problems`` lists all of them."""


class InvalidEndpointsError(_ProblemsError):
    """The static endpoints file is invalid; ``problems`` lists all of them."""


class SourceError(ControlPlaneError):
    """A source could not be read. ``transient`` errors are retried on the next poll."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class RequestError(ControlPlaneError, ValueError):
    """A request to the admin port that is refused with 400; ``str()`` names the field and the rule."""
