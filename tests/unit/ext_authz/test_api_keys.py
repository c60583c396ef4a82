"""API keys in the HTTP check, on an in-memory store: the key's format and hash, the wire
form, the mirror's lookup by hash and its revocation, and what a client gets for each
case (the key wins over a token, neither gets both challenges, consumers allow/deny,
``x-user-id``/``x-consumer`` and a client's claim headers removed). Never the key in an
answer."""

from __future__ import annotations


import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import fields

import pytest

from ext_authz.check.api_keys import KEY_PREFIX, ApiKeyCheck, KeyRule, key_hash, key_rule, new_key
from ext_authz.denial_audit import DenialAudit
from ext_authz.errors import UnavailableError
from ext_authz.check.http_check import HttpCheck
from ext_authz.check.route_table import RouteSubscription, RouteTable
from ext_authz.check.steps import CheckParts
from servicekit.check_contract import ROUTE_HEADER
from ext_authz.tokens.jwks import IssuerKeys
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.entries import ApiKey, Change, Entry, RevocationSet
from ext_authz.revocation.store import decode_change, encode_change
from ext_authz.service import Authorizer
from ext_authz.tokens.verifier import TokenVerifier
from servicekit.audit import MemoryAuditSink
from servicekit.http1_server import Request
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.unit.ext_authz.revocation.fake_store import FakeStore
from tests.unit.ext_authz.revocation.test_mirror_loop import eventually, fast_mirror
from tests.unit.ext_authz.signing import ISSUER, NOW, FakeClock, FakeSource, claims, issuer, rsa_key

ROUTE = "shop/partners"


def record(consumer: str = "partner-a") -> tuple[str, ApiKey]:
    key_id, key = new_key()
    return key, ApiKey(key_id, consumer, key_hash(key), 1_700_000_000.0)


def test_a_key_is_random_prefixed_and_kept_only_as_its_sha256() -> None:
    key_id, key = new_key()
    assert key.startswith(f"{KEY_PREFIX}{key_id}_") and len(key_id) == 8 and int(key_id, 16) >= 0
    assert len(key) == len(KEY_PREFIX) + 9 + 43, "32 random bytes, urlsafe base64"
    assert new_key()[1] != key
    assert key_hash(key) == hashlib.sha256(key.encode()).digest()
    assert [f.name for f in fields(ApiKey)] == ["key_id", "consumer", "key_hash", "created", "source"], "no field holds the key"


def test_the_set_finds_a_key_by_its_hash_and_forgets_it_on_unkey() -> None:
    key, stored = record()
    keys = RevocationSet(grace=0)
    keys.apply(Change("key", Entry("key", stored.key_id, None, stored)))
    assert keys.api_key(key_hash(key)) == stored
    assert keys.api_key(key_hash(key + "x")) is None
    other = RevocationSet(grace=0)
    assert keys.differences(other) == 1, "a resync repairs a missed key"
    keys.apply(Change("unkey", Entry("key", stored.key_id, None, stored)))
    assert keys.api_key(key_hash(key)) is None and keys.differences(other) == 0


def test_the_wire_form_carries_the_hash_never_the_key() -> None:
    key, stored = record()
    for op in ("key", "unkey"):
        message = encode_change(Change(op, Entry("key", stored.key_id, None, stored)))  # type: ignore[arg-type]
        # ghk_<key id>_<secret>: the secret itself may hold '_' (token_urlsafe), so split from the left.
        assert key not in message and key.split("_", 2)[2] not in message
        assert decode_change(message).entry.api_key == stored
    good = json.loads(encode_change(Change("key", Entry("key", stored.key_id, None, stored))))
    for field, value, reason in [
        ("hash", "abcd", "sha256"), ("consumer", "Bad Name\r\nx-user-id: root", "consumer"), ("created", "now", "number"),
    ]:
        with pytest.raises(ValueError, match=reason):
            decode_change(json.dumps({**good, field: value}))


class Gate:
    def __init__(self, check: HttpCheck, table: RouteTable, store: FakeStore, mirror: RevocationMirror, audit: MemoryAuditSink) -> None:
        self.check, self.table, self.store, self.mirror, self.audit = check, table, store, mirror, audit

    async def add(self, stored: ApiKey) -> None:
        """Create the key in the store and wait for the mirror to hear of it (pub/sub)."""
        await self.store.add_key(stored)
        await eventually(lambda: self.mirror.api_key(stored.key_hash, time.time()) is not None)

    def route(self, *, only: bool = False, allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> None:
        policy = policy_pb2.RoutePolicy(route=ROUTE)
        policy.auth.api_keys = True
        policy.auth.api_keys_only = only
        policy.auth.allow_consumers.extend(allow)
        policy.auth.deny_consumers.extend(deny)
        self.table.replace([policy])

    async def ask(self, *, key: str | None = None, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
        headers = {"x-request-id": "req-1", ROUTE_HEADER: ROUTE}
        if key is not None:
            headers["x-api-key"] = key
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        raw = await self.check(Request("GET", "/partners", headers))
        head, _, body = raw.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        return int(status_line.split()[1]), {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}, body


@pytest.fixture
async def gate() -> AsyncIterator[Gate]:
    clock = FakeClock(NOW)
    config = issuer()
    keys = IssuerKeys(config, FakeSource(rsa_key().jwk()), clock=FakeClock(100.0))
    await keys.refresh()
    verifier = TokenVerifier([keys], cache_size=100, max_token_bytes=8192, clock=clock)
    store = FakeStore()
    mirror = fast_mirror(store)
    await mirror.start()
    assert await mirror.wait_ready(2)
    authorizer = Authorizer(verifier, {ISSUER: config}, None, clock=clock)
    audit = MemoryAuditSink()
    table = RouteTable(CheckParts(authorizer, DenialAudit(audit), ApiKeyCheck(mirror)))
    check = HttpCheck(table)
    yield Gate(check, table, store, mirror, audit)
    await mirror.stop()


async def test_a_known_key_is_its_consumer_upstream_and_a_client_claim_header_is_removed(gate: Gate) -> None:
    key, stored = record()
    await gate.add(stored)
    gate.route(only=True)
    status, headers, _ = await gate.ask(key=key)
    assert status == 200
    assert (headers["x-user-id"], headers["x-consumer"]) == ("partner-a", "partner-a")
    assert set(headers["x-envoy-auth-headers-to-remove"].split(", ")) == {"x-user-role", "x-scope"}
    assert key not in str(headers)


async def test_wrong_malformed_and_missing_keys_get_401_naming_the_key_scheme(gate: Gate) -> None:
    key, stored = record()
    await gate.add(stored)
    gate.route(only=True)
    wrong = key[:-1] + ("A" if key[-1] != "A" else "B")
    for presented, reason in [(wrong, "unknown_key"), ("not-a-key", "malformed_key"), (None, "missing_key"), ("", "missing_key")]:
        status, headers, body = await gate.ask(key=presented)
        error = json.loads(body)["error"]
        assert (status, error["code"], error["reason"]) == (401, "invalid_key", reason), presented
        assert headers["www-authenticate"] == 'ApiKey realm="gatehouse", header="x-api-key"'
        assert presented is None or not presented or presented not in body.decode()
    status, headers, _ = await gate.ask(token=rsa_key().sign(claims()))
    assert status == 401 and "Bearer" not in headers["www-authenticate"], "a keys-only route reads no token"
    assert all(e.subject is None for e in gate.audit.events), "an unverified key names no consumer"


async def test_the_key_wins_over_a_token_and_neither_gets_both_challenges(gate: Gate) -> None:
    key, stored = record()
    await gate.add(stored)
    gate.route()
    token = rsa_key().sign(claims())
    assert (await gate.ask(token=token))[1]["x-user-id"] == "user-1", "a token alone: as before"
    assert (await gate.ask(key=key, token=token))[1]["x-user-id"] == "partner-a", "both: the key decides"
    status, _, body = await gate.ask(key="ghk_00000000_wrong", token=token)
    assert (status, json.loads(body)["error"]["reason"]) == (401, "unknown_key"), "a bad key is not retried as the token"
    status, headers, body = await gate.ask()
    assert (status, json.loads(body)["error"]["reason"]) == (401, "missing")
    challenge = headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="gatehouse", error="invalid_token"')
    assert challenge.endswith(', ApiKey realm="gatehouse", header="x-api-key"')


async def test_consumers_allow_and_deny_answer_403(gate: Gate) -> None:
    keys = {}
    for consumer in ("partner-a", "partner-b", "partner-c"):
        key, stored = record(consumer)
        keys[consumer] = key
        await gate.add(stored)
    gate.route(allow=("partner-a", "partner-b"), deny=("partner-b",))
    statuses = {c: (await gate.ask(key=k))[0] for c, k in keys.items()}
    assert statuses == {"partner-a": 200, "partner-b": 403, "partner-c": 403}
    status, _, body = await gate.ask(key=keys["partner-c"])
    assert json.loads(body)["error"]["reason"] == "consumer"
    assert [e.subject for e in gate.audit.events] == ["partner-b", "partner-c", "partner-c"]


async def test_a_revoked_key_is_refused_as_soon_as_the_mirror_hears_of_it(gate: Gate) -> None:
    key, stored = record()
    await gate.add(stored)
    gate.route(only=True)
    assert (await gate.ask(key=key))[0] == 200
    assert await gate.store.remove_key(stored.key_id) == stored
    deadline = time.monotonic() + 2
    while (await gate.ask(key=key))[0] != 401:
        assert time.monotonic() < deadline, "the revoked key is still accepted"
        await asyncio.sleep(0.005)  # the mirror's listener runs between checks
    status, _, body = await gate.ask(key=key)
    assert (status, json.loads(body)["error"]["reason"]) == (401, "unknown_key")


async def test_an_unsynced_store_answers_503_under_a_closed_policy() -> None:
    store = FakeStore()
    store.down = True
    mirror = fast_mirror(store)
    await mirror.start()
    try:
        with pytest.raises(UnavailableError) as caught:
            ApiKeyCheck(mirror).decide(keys_only(), {"x-api-key": new_key()[1]}, time.time())
        assert (caught.value.status, caught.value.reason) == (503, "revocation_unavailable")
    finally:
        await mirror.stop()


def keys_only() -> KeyRule:
    """A keys-only route's rule, as its policy gives it."""
    auth = policy_pb2.AuthRequirements(api_keys=True, api_keys_only=True)
    rule = key_rule(auth)
    assert rule is not None
    return rule


def test_a_key_route_is_refused_alone_without_a_key_store() -> None:
    from limiter.config import Policies
    from limiter.policies import PartlyApplied

    policies = Policies.model_validate({"xds": {"address": "127.0.0.1:1", "nodeId": "n"}})
    authorizer = Authorizer(TokenVerifier([], cache_size=0, max_token_bytes=8192), {}, None)  # no request is checked here
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink())))
    subscription = RouteSubscription(table, policies)
    policy = policy_pb2.RoutePolicy(route=ROUTE)
    policy.auth.api_keys = True
    other = policy_pb2.RoutePolicy(route="shop/orders")
    other.auth.SetInParent()
    with pytest.raises(PartlyApplied, match="route shop/partners: takes API keys, and ext_authz has no revocation:"):
        subscription._apply([policy, other])
    assert list(table.routes) == ["shop/orders"], "the other route's rules are live"
    assert list(table.refused) == [ROUTE]


