"""List, then watch, one resource type, forever, in a thread of its own.

- Watches resume from the last ``resourceVersion`` and ask for bookmarks, so a reconnect
  replays nothing and misses nothing.
- On ``410 Gone`` (the version was compacted away) it relists, and turns the difference
  between what it had and what it listed into changes, so deletions made while it was
  away are not lost.
- On any other failure it keeps what it has and retries with back-off: a lost API
  server never turns into "no objects".
- An ``optional`` resource (a CRD the cluster may not have) answering 404 counts as an
  empty list: the watch is synced, what it had is deleted, and it looks again every
  ``ABSENT_RETRY`` seconds.

The kubernetes client is synchronous; running it in its own thread keeps the event loop
free. Changes are handed to the loop in batches through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from control_plane.errors import SourceError
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

log = structlog.get_logger(component="source.kubernetes")

Object = dict[str, Any]
Changes = dict[str, Object | None]
"""namespace/name → the object, or None when it is gone."""

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 90.0
WATCH_SECONDS = 240
LIST_PAGE = 500
BACKOFF_MAX = 30.0
ABSENT_RETRY = 5.0


class Gone(SourceError):
    """The resourceVersion we resume from no longer exists: relist."""

    def __init__(self, message: str = "resourceVersion expired") -> None:
        super().__init__(message, transient=True)


def object_key(obj: Object) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class ResourceWatch:
    def __init__(
        self,
        api: client.ApiClient,
        path: str,
        on_changes: Callable[[Changes], None],
        loop: asyncio.AbstractEventLoop,
        *,
        name: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        optional: bool = False,
    ) -> None:
        self._api = api
        self._selector: list[tuple[str, Any]] = [
            *([("labelSelector", label_selector)] if label_selector else []),
            *([("fieldSelector", field_selector)] if field_selector else []),
        ]
        self._path = path
        self._on_changes = on_changes
        self._loop = loop
        self.name = name
        self._objects: dict[str, Object] = {}
        self._version = ""
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch:{name}", daemon=True)
        self.synced = threading.Event()
        """Set after the first successful list."""
        self.errors = 0
        self.relists = 0
        self._optional = optional
        self.absent = False
        """An optional resource whose API answered 404 (not installed) the last time."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop now: also cut the open watch, or the thread would sit in a read for minutes."""
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # noqa: BLE001, S110 - already closed is fine
                pass

    # -- thread ----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if not self._version:
                    self._relist()
                self._watch()
                backoff = 0.5
            except Gone:
                log.info("watch_expired_relisting", resource=self.name, version=self._version)
                self._version = ""
            except (ReadTimeoutError, ProtocolError) as exc:
                # A quiet watch that outlived the read timeout, or a dropped stream: resume.
                log.debug("watch_reconnect", resource=self.name, reason=type(exc).__name__)
            except ApiException as exc:
                if self._optional and exc.status == 404:
                    self._absent()
                else:
                    self._failed(exc, backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
            except Exception as exc:  # noqa: BLE001 - any failure: keep state, retry later
                self._failed(exc, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _absent(self) -> None:
        """The resource's API is not installed: as good as an empty list, looked for again later."""
        if not self.absent:
            log.info("watch_resource_absent", resource=self.name, retry_in=ABSENT_RETRY)
        self.absent = True
        changes: Changes = {key: None for key in self._objects}
        self._objects = {}
        self._version = ""
        self._deliver(changes, force=not self.synced.is_set())
        self.synced.set()
        self._stop.wait(ABSENT_RETRY)

    def _failed(self, exc: Exception, backoff: float) -> None:
        self.errors += 1
        log.warning("watch_failed", resource=self.name, error=str(exc)[:500], retry_in=round(backoff, 1))
        self._stop.wait(backoff)

    def _request(self, query: list[tuple[str, Any]]) -> Any:
        """GET through the kubernetes client (auth, TLS, proxies), body left unread."""
        method, url, headers, body, post = self._api.param_serialize(
            "GET",
            self._path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(
            method, url, header_params=headers, body=body, post_params=post,
            _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        )
        if response.status >= 400:
            data = response.read()  # type: ignore[no-untyped-call]
            response.response.release_conn()
            if response.status == 410:
                raise Gone()
            raise ApiException(status=response.status, reason=response.reason, body=data)
        return response

    def _relist(self) -> None:
        listed: dict[str, Object] = {}
        token = ""
        version = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", LIST_PAGE), *self._selector]
            if token:
                query.append(("continue", token))
            body = json.loads(self._request(query).read())
            for item in body.get("items", []):
                listed[object_key(item)] = item
            meta = body.get("metadata", {})
            version = meta.get("resourceVersion", version)
            token = meta.get("continue", "")
            if not token:
                break
        changes: Changes = {key: obj for key, obj in listed.items() if self._objects.get(key) != obj}
        changes.update({key: None for key in self._objects if key not in listed})
        self._objects = listed
        self._version = version
        self.relists += 1
        self.absent = False
        self._deliver(changes, force=not self.synced.is_set())
        self.synced.set()

    def _watch(self) -> None:
        query = [
            ("watch", "true"),
            ("resourceVersion", self._version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", WATCH_SECONDS),
            *self._selector,
        ]
        response = self._request(query).response
        self._response = response
        try:
            buffer = b""
            for chunk in response.stream(4096, decode_content=True):
                if self._stop.is_set():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self._event(json.loads(line))
        finally:
            self._response = None
            response.release_conn()

    def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        version = obj.get("metadata", {}).get("resourceVersion")
        if version:
            self._version = version
        if kind == "BOOKMARK":
            return
        key = object_key(obj)
        if kind == "DELETED":
            if self._objects.pop(key, None) is not None:
                self._deliver({key: None})
        elif kind in ("ADDED", "MODIFIED"):
            self._objects[key] = obj
            self._deliver({key: obj})

    def _deliver(self, changes: Changes, *, force: bool = False) -> None:
        if changes or force:
            self._loop.call_soon_threadsafe(self._on_changes, changes)


def wait_synced(watches: list[ResourceWatch], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    return all(w.synced.wait(max(0.0, deadline - time.monotonic())) for w in watches)
