"""Validated routes with provenance: no protobuf, no I/O."""

from control_plane.model.loading import duplicate_problems, parse_route_file
from control_plane.model.ordering import most_specific_first, specificity_key
from control_plane.model.route import Origin, Route
from control_plane.model.schema import RouteDocument, RouteSpec

__all__ = [
    "Origin",
    "Route",
    "RouteDocument",
    "RouteSpec",
    "duplicate_problems",
    "most_specific_first",
    "parse_route_file",
    "specificity_key",
]
