"""Who may use the control plane's admin port (docs/control-plane-config.md, "The admin port").

- Probes (``/healthz``, ``/readyz``, ``/metrics``): anyone, always: the kubelet and
  Prometheus send no credential, and these show nothing of the routes.
- Writes: ``POST /sync`` needs the operator credential (``admin.operatorCredentialFile``)
  as ``Authorization: Bearer``, or, with ``admin.webhookSecretFile``, a Git host's
  ``X-Hub-Signature-256`` over the body (``operator_or_webhook``: a GitHub webhook cannot
  send a bearer credential); none configured is 503, a missing or wrong one 401 and an
  ``admin.call`` audit event. The breaker endpoints check their own credentials.
- Reads (every other GET: the status page, ``/status``, ``/config``, ``/status/node``,
  ``GET /breakers``): open to the clients ``admin.openReads`` names by their address
  (loopback, the default; private too; never), else the read or the operator credential,
  as a bearer token or, from a browser, as the Basic password (401 asks for it: the
  browser prompts once).
- Any request from a browser's other site is 403, before any credential is looked at: an
  ``Origin`` that is not this address, or ``Sec-Fetch-Site`` other than ``same-origin``
  (a read may also be ``none``: an address typed or bookmarked). A browser's write must
  carry an ``Origin``. A bearer credential already keeps a cross-site page from writing
  (it cannot set ``Authorization`` without a CORS preflight, which this port never
  grants); this is the second lock, and it also keeps cached Basic credentials from being
  replayed by another site.
- DNS rebinding: a page on a name the attacker points at 127.0.0.1 (or at a private
  address) is same-origin to the browser. So an open read from a browser (``_browser``)
  must name the address as an IP literal or ``localhost``; under any other name it needs
  the credential.

No credential is ever echoed or logged.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Literal

from aiohttp import web

from control_plane.config import ControlPlaneConfig
from servicekit.audit import ADMIN_CALL, AuditEvent, AuditSink, Detail
from servicekit.bearer import BearerCheck, read_bearer_credential
from servicekit.webhook_signature import WebhookSignature

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OpenReads = Literal["loopback", "private", "never"]

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
READS = frozenset({"GET", "HEAD"})
READ_CHALLENGE = 'Basic realm="gatehouse control plane", charset="UTF-8"'
WRITE_CHALLENGE = 'Bearer realm="gatehouse control plane"'
SIGNATURE_HEADER = "X-Hub-Signature-256"
_NO_OPERATOR = "writes on this admin address are not configured: set admin.operatorCredentialFile (or admin.webhookSecretFile for POST /sync)"
_NO_READER = "reads on this admin address need a credential, and none is configured: set admin.readCredentialFile"


def peer_may_read(peer: str | None, policy: OpenReads) -> bool:
    """Does ``policy`` let a client at ``peer`` (its IP address) read without a credential?
    The peer, not the bind address: 0.0.0.0 says nothing of who connects, and a private
    address behind a NAT is reached from anywhere."""
    if policy == "never" or not peer:
        return False
    try:
        ip = ipaddress.ip_address(peer.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or (policy == "private" and ip.is_private)


def _literal_host(host: str | None) -> bool:
    """Is the Host header an IP literal or ``localhost`` (with or without a port)?"""
    if not host:
        return False
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host
    else:
        name = host.split(":")[0] if host.count(":") == 1 else host
    if name.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _browser(request: web.Request) -> bool:
    """Does the request come from a browser? Browsers send ``Sec-Fetch-Site`` (since 2020-23)
    or an ``Origin``, and every one calls itself ``Mozilla/``; curl, the CLI, the kubelet
    and Prometheus do none of these."""
    headers = request.headers
    return "Sec-Fetch-Site" in headers or "Origin" in headers or "Mozilla/" in headers.get("User-Agent", "")


def _same_origin(origin: str, host: str | None) -> bool:
    """Is ``Origin`` this very address (the one the request was sent to)?"""
    if not host:
        return False
    origin = origin.strip().lower()
    return origin in (f"http://{host.lower()}", f"https://{host.lower()}")


def cross_site(request: web.Request) -> str | None:
    """Why a browser's request comes from another site, or None."""
    headers = request.headers
    origin, site = headers.get("Origin"), headers.get("Sec-Fetch-Site")
    write = request.method not in READS
    if origin is not None and not _same_origin(origin, request.host):
        return "its Origin is another site"
    if site is not None:
        if site.lower() not in (("same-origin",) if write else ("same-origin", "none")):
            return "Sec-Fetch-Site says another site"
        if write and origin is None:
            return "a browser's write without an Origin"
    return None


