"""The base of every config and route model: strict, immutable, camelCase in YAML.

Unknown fields are errors and types are not coerced, so a typo in a config file is
refused with its name instead of being ignored. Python attributes are snake_case.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )
