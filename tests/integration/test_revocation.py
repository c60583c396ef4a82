"""Revocation against a real redis-server: propagation between mirrors, TTLs, resync,
each outage policy, recovery without restart, the admin API over real gRPC, and the CLI.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from redis.asyncio import Redis

from ext_authz.admin.service import RevocationAdminServer, build_admin_server
from ext_authz.errors import StoreUnavailable
from ext_authz.revocation.mirror import RevocationMirror
from ext_authz.revocation.policy import Policy
from ext_authz.revocation.entries import Verdict
from ext_authz.revocation.store import RedisRevocationStore
from servicekit.audit import ADMIN_CALL, REVOCATION_BLOCKED, REVOCATION_REVOKED, REVOCATION_UNBLOCKED, MemoryAuditSink
from servicekit.protos.gatehouse.admin.v1 import revocation_pb2 as pb
from servicekit.protos.gatehouse.admin.v1 import revocation_pb2_grpc
from tests.harness.redis import RedisServer

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
CREDENTIAL = "test-admin-credential-0123456789"
PREFIX = "gatehouse:"
MirrorFactory = Callable[..., Awaitable[RevocationMirror]]


async def eventually(condition: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> float:
    """Poll until ``condition``; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer.start(log_dir=tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client for looking at (and going around) the layout."""
    client = Redis.from_url(redis_server.url, decode_responses=True, socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture
async def make_mirror(redis_server: RedisServer) -> AsyncIterator[MirrorFactory]:
    mirrors: list[RevocationMirror] = []

    async def factory(
        policy: Policy = "closed", resync_interval: float = 10.0, last_known_for: float = 60.0, grace: float = 0.0
    ) -> RevocationMirror:
        store = RedisRevocationStore(url=redis_server.url, key_prefix=PREFIX, timeout=0.25)
        mirror = RevocationMirror(
            store,
            policy=policy,
            resync_interval=resync_interval,
            last_known_for=last_known_for,
            grace=grace,
            heartbeat=0.2,
            max_backoff=0.3,
        )
        mirrors.append(mirror)
        await mirror.start()
        assert await mirror.wait_ready(5), mirror.stats()
        return mirror

    yield factory
    for mirror in mirrors:
        await mirror.stop()


# ---- propagation, layout, expiry, resync --------------------------------------------


async def test_a_revocation_reaches_a_second_mirror_within_one_second(make_mirror: MirrorFactory) -> None:
    writer, reader = await make_mirror(), await make_mirror()
    for i in range(5):
        jti = f"jti-{i}"
        assert reader.check(jti, "alice", time.time()) is Verdict.OK
        started = time.monotonic()
        await writer.revoke(jti, time.time() + 3600)
        took = await eventually(lambda: reader.check(jti, "alice", time.time()) is Verdict.REVOKED, 1.0)
        assert time.monotonic() - started < 1.0, took
    await writer.block("mallory", None)
    await eventually(lambda: reader.check(None, "mallory", time.time()) is Verdict.BLOCKED, 1.0)
    await writer.unblock("mallory")
    await eventually(lambda: reader.check(None, "mallory", time.time()) is Verdict.OK, 1.0)
    assert reader.stats().messages >= 7


async def test_redis_layout_ttls_and_messages(make_mirror: MirrorFactory, raw: Redis) -> None:
    mirror = await make_mirror(grace=30.0)
    pubsub = raw.pubsub()
    await pubsub.subscribe(f"{PREFIX}revocations")
    subscribed = await pubsub.get_message(timeout=1)
    assert subscribed is not None and subscribed["type"] == "subscribe"

    exp = math.floor(time.time()) + 600
    await mirror.revoke("j-layout", exp)
    key = f"{PREFIX}revoked:jti:j-layout"
    assert json.loads(await raw.get(key) or "") == {"exp": exp}
    assert await raw.expiretime(key) == exp + 30  # the token's exp plus the grace
    message = await pubsub.get_message(timeout=1)
    assert message is not None and json.loads(message["data"]) == {"op": "revoke", "jti": "j-layout", "exp": exp}

    await mirror.block("temp", exp)
    assert json.loads(await raw.get(f"{PREFIX}blocked:sub:temp") or "") == {"until": exp}
    assert await raw.expiretime(f"{PREFIX}blocked:sub:temp") == exp
    await mirror.block("forever", None)
    assert await raw.ttl(f"{PREFIX}blocked:sub:forever") == -1  # no expiry
    await mirror.unblock("forever")
    assert not await raw.exists(f"{PREFIX}blocked:sub:forever")
    ops = []
    for _ in range(3):
        message = await pubsub.get_message(timeout=1)
        assert message is not None
        ops.append(json.loads(message["data"]))
    assert ops == [
        {"op": "block", "sub": "temp", "until": exp},
        {"op": "block", "sub": "forever", "until": None},
        {"op": "unblock", "sub": "forever"},
    ]
    await pubsub.aclose()  # type: ignore[no-untyped-call]


async def test_entries_expire_with_their_ttl(make_mirror: MirrorFactory, raw: Redis) -> None:
    writer, reader = await make_mirror(), await make_mirror()
    soon = time.time() + 2.5  # the two checks below have a second each before it expires
    await writer.revoke("short-lived", soon)
    await writer.block("briefly", soon)
    # Two writes, two messages: the block may reach the reader after the revocation.
    await eventually(lambda: reader.check("short-lived", "someone-else", time.time()) is Verdict.REVOKED, 1.0)
    await eventually(lambda: reader.check(None, "briefly", time.time()) is Verdict.BLOCKED, 1.0)
    await asyncio.sleep(max(0.0, soon - time.time()) + 0.8)
    assert reader.check("short-lived", "briefly", time.time()) is Verdict.OK
    assert not await raw.exists(f"{PREFIX}revoked:jti:short-lived", f"{PREFIX}blocked:sub:briefly")
    await eventually(lambda: reader.stats().revoked == 0 and reader.stats().blocked == 0, 2.0, "purge")


async def test_resync_repairs_messages_that_never_came(make_mirror: MirrorFactory, raw: Redis) -> None:
    mirror = await make_mirror(resync_interval=0.5)
    await mirror.block("stays-blocked", None)
    await mirror.block("quietly-unblocked", None)
    exp = math.floor(time.time()) + 600
    # Around the API: keys written and deleted without a PUBLISH.
    await raw.set(f"{PREFIX}revoked:jti:quiet", json.dumps({"exp": exp}), exat=exp)
    await raw.delete(f"{PREFIX}blocked:sub:quietly-unblocked")
    await eventually(lambda: mirror.check("quiet", "x", time.time()) is Verdict.REVOKED, 2.0, "resync")
    await eventually(lambda: mirror.check(None, "quietly-unblocked", time.time()) is Verdict.OK, 2.0, "resync")
    assert mirror.check(None, "stays-blocked", time.time()) is Verdict.BLOCKED
    assert mirror.stats().repairs >= 2


async def test_list_reads_redis(make_mirror: MirrorFactory) -> None:
    mirror = await make_mirror()
    exp = math.floor(time.time()) + 600
    for i in range(3):
        await mirror.revoke(f"j{i}", exp)
    await mirror.block("mallory", None)
    entries = await mirror.list()
    assert sorted((e.kind, e.value, e.expires_at) for e in entries) == [
        ("jti", "j0", exp),
        ("jti", "j1", exp),
        ("jti", "j2", exp),
        ("sub", "mallory", None),
    ]
    assert [e.value for e in await mirror.list("sub")] == ["mallory"]
    assert len(await mirror.list(limit=2)) == 2


# ---- outages: the documented policies ------------------------------------------------


async def _known_then_kill(make_mirror: MirrorFactory, redis_server: RedisServer, **kw: Any) -> RevocationMirror:
    mirror = await make_mirror(**kw)
    await mirror.revoke("known", time.time() + 3600)
    await mirror.block("mallory", None)
    redis_server.kill()
    await eventually(lambda: mirror.state == "degraded", 3.0, "degraded")
    return mirror


async def test_closed_policy_answers_unavailable(make_mirror: MirrorFactory, redis_server: RedisServer) -> None:
    mirror = await _known_then_kill(make_mirror, redis_server, policy="closed")
    now = time.time()
    assert mirror.check("known", "alice", now) is Verdict.UNAVAILABLE
    assert mirror.check("unknown", "alice", now) is Verdict.UNAVAILABLE
    assert mirror.check("unknown", "mallory", now) is Verdict.UNAVAILABLE


async def test_open_policy_allows_but_still_denies_what_it_knows(make_mirror: MirrorFactory, redis_server: RedisServer) -> None:
    mirror = await _known_then_kill(make_mirror, redis_server, policy="open")
    await asyncio.sleep(0.5)
    now = time.time()
    assert mirror.check("known", "alice", now) is Verdict.REVOKED
    assert mirror.check("unknown", "mallory", now) is Verdict.BLOCKED
    assert mirror.check("unknown", "alice", now) is Verdict.OK


async def test_last_known_policy_decides_for_a_while_then_closes(
    make_mirror: MirrorFactory, redis_server: RedisServer
) -> None:
    mirror = await _known_then_kill(make_mirror, redis_server, policy="lastKnown", last_known_for=1.5)
    synced_at = mirror.synced_at
    assert synced_at is not None
    now = time.time()
    assert now - synced_at < 1.5
    assert mirror.check("known", "alice", now) is Verdict.REVOKED
    assert mirror.check("unknown", "mallory", now) is Verdict.BLOCKED
    assert mirror.check("unknown", "alice", now) is Verdict.OK
    await asyncio.sleep(max(0.0, synced_at + 1.6 - time.time()))
    now = time.time()
    assert mirror.check("known", "alice", now) is Verdict.UNAVAILABLE
    assert mirror.check("unknown", "alice", now) is Verdict.UNAVAILABLE


async def test_writes_fail_fast_while_redis_is_down(make_mirror: MirrorFactory, redis_server: RedisServer) -> None:
    mirror = await make_mirror()
    redis_server.kill()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await mirror.revoke("j", time.time() + 60)
    with pytest.raises(StoreUnavailable):
        await mirror.list()
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("policy", ["closed", "open", "lastKnown"])
async def test_recovers_after_a_redis_restart_without_restarting(
    make_mirror: MirrorFactory, redis_server: RedisServer, raw: Redis, policy: Policy
) -> None:
    mirror = await make_mirror(policy=policy)
    before = mirror.stats().resyncs
    redis_server.kill()
    await eventually(lambda: mirror.state == "degraded", 3.0, "degraded")
    redis_server.restart()  # same port, empty data set
    exp = math.floor(time.time()) + 600
    await raw.set(f"{PREFIX}revoked:jti:written-during-outage", json.dumps({"exp": exp}), exat=exp)
    await eventually(lambda: mirror.state == "in_sync", 5.0, "in sync again")
    assert mirror.stats().resyncs > before
    assert mirror.check("written-during-outage", "alice", time.time()) is Verdict.REVOKED  # resynced
    assert mirror.check("other", "alice", time.time()) is Verdict.OK
    other = await make_mirror()
    await other.revoke("after-recovery", time.time() + 600)  # pub/sub works again
    await eventually(lambda: mirror.check("after-recovery", "a", time.time()) is Verdict.REVOKED, 1.0)


# ---- the admin API over real gRPC ------------------------------------------------------


@dataclass
class Admin:
    server: RevocationAdminServer
    mirror: RevocationMirror
    audit: MemoryAuditSink
    stub: Any
    address: str


@pytest.fixture
async def admin(make_mirror: MirrorFactory) -> AsyncIterator[Admin]:
    mirror = await make_mirror()
    audit = MemoryAuditSink()
    server = build_admin_server(mirror, audit, CREDENTIAL, "127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{server.port}"
    channel = grpc.aio.insecure_channel(address)
    try:
        yield Admin(server, mirror, audit, revocation_pb2_grpc.RevocationAdminStub(channel), address)  # type: ignore[no-untyped-call]
    finally:
        await channel.close()
        await server.stop(0)


def bearer(credential: str = CREDENTIAL) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {credential}"),)


async def call_code(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


@pytest.mark.parametrize(
    "metadata",
    [
        (),
        bearer("wrong-credential-0123456789abcdef"),
        bearer(CREDENTIAL + "x"),
        bearer(CREDENTIAL[:-1]),
        (("authorization", f"Basic {CREDENTIAL}"),),
        (("authorization", CREDENTIAL),),
        bearer() + bearer(),  # two authorization headers
    ],
    ids=["missing", "wrong", "longer", "shorter", "basic", "no-scheme", "duplicated"],
)
async def test_admin_refuses_without_the_credential(
    admin: Admin, raw: Redis, metadata: tuple[tuple[str, str], ...]
) -> None:
    calls = [
        admin.stub.Revoke(pb.RevokeRequest(jti="j-unauth", expires_at=int(time.time()) + 60), metadata=metadata, timeout=5),
        admin.stub.Block(pb.BlockRequest(subject="s-unauth"), metadata=metadata, timeout=5),
        admin.stub.Unblock(pb.UnblockRequest(subject="s"), metadata=metadata, timeout=5),
        admin.stub.List(pb.ListRequest(), metadata=metadata, timeout=5),
    ]
    for call in calls:
        code, details = await call_code(call)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert details == "a valid admin credential is required"
        assert "credential-0123" not in details and CREDENTIAL not in details
    assert await raw.keys(f"{PREFIX}*") == []
    events = admin.audit.events
    assert len(events) == 4
    assert all(e.kind == ADMIN_CALL and e.details["outcome"] == "unauthenticated" for e in events)
    assert sorted(str(e.details["method"]) for e in events) == ["Block", "List", "Revoke", "Unblock"]
    assert CREDENTIAL not in json.dumps([e.as_dict() for e in events])


async def test_admin_calls_work_and_are_audited(admin: Admin, make_mirror: MirrorFactory) -> None:
    other = await make_mirror()
    exp = int(time.time()) + 3600
    md = bearer() + (("x-gatehouse-operator", "ops@laptop"),)
    response = await admin.stub.Revoke(pb.RevokeRequest(jti="j-admin", expires_at=exp, reason="leaked"), metadata=md, timeout=5)
    assert (response.entry.kind, response.entry.value, response.entry.expires_at) == (pb.ENTRY_KIND_REVOKED_JTI, "j-admin", exp)
    await eventually(lambda: other.check("j-admin", "alice", time.time()) is Verdict.REVOKED, 1.0)

    response = await admin.stub.Block(pb.BlockRequest(subject="mallory", reason="fraud"), metadata=md, timeout=5)
    assert not response.entry.HasField("expires_at")
    await eventually(lambda: other.check(None, "mallory", time.time()) is Verdict.BLOCKED, 1.0)
    response = await admin.stub.Block(pb.BlockRequest(subject="temp", until=exp), metadata=md, timeout=5)
    assert response.entry.expires_at == exp

    listing = await admin.stub.List(pb.ListRequest(), metadata=md, timeout=5)
    assert sorted((e.kind, e.value) for e in listing.entries) == [
        (pb.ENTRY_KIND_REVOKED_JTI, "j-admin"),
        (pb.ENTRY_KIND_BLOCKED_SUBJECT, "mallory"),
        (pb.ENTRY_KIND_BLOCKED_SUBJECT, "temp"),
    ]
    assert (listing.truncated, listing.mirror.state, listing.mirror.policy) == (False, "in_sync", "closed")
    assert listing.mirror.synced_at > 0 and listing.mirror.revoked == 1 and listing.mirror.blocked == 2
    only = await admin.stub.List(pb.ListRequest(kind=pb.ENTRY_KIND_BLOCKED_SUBJECT, limit=1), metadata=md, timeout=5)
    assert len(only.entries) == 1 and only.truncated

    assert (await admin.stub.Unblock(pb.UnblockRequest(subject="mallory"), metadata=md, timeout=5)).existed
    assert not (await admin.stub.Unblock(pb.UnblockRequest(subject="mallory"), metadata=md, timeout=5)).existed
    await eventually(lambda: other.check(None, "mallory", time.time()) is Verdict.OK, 1.0)

    calls = admin.audit.of_kind(ADMIN_CALL)
    assert [(e.details["method"], e.details["outcome"]) for e in calls] == [
        ("Revoke", "ok"), ("Block", "ok"), ("Block", "ok"), ("List", "ok"), ("List", "ok"), ("Unblock", "ok"), ("Unblock", "ok"),
    ]
    assert all(e.actor == "admin" and e.details["operator"] == "ops@laptop" and e.details["peer"] for e in calls)
    (revoked,) = admin.audit.of_kind(REVOCATION_REVOKED)
    assert (revoked.jti, revoked.subject, revoked.reason, revoked.details["expires_at"]) == ("j-admin", None, "leaked", exp)
    assert [(e.subject, e.reason) for e in admin.audit.of_kind(REVOCATION_BLOCKED)] == [("mallory", "fraud"), ("temp", "")]
    assert [e.details["existed"] for e in admin.audit.of_kind(REVOCATION_UNBLOCKED)] == [True, False]
    assert CREDENTIAL not in json.dumps([e.as_dict() for e in admin.audit.events])


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RevokeRequest(jti="", expires_at=2_000_000_000), "jti: must not be empty"),
        (pb.RevokeRequest(jti="j" * 257, expires_at=2_000_000_000), "jti: longer than 256 characters"),
        (pb.RevokeRequest(jti="bad\njti", expires_at=2_000_000_000), "jti: contains control characters"),
        (pb.RevokeRequest(jti="j1", expires_at=1), "expires_at: must be in the future"),
        (pb.RevokeRequest(jti="j1"), "expires_at: must be in the future"),
        (pb.RevokeRequest(jti="j1", expires_at=int(time.time()) + 400 * 86400), "expires_at: must be at most one year ahead"),
        (pb.BlockRequest(subject=""), "subject: must not be empty"),
        (pb.BlockRequest(subject="s", until=1), "until: must be in the future"),
        (pb.BlockRequest(subject="s", reason="a\x1bb"), "reason: at most 256 printable characters"),
        (pb.UnblockRequest(subject="\x00"), "subject: contains control characters"),
    ],
)
async def test_admin_validates_input(admin: Admin, raw: Redis, request_: Any, field: str) -> None:
    method = {"RevokeRequest": admin.stub.Revoke, "BlockRequest": admin.stub.Block, "UnblockRequest": admin.stub.Unblock}[
        type(request_).__name__
    ]
    code, details = await call_code(method(request_, metadata=bearer(), timeout=5))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, field)
    assert await raw.keys(f"{PREFIX}*") == []
    (event,) = admin.audit.events
    assert (event.kind, event.details["outcome"], event.reason) == (ADMIN_CALL, "invalid_argument", field)


async def test_admin_reports_redis_outages(admin: Admin, redis_server: RedisServer) -> None:
    redis_server.kill()
    for call in (
        admin.stub.Revoke(pb.RevokeRequest(jti="j", expires_at=int(time.time()) + 60), metadata=bearer(), timeout=5),
        admin.stub.List(pb.ListRequest(), metadata=bearer(), timeout=5),
    ):
        code, details = await call_code(call)
        assert (code, details) == (grpc.StatusCode.UNAVAILABLE, "the revocation store (Redis) is unavailable")
    assert [e.details["outcome"] for e in admin.audit.events] == ["unavailable", "unavailable"]


def test_admin_refuses_a_weak_credential() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        build_admin_server(None, MemoryAuditSink(), "short", "127.0.0.1:0")  # type: ignore[arg-type]


# ---- the CLI, end to end ----------------------------------------------------------------


async def gatehouse(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run ``python -m gatehouse`` without blocking the loop the admin server runs on."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_ADMIN")}
    environment.update(env or {})
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gatehouse", *argv,
        cwd=ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_cli_end_to_end(admin: Admin, make_mirror: MirrorFactory, tmp_path: Path) -> None:
    credential_file = tmp_path / "admin-credential"
    credential_file.write_text(CREDENTIAL + "\n")
    auth = ["--admin", admin.address, "--credential-file", str(credential_file)]
    other = await make_mirror()

    code, out, err = await gatehouse("revoke", "--jti", "j-cli", "--ttl", "1h", "--reason", "leaked", *auth)
    assert (code, err) == (0, "")
    assert out.startswith("revoked jti j-cli until ")
    await eventually(lambda: other.check("j-cli", "alice", time.time()) is Verdict.REVOKED, 1.0)

    exp = int(time.time()) + 600
    code, out, _ = await gatehouse("revoke", "--jti", "j-cli-2", "--expires-at", str(exp), *auth)
    assert code == 0
    code, out, _ = await gatehouse("block", "--sub", "mallory", *auth)
    assert (code, out.strip()) == (0, "blocked sub mallory until unblocked")
    code, out, _ = await gatehouse("block", "--sub", "temp", "--ttl", "10m", *auth)
    assert code == 0 and "blocked sub temp until 20" in out
    await eventually(lambda: other.check(None, "mallory", time.time()) is Verdict.BLOCKED, 1.0)

    code, out, _ = await gatehouse("revocations", "--json", *auth)
    assert code == 0
    listing = json.loads(out)
    assert sorted((e["kind"], e["value"]) for e in listing["entries"]) == [
        ("jti", "j-cli"), ("jti", "j-cli-2"), ("sub", "mallory"), ("sub", "temp"),
    ]
    assert {"kind": "jti", "value": "j-cli-2", "expires_at": exp} in listing["entries"]
    assert listing["mirror"]["state"] == "in_sync"
    code, out, _ = await gatehouse("revocations", "--kind", "sub", *auth)
    assert code == 0 and "mirror: in_sync" in out and "mallory" in out and "j-cli" not in out

    code, out, _ = await gatehouse("unblock", "--sub", "mallory", *auth)
    assert (code, out.strip()) == (0, "unblocked sub mallory")
    code, out, _ = await gatehouse("unblock", "--sub", "mallory", *auth)
    assert (code, out.strip()) == (0, "sub mallory was not blocked")
    await eventually(lambda: other.check(None, "mallory", time.time()) is Verdict.OK, 1.0)

    # The credential from the environment instead of a file.
    code, _, err = await gatehouse(
        "block", "--sub", "env-user", "--admin", admin.address, env={"GATEHOUSE_ADMIN_CREDENTIAL": CREDENTIAL}
    )
    assert (code, err) == (0, "")
    audited = [(e.details["method"], e.details["outcome"]) for e in admin.audit.of_kind(ADMIN_CALL)]
    assert audited.count(("Revoke", "ok")) == 2 and audited.count(("Block", "ok")) == 3


async def test_cli_errors_are_clear(admin: Admin, tmp_path: Path, refused_address: str) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("wrong-credential-0123456789abcdef")
    code, out, err = await gatehouse("revoke", "--jti", "j", "--ttl", "1h", "--admin", admin.address, "--credential-file", str(wrong))
    assert (code, out) == (2, "")
    assert err.strip() == f"error: the admin API at {admin.address} refused the credential"
    assert "wrong-credential" not in err

    code, _, err = await gatehouse("revocations", "--admin", admin.address)
    assert code == 2 and "no admin credential" in err and "--credential-file" in err

    code, _, err = await gatehouse(
        "block", "--sub", "bad\tsub", "--admin", admin.address, env={"GATEHOUSE_ADMIN_CREDENTIAL": CREDENTIAL}
    )
    assert code == 2 and err.strip() == "error: refused: subject: contains control characters"

    closed = refused_address
    started = time.monotonic()
    code, _, err = await gatehouse(
        "revocations", "--admin", closed, "--timeout", "2", env={"GATEHOUSE_ADMIN_CREDENTIAL": CREDENTIAL}
    )
    assert code == 2 and f"cannot reach the admin API at {closed}" in err
    assert time.monotonic() - started < 10

    code, _, err = await gatehouse("revoke", "--jti", "j", "--ttl", "2y", "--admin", admin.address)
    assert code == 2 and "not a duration" in err
