"""What every Gatehouse process's YAML config file shares: its loader and address fields."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import Annotated, TypeVar

from pydantic import Field, ValidationError

from servicekit.errors import ConfigError
from servicekit.model import Model
from servicekit.yaml_documents import load_plain

HostPort = Annotated[str, Field(pattern=r"^[^\s:]+:[0-9]{1,5}$|^\[[0-9a-fA-F:]+\]:[0-9]{1,5}$")]
"""``host:port`` or ``[ipv6]:port``."""


class Listen(Model):
    listen: HostPort


def field_path(loc: Sequence[str | int]) -> str:
    """('spec', 'backends', 0, 'weight') → "spec.backends[0].weight"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (the key)"
        else:
            out += f".{part}" if out else part
    return out


ConfigT = TypeVar("ConfigT", bound=Model)


def load_config_file(path: Path, model: type[ConfigT]) -> ConfigT:
    """``path`` as ``model``, with ``baseDir`` set to its folder (relative paths resolve
    from there). Every error names the file, the field and the reason: ConfigError."""
    try:
        data = load_plain(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    data["baseDir"] = str(path.resolve().parent)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [f"{path}: {field_path(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise ConfigError("\n".join(lines)) from None
