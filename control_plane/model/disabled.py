"""A route's ``disabled``: answer directly, without an upstream."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from servicekit.model import Model


class Disabled(Model):
    """Answer directly, without an upstream: a feature flag or a maintenance page."""

    status: Annotated[int, Field(ge=200, le=599)] = 503
    body: Annotated[str, Field(max_length=4096)] = ""