async def test_a_mirror_loads_keys_at_resync() -> None:
    store = FakeStore()
    key, stored = record()
    store.write(Change("key", Entry("key", stored.key_id, None, stored)), publish=False)
    mirror: RevocationMirror = fast_mirror(store)
    await mirror.start()
    try:
        assert await mirror.wait_ready(2)
        await eventually(lambda: mirror.stats().api_keys == 1)
        assert mirror.api_key(key_hash(key), time.time()) == stored
    finally:
        await mirror.stop()


async def test_a_key_is_found_by_the_hash_of_what_was_sent_and_nothing_else(gate: Gate) -> None:
    """The only lookup a check makes is the dict lookup of the sha256 of the whole key sent:
    a key sharing a long prefix with a real one is just another digest (no comparison of
    secrets, so nothing for timing to leak)."""
    key, stored = record()
    await gate.add(stored)
    gate.route(only=True)
    entries = gate.mirror._state.entries  # noqa: SLF001 - the mirror's set, observed

    class Recording(dict[bytes, ApiKey]):
        seen: list[bytes] = []

        def get(self, digest: bytes, default: ApiKey | None = None) -> ApiKey | None:  # type: ignore[override]
            self.seen.append(digest)
            return super().get(digest, default)

    entries.api_keys = Recording(entries.api_keys)
    near = key[:-1] + ("B" if key[-1] != "B" else "C")
    assert [(await gate.ask(key=k))[0] for k in (key, near)] == [200, 401]
    assert Recording.seen == [hashlib.sha256(key.encode()).digest(), hashlib.sha256(near.encode()).digest()]
    assert all(isinstance(k, bytes) and len(k) == 32 for k in entries.api_keys), "the set holds digests, never keys"
