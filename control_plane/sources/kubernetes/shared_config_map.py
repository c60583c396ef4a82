"""One ConfigMap the control-plane replicas share state through (the breaker board, the
route ACKs): merge patches of some keys, and the object created on first use.

The chart does not render these ConfigMaps (an upgrade would wipe what the replicas wrote);
the control plane may create ConfigMaps in its namespace and touch only the names it uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubernetes.client import ApiClient, CoreV1Api, V1ConfigMap, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from control_plane.sources.kubernetes.watch import Changes, ResourceWatch

REQUEST_TIMEOUT = 5.0


def watch_one(
    api: ApiClient, namespace: str, name: str, on_changes: Callable[[Changes], None], loop: asyncio.AbstractEventLoop, *, what: str
) -> ResourceWatch:
    """A watch of this one ConfigMap, by a field selector on its name: the chart's Role
    grants list and watch for that name alone."""
    return ResourceWatch(
        api, f"/api/v1/namespaces/{namespace}/configmaps", on_changes, loop,
        name=f"{what}:{namespace}/{name}", field_selector=f"metadata.name={name}",
    )  # fmt: skip


def write_keys(core: CoreV1Api, namespace: str, name: str, batch: dict[str, str | None], *, labels: dict[str, str], about: str) -> None:
    """One JSON merge patch of the keys in ``batch`` (None removes a key, the others stay);
    on 404 the ConfigMap is created with them. Blocking: run it in a worker thread."""
    try:
        _patch(core, namespace, name, batch)
        return
    except ApiException as exc:
        if exc.status != 404:
            raise
    body = V1ConfigMap(
        metadata=V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels={"app.kubernetes.io/managed-by": "gatehouse-control-plane", **labels},
            annotations={"gatehouse.io/about": about},
        ),
        data={k: v for k, v in batch.items() if v is not None},
    )
    try:
        core.create_namespaced_config_map(namespace, body, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status != 409:
            raise
        _patch(core, namespace, name, batch)  # another replica created it meanwhile


def _patch(core: CoreV1Api, namespace: str, name: str, batch: dict[str, str | None]) -> None:
    core.patch_namespaced_config_map(
        name, namespace, {"data": batch}, _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT,
    )
