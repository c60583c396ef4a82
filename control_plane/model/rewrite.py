"""A route's ``rewrite``: the path the upstream sees, either the matched prefix swapped or
a regex substitution."""

from __future__ import annotations

from pydantic import model_validator

from servicekit.model import Model
from control_plane.model.declared_rules import Excludes, ExactlyOne, Requires, enforce
from control_plane.model.match import Match
from control_plane.model.paths import MAX_VARIABLES, parse_path
from control_plane.model.shared_types import PathPrefix, Regex, cel


_RULES = (
    ExactlyOne("prefix", "regex"),
    Requires("regex", "substitution", "regex needs a substitution"),
    Excludes("prefix", "substitution", "substitution only goes with regex"),
)


class Rewrite(Model):
    """Either swap the matched prefix, or apply a regex substitution to the path."""

    model_config = cel(*_RULES)

    prefix: PathPrefix | None = None
    regex: Regex | None = None
    substitution: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Rewrite:
        enforce(self, _RULES)
        return self


REWRITE_SPEC_RULES = (
    (
        "!(has(self.rewrite) && has(self.rewrite.prefix) && has(self.match.pathRegex))",
        "rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex",
    ),
)
"""The CEL form, on ``RouteSpec``, of ``check_rewrite``'s first rule."""


def check_rewrite(rewrite: Rewrite | None, match: Match) -> None:
    """A prefix rewrite needs a prefix to swap; ValueError."""
    if rewrite is not None and rewrite.prefix is not None:
        if match.path_regex is not None:
            raise ValueError("rewrite.prefix: a pathRegex route has no prefix to swap; use rewrite.regex")
        pattern = parse_path(match.path) if match.path is not None else None
        if pattern is not None and pattern.glob and len(pattern.variables) >= MAX_VARIABLES:
            raise ValueError(
                f"rewrite.prefix: rewriting {pattern.text} needs its trailing /** named as a variable, "
                f"and Envoy allows at most {MAX_VARIABLES}; use fewer variables"
            )