class AdminAccess:
    """The admin port's policy: ``middleware`` for every request, ``operator_only`` for writes."""

    def __init__(
        self,
        *,
        operator: str | None,
        reader: str | None,
        open_reads: OpenReads,
        audit: AuditSink | None = None,
        webhook_secret: str | None = None,
    ) -> None:
        self._operator = BearerCheck(operator) if operator is not None else None
        self._webhook = WebhookSignature(webhook_secret) if webhook_secret is not None else None
        self._readers = tuple(BearerCheck(c) for c in (reader, operator) if c is not None)
        self._open_reads = open_reads
        self._audit = audit

    @classmethod
    def from_config(cls, config: ControlPlaneConfig, audit: AuditSink | None = None) -> AdminAccess:
        """BearerCredentialError names a credential file that cannot be used."""
        admin = config.admin
        operator, reader, webhook = (
            read_bearer_credential(config.resolve(path)) if path is not None else None
            for path in (admin.operator_credential_file, admin.read_credential_file, admin.webhook_secret_file)
        )
        return cls(operator=operator, reader=reader, open_reads=admin.open_reads, audit=audit, webhook_secret=webhook)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBES:
            return await handler(request)
        why = cross_site(request)
        if why is not None:
            if request.method not in READS:
                self._refused(request, "cross_site", why)
            return web.json_response({"error": f"refused: {why}"}, status=403)
        if request.method in READS and not self._may_read(request):
            if not self._readers:
                return web.json_response({"error": _NO_READER}, status=503)
            return web.json_response(
                {"error": "a valid read credential is required (Authorization: Bearer ..., or Basic with it as the password)"},
                status=401,
                headers={"WWW-Authenticate": READ_CHALLENGE},
            )
        return await handler(request)

    def _may_read(self, request: web.Request) -> bool:
        # A browser under another name may be a rebinding attack: it needs the credential.
        if peer_may_read(request.remote, self._open_reads) and (not _browser(request) or _literal_host(request.host)):
            return True
        header = request.headers.get("Authorization")
        return any(check.allows(header) or check.allows_basic(header) for check in self._readers)

    def operator_only(self, handler: Handler) -> Handler:
        """``handler`` behind the operator credential (a bearer token only: never Basic)."""
        return self._guarded(handler, webhook=False)

    def operator_or_webhook(self, handler: Handler) -> Handler:
        """``handler`` behind the operator credential or, when configured, a Git host's
        signature of the body (``X-Hub-Signature-256``). A captured signed request can be
        replayed, which only asks for another sync."""
        return self._guarded(handler, webhook=True)

    def _guarded(self, handler: Handler, *, webhook: bool) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            signer = self._webhook if webhook else None
            if self._operator is None and signer is None:
                return web.json_response({"error": _NO_OPERATOR}, status=503)
            if self._operator is not None and self._operator.allows(request.headers.get("Authorization")):
                return await handler(request)
            signature = request.headers.get(SIGNATURE_HEADER)
            if signer is not None and signature is not None:
                try:
                    body = await request.read()
                except web.HTTPRequestEntityTooLarge:
                    self._refused(request, "unauthenticated", "webhook body over the size limit")
                    return web.json_response({"error": "the webhook body is too large to verify"}, status=413)
                if signer.verifies(body, signature):
                    return await handler(request)
                self._refused(request, "unauthenticated", "wrong webhook signature")
                return web.json_response({"error": f"{SIGNATURE_HEADER} does not match the body"}, status=401)
            self._refused(request, "unauthenticated", "missing or wrong operator credential")
            return web.json_response(
                {"error": "a valid operator credential is required (Authorization: Bearer ...)"},
                status=401,
                headers={"WWW-Authenticate": WRITE_CHALLENGE},
            )

        return guarded

    def _refused(self, request: web.Request, outcome: str, reason: str) -> None:
        if self._audit is None:
            return
        details: dict[str, Detail] = {"method": f"{request.method} {request.path}"[:80], "outcome": outcome, "peer": request.remote or ""}
        actor = "unauthenticated" if outcome == "unauthenticated" else "cross_site"
        self._audit.emit(AuditEvent(kind=ADMIN_CALL, actor=actor, reason=reason, details=details))
