"""One gateway for the request-line tests (docs/routes.md, "What reaches the upstream"):
a public, an authenticated, a cached, a per-user cached, a validated and three rewritten
routes on one echo upstream, the lean HTTP check and a test issuer. Started once per test
module: the property tests send hundreds of requests through it."""

from __future__ import annotations

import socket
from pathlib import Path
from tests.harness.ext_authz import ExtAuthzProcess
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import Client, Reply, wait_for
from tests.harness.issuer import TestIssuer
from tests.harness.route_repo import route_doc
from tests.integration.conftest import ext_authz_entry

BACKEND = [{"service": "svc-a", "port": 8080}]
PUBLIC = {"auth": {"required": False}}
ROUTES = [
    route_doc("inventory", {"match": {"pathPrefix": "/api/v2/inventory"}, "backends": BACKEND, **PUBLIC}),
    route_doc("secure", {"match": {"pathPrefix": "/secure"}, "backends": BACKEND}),
    route_doc("catalog", {"match": {"pathPrefix": "/catalog"}, "backends": BACKEND, **PUBLIC, "cache": {"ttl": "60s"}}),
    route_doc("mine", {"match": {"pathPrefix": "/mine"}, "backends": BACKEND, "cache": {"ttl": "60s", "varyByUser": True}}),
    route_doc("search", {"match": {"pathPrefix": "/search"}, "backends": BACKEND, **PUBLIC,
                         "validate": {"query": [{"name": "limit", "type": "integer", "maximum": 100}]}}),
    route_doc("legacy", {"match": {"pathPrefix": "/old"}, "backends": BACKEND, **PUBLIC, "rewrite": {"prefix": "/new"}}),
    route_doc("users", {"match": {"path": "/users/{id}/**"}, "backends": BACKEND, **PUBLIC, "rewrite": {"prefix": "/v3/users"}}),
    route_doc("files", {"match": {"pathPrefix": "/files"}, "backends": BACKEND, **PUBLIC,
                        "rewrite": {"regex": "^/files/([^/]+)", "substitution": "/blobs/\\1"}}),
]
WAIT_PATHS = ("/api/v2/inventory/ready", "/catalog/ready", "/search/ready", "/old/ready", "/users/1/ready", "/files/ready")


class RequestLineGateway:
    def __init__(self, directory: Path) -> None:
        self.issuer = TestIssuer()
        jwks = str(self.issuer.write_jwks(directory / "jwks.json"))
        self.authz = ExtAuthzProcess(
            directory / "authz",
            {"issuers": [{"issuer": self.issuer.issuer, "audiences": [self.issuer.audience], "jwksFile": jwks,
                          "requiredClaims": ["exp"]}]},
            transport="http",
        )
        self.stack = GatewayStack(directory / "stack", upstreams=("svc-a",),
                                  control_plane_extra={"extAuthz": ext_authz_entry([self.authz])})
        self.tokens: dict[str, str] = {}
        self._client: Client | None = None

    def start(self) -> RequestLineGateway:
        self.stack.commit_routes({"r.yaml": ROUTES})
        self.stack.start()
        self.authz.use_control_plane(self.stack.control_plane.xds_port)
        self.authz.start()
        for path in WAIT_PATHS:
            wait_for(lambda p=path: self.stack.get(p).status == 200, 30, f"{path} served")
        wait_for(lambda: self.get("/secure/ready", user="alice").status == 200, 30, "/secure served with a token")
        self._client = self.stack.client()
        return self

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        self.authz.stop()
        self.stack.stop()

    def bearer(self, user: str) -> dict[str, str]:
        if user not in self.tokens:
            self.tokens[user] = f"Bearer {self.issuer.token(user)}"
        return {"authorization": self.tokens[user]}

    def get(self, target: str, *, user: str | None = None, headers: dict[str, str] | None = None) -> Reply:
        """One GET on a kept-alive connection; ``target`` goes on the request line as is."""
        sent = {**(self.bearer(user) if user is not None else {}), **(headers or {})}
        client = self._client or self.stack.client()
        try:
            return client.request(target, headers=sent)
        finally:
            if self._client is None:
                client.close()

    def raw(self, request: bytes, timeout: float = 3.0) -> bytes:
        """Send ``request`` as bytes on a new connection; everything Envoy answers until it
        closes or goes quiet (send ``Connection: close`` to have it close after the answer)."""
        with socket.create_connection(("127.0.0.1", self.stack.listener_port), timeout=timeout) as sock:
            sock.sendall(request)
            chunks = []
            try:
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
            except (TimeoutError, ConnectionResetError):
                pass
            return b"".join(chunks)
