"""What reaches the upstream (docs/routes.md, "What reaches the upstream"; issue 33 item 1),
through real Envoy, the control plane and the HTTP check, on one stack per module.

The query reaches the upstream byte for byte on every route (public, authenticated,
cached, cached per user, validated, rewritten); the path as sent but for Envoy's
documented normalization and the route's own rewrite; malformed headers get a 4xx or pass
unchanged, never a 5xx and never split. Before the fix, ``query_parameter_mutations`` (the
response cache's key parameter) re-serialized every query from decoded parameters.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness.binaries import require_binary
from tests.harness.envoy import envoy_binary
from tests.harness.http_client import Reply
from tests.integration.request_line_stack import RequestLineGateway
from tests.integration.test_route_shields_envoy import served

ISSUE_TABLE = [
    "?b=1&a=2",
    "?user=alice%26role%3Dadmin",
    "?q=a%2Bb",
    "?next=%2Fhome%3Fx%3D1",
    "?a=%2F&b=x%20y",
    "?a=x%0D%0AX-Injected:%20yes",
    "?a=%00b",
]
MORE_SHAPES = ["?a=1&a=2&a=", "?flag&x=&=y&&", "?q=%e2%82%AC%E2%82%ac+x", "?x=%ff%fe%00", "?p=a;b=c&k=%3b", "?" + "v=" + "z" * 4000]
# (route prefix, the upstream's prefix for it, the user a request carries)
ROUTES = {
    "public": ("/api/v2/inventory/x", "/api/v2/inventory/x", None),
    "authenticated": ("/secure/x", "/secure/x", "alice"),
    "cached": ("/catalog/x", "/catalog/x", None),
    "cached per user": ("/mine/x", "/mine/x", "alice"),
    "validated": ("/search/x", "/search/x", None),
    "prefix rewrite": ("/old/x", "/new/x", None),
    "template rewrite": ("/users/7/x", "/v3/users/7/x", None),
    "regex rewrite": ("/files/abc/x", "/blobs/abc/x", None),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RequestLineGateway]:
    envoy_binary()
    require_binary("git", "apt-get install git")
    made = RequestLineGateway(Path(tmp_path_factory.mktemp("request-line")))
    try:
        yield made.start()
    finally:
        made.stop()


def upstream_target(reply: Reply) -> str:
    assert reply.status == 200 and reply.upstream == "svc-a", (reply.status, reply.body[:300])
    target: str = reply.json()["path"]
    return target


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("query", ISSUE_TABLE + MORE_SHAPES, ids=lambda q: q[:40])
def test_the_issue_table_reaches_every_route_s_upstream_as_sent(gateway: RequestLineGateway, route: str, query: str) -> None:
    """Each row of issue 33's table, and more shapes (repeated keys, empty values, keys
    without ``=``, ``+``, lower-case escapes, non-UTF-8, ``;``, a 4 KB value): the query is
    byte for byte what the client sent, on every kind of route."""
    sent, upstream_prefix, user = ROUTES[route]
    reply = gateway.get(sent + query, user=user)
    assert upstream_target(reply) == upstream_prefix + query


def test_per_user_cache_entries_stay_apart_and_their_upstream_gets_the_query_and_host_as_sent(gateway: RequestLineGateway) -> None:
    """The per-user key is no longer a query parameter: ``x-gatehouse-cache-user`` is an
    ordinary parameter, passed as sent; alice's entry is hers, bob's his; an anonymous client
    on a public cached route naming alice (in the query or in a Host) reads nothing of hers."""
    upstream = gateway.stack.upstreams["svc-a"]
    target = "/mine/profile?x=1&x-gatehouse-cache-user=bob&Z=%7e"
    before = served(upstream)
    first = gateway.get(target, user="alice")
    assert first.status == 200 and "age" not in first.headers
    seen = first.json()
    assert seen["path"] == target, "the per-user route's upstream gets the query byte for byte"
    assert seen["headers"]["host"] == "127.0.0.1", "and the client's host (port stripped), not the entry's key"
    assert seen["headers"]["x-user-id"] == "alice" and "authorization" not in seen["headers"]
    again = gateway.get(target, user="alice")
    assert "age" in again.headers and again.body == first.body, "alice's second GET is her cached entry"
    bobs = gateway.get(target, user="bob")
    assert bobs.status == 200 and "age" not in bobs.headers and bobs.json()["headers"]["x-user-id"] == "bob"
    assert served(upstream) - before == 2
    # No token: 401, never an entry.
    assert gateway.get(target).status == 401
    # Naming alice's key as a Host: Envoy refuses a '|' in an authority before any filter.
    principal = seen["headers"]["x-principal"]
    for host in (f"127.0.0.1|{principal}", f"127.0.0.1|{principal}".replace(";", "%3B")):
        refused = gateway.raw(f"GET /catalog/profile?x=1 HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 400"), refused[:200]
    # A public cached route on the same path as the per-user one: its own entries only.
    public = gateway.get("/catalog/profile?x=1&x-gatehouse-cache-user=alice")
    assert public.status == 200 and "x-user-id" not in public.json()["headers"]
    assert public.json()["path"] == "/catalog/profile?x=1&x-gatehouse-cache-user=alice"
    assert served(upstream) - before == 3


# -- headers, on raw sockets ------------------------------------------------------------------

def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert match, answer[:200]
    return int(match.group(1))


def echoed_headers(answer: bytes) -> dict[str, str]:
    import json

    body = answer.split(b"\r\n\r\n", 1)[1]
    headers: dict[str, str] = json.loads(body)["headers"]
    return headers


REFUSED_HEADERS = [
    ("two content-lengths", b"Content-Length: 3\r\nContent-Length: 5\r\n", b"abcde"),
    ("the same content-length twice", b"Content-Length: 5\r\nContent-Length: 5\r\n", b"abcde"),
    ("a content-length list", b"Content-Length: 3, 5\r\n", b"abcde"),
    ("chunked and content-length", b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", b"0\r\n\r\n"),
    ("a space before the colon", b"Transfer-Encoding : chunked\r\n", b"0\r\n\r\n"),
    ("a header name with a space", b"X Injected: yes\r\n", b""),
    ("an over-long header", b"X-Long: " + b"v" * 70_000 + b"\r\n", b""),
]
UNKNOWN_CODINGS = [
    ("chunked not last", b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"),
    ("gzip alone", b"Transfer-Encoding: gzip\r\n", b""),
]


def post(gateway: RequestLineGateway, head: bytes, body: bytes) -> bytes:
    return gateway.raw(b"POST /api/v2/inventory/x?k=1 HTTP/1.1\r\nHost: api.test\r\n" + head + b"Connection: close\r\n\r\n" + body)


@pytest.mark.parametrize(("name", "head", "body"), REFUSED_HEADERS, ids=[c[0] for c in REFUSED_HEADERS])
def test_a_header_the_upstream_could_read_differently_gets_a_4xx(
    gateway: RequestLineGateway, name: str, head: bytes, body: bytes
) -> None:
    upstream = gateway.stack.upstreams["svc-a"]
    before = served(upstream)
    answer = post(gateway, head, body)
    assert 400 <= status_of(answer) < 500, (name, answer[:300])
    assert answer.count(b"HTTP/1.1 ") == 1, "one answer: nothing was read as a second request"
    assert served(upstream) == before, "never forwarded"


@pytest.mark.parametrize(("name", "head", "body"), UNKNOWN_CODINGS, ids=[c[0] for c in UNKNOWN_CODINGS])
def test_a_transfer_coding_envoy_cannot_read_is_501_and_never_forwarded(
    gateway: RequestLineGateway, name: str, head: bytes, body: bytes
) -> None:
    """Envoy's HTTP/1 codec answers 501 before any filter (RFC 9112 section 6.1: a coding the
    server does not understand); documented as the one 5xx for a malformed request."""
    upstream = gateway.stack.upstreams["svc-a"]
    before = served(upstream)
    answer = post(gateway, head, body)
    assert status_of(answer) == 501 and answer.count(b"HTTP/1.1 ") == 1, answer[:300]
    assert served(upstream) == before


def test_obs_fold_and_a_bare_cr_reach_the_upstream_as_one_header_never_split(gateway: RequestLineGateway) -> None:
    """RFC 9112 lets a proxy replace obs-fold (and a bare CR) with spaces: Envoy does, so the
    upstream sees one header, never a second one made of its continuation."""
    folded = echoed_headers(post(gateway, b"X-Note: first\r\n  folded: yes\r\n", b""))
    assert folded["x-note"].split() == ["first", "folded:", "yes"] and "folded" not in folded
    bare_cr = echoed_headers(post(gateway, b"X-Note: a\rX-Injected: yes\r\n", b""))
    assert "x-injected" not in bare_cr and bare_cr["x-note"].endswith("X-Injected: yes")
    chunked = post(gateway, b"Transfer-Encoding: Chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n")
    assert status_of(chunked) == 200 and b'"bodyBytes": 3' in chunked, "a coding's case does not matter"


def test_headers_that_are_well_formed_reach_the_upstream_unchanged(gateway: RequestLineGateway) -> None:
    """What must stay unchanged by the refusals above: odd but valid headers pass as sent."""
    head = b"X-Note: a  b\t c\r\nX-Empty:\r\nX-Utf8: caf\xc3\xa9\r\nX-Repeat: 1\r\nX-Repeat: 2\r\nContent-Length: 3\r\n"
    answer = gateway.raw(b"POST /api/v2/inventory/x?k=%41 HTTP/1.1\r\nHost: api.test\r\n" + head + b"Connection: close\r\n\r\nabc")
    assert status_of(answer) == 200, answer[:300]
    seen = echoed_headers(answer)
    assert seen["x-note"] == "a  b\t c" and seen["x-empty"] == "" and seen["x-repeat"] == "1, 2"
    assert seen["x-utf8"].encode("utf-8", "surrogateescape") in (b"caf\xc3\xa9",), seen["x-utf8"]
    assert seen["host"] == "api.test" and seen["content-length"] == "3"


# -- the property: random queries and paths ----------------------------------------------------

ALL_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
UNRESERVED = "ABCXYZabcxyz0189-._~"
SUB_DELIMS = "!$&'()*+,;="
QUERY_RAW = UNRESERVED + SUB_DELIMS + ":@/?"
SEGMENT_RAW = UNRESERVED + "!$'()*+,;=:@"
_escape = st.integers(0, 255).map(lambda b: f"%{b:02X}") | st.integers(0, 255).map(lambda b: f"%{b:02x}")
_query_piece = st.sampled_from(list(QUERY_RAW)) | _escape
queries = st.lists(_query_piece, max_size=60).map("".join) | st.lists(
    st.tuples(st.text(QUERY_RAW.replace("&", "").replace("=", ""), max_size=8), st.sampled_from(["=", ""]),
              st.lists(_query_piece, max_size=12).map("".join)),
    max_size=8,
).map(lambda pairs: "&".join(k + eq + v for k, eq, v in pairs))
_segment_piece = st.sampled_from(list(SEGMENT_RAW)) | _escape.filter(lambda e: e.upper() != "%2E")
segments = st.lists(_segment_piece, min_size=1, max_size=10).map("".join).filter(lambda s: s not in (".", ".."))
_UNRESERVED_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
REFUSED_IN_PATH = ("%00", "%2F", "%5C")
"""docs/routes.md: a NUL (Envoy's normalization) and an escaped slash or backslash
(``path_with_escaped_slashes_action: REJECT_REQUEST``) in the path are 400."""


def canonical(path: str) -> str:
    """Envoy's ``normalize_path`` (RFC 3986 section 6): an escaped unreserved character is
    the character, and other escapes' hex digits are upper case; the rest as sent."""
    def one(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in ALL_UNRESERVED else "%" + match.group(1).upper()

    return _UNRESERVED_ESCAPE.sub(one, path)


@settings(max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(route=st.sampled_from(list(ROUTES)), tail=st.lists(segments, max_size=4), query=queries, with_query=st.booleans())
def test_property_any_query_reaches_the_upstream_byte_for_byte_and_the_path_as_documented(
    gateway: RequestLineGateway, route: str, tail: list[str], query: str, with_query: bool
) -> None:
    sent_prefix, upstream_prefix, user = ROUTES[route]
    path = sent_prefix + "".join("/" + s for s in tail)
    target = path + ("?" + query if with_query else "")
    reply = gateway.get(target, user=user)
    assert reply.status < 500, (target, reply.status, reply.body[:300])
    if any(escape in path.upper() for escape in REFUSED_IN_PATH):
        assert reply.status == 400 and reply.upstream is None, (target, reply.status, reply.body[:300])
        return
    if route == "validated" and reply.status == 400:
        # The route's own rule (limit: integer ≤ 100) refusing a generated `limit`: its 400 names it.
        assert reply.json()["error"]["field"] == "limit", reply.body
        return
    got = upstream_target(reply)
    got_path, mark, got_query = got.partition("?")
    assert (mark, got_query) == (("?", query) if with_query else ("", "")), (target, got)
    assert canonical(got_path) == canonical(upstream_prefix + path[len(sent_prefix):]), (target, got)
