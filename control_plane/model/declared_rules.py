"""Cross-field rules declared once, giving both their CEL (for the CRD) and their Python
check, so the two cannot drift apart.

    _RULES = (ExactlyOne("prefix", "regex"), Requires("regex", "substitution", "regex needs a substitution"))

    class Rewrite(Model):
        model_config = cel(*_RULES)
        ...
        @model_validator(mode="after")
        def _rules(self) -> Rewrite:
            enforce(self, _RULES)
            return self

Only simple shapes are declared here: which fields are set, and a duration's bounds. A
rule that compares fields, reads defaults or spans features is written in both languages
next to each other, and ``tests/e2e/test_crd_cel_parity.py`` holds the two together (as
it does these).

Field names are the YAML ones; "set" means present in the document (CEL's ``has``), which
in Python is "not None" (for a list: not empty, see ``AnyListed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel

from servicekit.durations import human_duration_ms


@cache
def _attributes(model: type[BaseModel]) -> dict[str, str]:
    """YAML name → Python attribute, for one model class."""
    return {info.alias or name: name for name, info in model.model_fields.items()}


def _value(model: BaseModel, field: str) -> object:
    return getattr(model, _attributes(type(model))[field])


@dataclass(frozen=True, init=False)
class ExactlyOne:
    """Exactly one of ``fields`` is set. The message lists them ("set exactly one of a or
    b"; with three or more, "set exactly one of a, b, c" and, in Python, which were set)."""

    fields: tuple[str, ...]

    def __init__(self, *fields: str) -> None:
        object.__setattr__(self, "fields", fields)

    @property
    def message(self) -> str:
        if len(self.fields) == 2:
            return f"set exactly one of {self.fields[0]} or {self.fields[1]}"
        return f"set exactly one of {', '.join(self.fields)}"

    def cel(self) -> tuple[str, str]:
        if len(self.fields) == 2:
            return f"has(self.{self.fields[0]}) != has(self.{self.fields[1]})", self.message
        return "[" + ", ".join(f"has(self.{f})" for f in self.fields) + "].filter(x, x).size() == 1", self.message

    def broken(self, model: BaseModel) -> str | None:
        chosen = [f for f in self.fields if _value(model, f) is not None]
        if len(chosen) == 1:
            return None
        return self.message if len(self.fields) == 2 else f"{self.message} (got {chosen or 'none'})"


@dataclass(frozen=True)
class Requires:
    """``field`` set needs ``needs`` set."""

    field: str
    needs: str
    message: str

    def cel(self) -> tuple[str, str]:
        return f"!has(self.{self.field}) || has(self.{self.needs})", self.message

    def broken(self, model: BaseModel) -> str | None:
        return self.message if _value(model, self.field) is not None and _value(model, self.needs) is None else None


@dataclass(frozen=True)
class Excludes:
    """``field`` and ``other`` are not both set."""

    field: str
    other: str
    message: str

    def cel(self) -> tuple[str, str]:
        return f"!has(self.{self.field}) || !has(self.{self.other})", self.message

    def broken(self, model: BaseModel) -> str | None:
        return self.message if _value(model, self.field) is not None and _value(model, self.other) is not None else None


@dataclass(frozen=True)
class AnyListed:
    """At least one of the list ``fields`` has an item."""

    fields: tuple[str, ...]
    message: str

    def cel(self) -> tuple[str, str]:
        return " || ".join(f"(has(self.{f}) && size(self.{f}) > 0)" for f in self.fields), self.message

    def broken(self, model: BaseModel) -> str | None:
        return None if any(_value(model, f) for f in self.fields) else self.message


@dataclass(frozen=True)
class DurationWithin:
    """The duration ``field`` is from ``low_ms`` to ``high_ms``, both included; ``required``:
    the field has no default (CEL then reads it without asking ``has``)."""

    field: str
    low_ms: int
    high_ms: int
    required: bool = False

    @property
    def _bounds(self) -> str:
        return f"from {human_duration_ms(self.low_ms)} to {human_duration_ms(self.high_ms)}"

    def cel(self) -> tuple[str, str]:
        f = f"self.{self.field}"
        within = (
            f"duration({f}) >= duration('{human_duration_ms(self.low_ms)}')"
            f" && duration({f}) <= duration('{human_duration_ms(self.high_ms)}')"
        )
        return (within if self.required else f"!has({f}) || ({within})"), f"{self.field} must be {self._bounds}"

    def broken(self, model: BaseModel) -> str | None:
        value = _value(model, self.field)
        if not isinstance(value, int) or self.low_ms <= value <= self.high_ms:
            return None
        return f"{self.field} ({human_duration_ms(value)}) must be {self._bounds}"


DeclaredRule = ExactlyOne | Requires | Excludes | AnyListed | DurationWithin


def enforce(model: BaseModel, rules: tuple[DeclaredRule, ...]) -> None:
    """ValueError with the message of the first rule ``model`` breaks, in declared order."""
    for rule in rules:
        message = rule.broken(model)
        if message is not None:
            raise ValueError(message)
