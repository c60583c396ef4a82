"""ext_authz's metrics and logs, in process: the token-cache lookups counter (hit, failure_hit,
miss), JWKS fetches by result with their duration, and the request id on every log line a
check writes (and on none it does not own)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from envoy.service.auth.v3 import external_auth_pb2
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ext_authz.errors import TokenError
from ext_authz.tokens.jwks import IssuerKeys, JwksFetch
from ext_authz.metrics import VerifierCollector
from ext_authz.service import MAX_LOGGED_REQUEST_ID, Authorizer, AuthorizationService
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.audit import LogAuditSink
from tests.harness.issuer import forge_signature
from tests.unit.ext_authz.signing import NOW, FakeClock, FakeSource, claims, issuer, raw_token, rsa_key
from tests.unit.ext_authz.test_service import check_request


class Setup:
    def __init__(self, name: str, source: FakeSource | None = None) -> None:
        self.config = issuer(issuer=name)
        self.source = source or FakeSource(rsa_key().jwk())
        self.keys = IssuerKeys(self.config, self.source, clock=FakeClock(100.0))
        self.verifier = TokenVerifier([self.keys], cache_size=100, max_token_bytes=8192, clock=FakeClock(NOW))
        self.service = AuthorizationService(Authorizer(self.verifier, {name: self.config}, None), LogAuditSink())
        self.registry = CollectorRegistry()
        self.registry.register(VerifierCollector(self.verifier, [self.keys]))

    def token(self, **overrides: Any) -> str:
        return rsa_key().sign(claims(iss=self.config.issuer, **overrides))

    async def check(self, headers: dict[str, str]) -> external_auth_pb2.CheckResponse:
        response: external_auth_pb2.CheckResponse = await self.service.Check(check_request(headers), None)
        return response

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """Captured log entries, with the contextvars merged in as servicekit/logs.py configures."""
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as entries:
        yield entries


def bearer(token: str, request_id: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-request-id": request_id}


# --- the token caches -------------------------------------------------------------------------


async def test_lookups_count_hits_remembered_failures_and_misses() -> None:
    s = Setup("https://lookups.example/")
    await s.keys.refresh()
    token = s.token()
    for index in range(3):
        assert (await s.check(bearer(token, f"ok-{index}"))).status.code == 0
    bad = forge_signature(s.token(jti="jti-bad"))
    for index in range(2):
        assert (await s.check(bearer(bad, f"bad-{index}"))).denied_response.status.code == 401
    assert (await s.check({"x-request-id": "none"})).denied_response.status.code == 401  # no token: no lookup

    lookups = {r: s.sample("gatehouse_authz_token_cache_lookups_total", result=r) for r in ("hit", "failure_hit", "miss")}
    assert lookups == {"hit": 2.0, "failure_hit": 1.0, "miss": 2.0}
    assert s.sample("gatehouse_authz_token_cache_entries") == 1.0
    assert s.sample("gatehouse_authz_token_cache_hits_total") == 2.0, "the older counter says the same"
    assert s.sample("gatehouse_authz_token_verifications_total") == 2.0


async def test_the_exposition_parses_with_conventional_names() -> None:
    s = Setup("https://names.example/")
    await s.keys.refresh()
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(s.registry).decode())}
    assert families["gatehouse_authz_token_cache_lookups"].type == "counter"
    assert families["gatehouse_authz_jwks_fetches"].type == "counter"
    assert families["gatehouse_authz_token_cache_entries"].type == "gauge"
    for family in families.values():
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
            assert set(sample.labels) <= {"issuer", "result"}, sample


# --- JWKS fetches -------------------------------------------------------------------------------


class NotModifiedAfterFirst(FakeSource):
    async def fetch(self, known_version: object | None) -> JwksFetch:
        if known_version is not None and not self.fail:
            self.calls += 1
            return JwksFetch(None, known_version, self.max_age)
        result = await super().fetch(known_version)
        return JwksFetch(result.document, "v1", result.max_age)


async def test_jwks_fetches_are_counted_by_result_and_timed() -> None:
    name = "https://jwks-results.example/"
    s = Setup(name, NotModifiedAfterFirst(rsa_key().jwk()))

    def timed() -> float:
        return REGISTRY.get_sample_value("gatehouse_authz_jwks_fetch_duration_seconds_count", {"issuer": name}) or 0.0

    before = timed()
    assert await s.keys.refresh()  # ok: a document with keys
    assert await s.keys.refresh()  # 304-like: unchanged
    assert await s.keys.refresh()
    s.source.fail = True
    assert not await s.keys.refresh()  # error, keys kept
    results = {r: s.sample("gatehouse_authz_jwks_fetches_total", issuer=name, result=r) for r in ("ok", "not_modified", "error")}
    assert results == {"ok": 1.0, "not_modified": 2.0, "error": 1.0}
    assert s.sample("gatehouse_jwks_fetches_total", issuer=name) == 4.0
    assert s.sample("gatehouse_jwks_fetch_errors_total", issuer=name) == 1.0
    assert s.sample("gatehouse_jwks_keys_usable", issuer=name) == 1.0
    assert timed() == before + 4


async def test_an_unknown_kid_refetch_is_counted_per_issuer_never_per_kid() -> None:
    s = Setup("https://unknown-kid.example/")
    await s.keys.refresh()
    with pytest.raises(TokenError) as caught:
        await s.keys.key_for("no-such-kid-4f1c", "RS256")
    assert caught.value.reason == "unknown_kid"
    assert s.sample("gatehouse_authz_jwks_unknown_kid_refetches_total", issuer="https://unknown-kid.example/") == 1.0
    assert "no-such-kid-4f1c" not in generate_latest(s.registry).decode()


# --- the request id on log lines ------------------------------------------------------------------


async def test_every_line_a_check_logs_carries_its_request_id(logs: list[dict[str, Any]]) -> None:
    s = Setup("https://logs.example/")
    await s.keys.refresh()
    unsafe = s.token(role="admin\r\nx-evil: 1", jti="jti-unsafe")
    assert (await s.check(bearer(unsafe, "req-unsafe"))).status.code == 0
    expired = s.token(exp=int(NOW) - 120, jti="jti-expired")
    assert (await s.check(bearer(expired, "req-expired"))).denied_response.status.code == 401

    [dropped] = [e for e in logs if e["event"] == "claims_not_forwarded"]
    assert dropped["request_id"] == "req-unsafe"
    [audit] = [e for e in logs if e["event"] == "audit"]
    assert (audit["request_id"], audit["reason"], audit["subject"]) == ("req-expired", "expired", None)
    text = json.dumps(logs, default=str)
    for token in (unsafe, expired):
        for piece in token.split("."):
            assert piece not in text
    assert "x-evil" not in text and "orders:read" not in text
    assert "request_id" not in structlog.contextvars.get_contextvars(), "unbound once the check is done"


async def test_a_long_client_request_id_is_cut_in_logs_but_echoed_whole(logs: list[dict[str, Any]]) -> None:
    s = Setup("https://long-id.example/")
    await s.keys.refresh()
    long_id = "r" * 5000
    response = await s.check({"x-request-id": long_id, "authorization": "Bearer " + raw_token({"alg": "none"}, {"sub": "x"})})
    assert json.loads(response.denied_response.body)["error"]["request_id"] == long_id
    [audit] = [e for e in logs if e["event"] == "audit"]
    assert audit["reason"] == "alg_not_allowed" and audit["request_id"] == "r" * MAX_LOGGED_REQUEST_ID


async def test_a_shared_jwks_fetch_does_not_carry_the_request_id_that_started_it(logs: list[dict[str, Any]]) -> None:
    s = Setup("https://shared-fetch.example/")
    await s.keys.refresh()
    s.source.fail = True
    token = rsa_key("rsa-rotated").sign(claims(iss="https://shared-fetch.example/"))
    response = await s.check(bearer(token, "req-kid"))
    assert json.loads(response.denied_response.body)["error"]["reason"] == "unknown_kid"
    [failed] = [e for e in logs if e["event"] == "jwks_fetch_failed"]
    assert "request_id" not in failed, failed
    [audit] = [e for e in logs if e["event"] == "audit"]
    assert audit["request_id"] == "req-kid"
