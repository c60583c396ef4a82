"""A translation read as Envoy's JSON (control_plane/render.py), for tests that check one
fact of it; the golden files (testdata/out) pin the whole of each case."""

from __future__ import annotations

from typing import Any

from control_plane.render import resource_data
from control_plane.translator import Translation


def hcm(translation: Translation) -> dict[str, Any]:
    """The HTTP connection manager of the one listener."""
    [listener] = [resource_data(r) for r in translation.listeners]
    [chain] = listener["filter_chains"]
    [network_filter] = chain["filters"]
    config: dict[str, Any] = network_filter["typed_config"]
    return config


def http_filters(translation: Translation) -> list[dict[str, Any]]:
    filters: list[dict[str, Any]] = hcm(translation)["http_filters"]
    return filters


def filter_names(translation: Translation) -> list[str]:
    return [f["name"] for f in http_filters(translation)]


def filter_config(translation: Translation, name: str) -> dict[str, Any]:
    """The typed_config of the one filter called ``name``."""
    [found] = [f for f in http_filters(translation) if f["name"] == name]
    config: dict[str, Any] = found.get("typed_config", {})
    return config


def entries_by_route(translation: Translation) -> dict[str, list[dict[str, Any]]]:
    """Every route entry, by route id, in every virtual host."""
    [config] = [resource_data(r) for r in translation.routes]
    out: dict[str, list[dict[str, Any]]] = {}
    for vhost in config["virtual_hosts"]:
        for entry in vhost.get("routes", []):
            out.setdefault(entry["name"], []).append(entry)
    return out


def clusters_by_name(translation: Translation) -> dict[str, dict[str, Any]]:
    return {r.name: resource_data(r) for r in translation.clusters}
