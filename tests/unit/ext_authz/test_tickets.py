"""Waiting-room tickets: made only with the key, bound to one route, never guessable."""

from __future__ import annotations

from pathlib import Path

import pytest

from ext_authz.config import load_ext_authz_config
from ext_authz.check.tickets import TicketSigner, read_key
from ext_authz.check.waiting_room import _presented, cookie_name
from servicekit.config_file import ConfigError

KEY = b"0123456789abcdef0123456789abcdef"


def test_a_ticket_verifies_on_its_route_with_its_key_only() -> None:
    signer = TicketSigner(KEY)
    ticket_id, ticket = signer.issue("shop/launch")
    assert signer.verify("shop/launch", ticket) == ticket_id
    assert signer.verify("shop/other", ticket) is None, "bound to the route"
    assert TicketSigner(KEY[::-1]).verify("shop/launch", ticket) is None, "another key made it"
    assert signer.sign("shop/launch", ticket_id) == ticket


@pytest.mark.parametrize("bad", ["", "x", "a" * 45, "a" * 22 + "-" + "b" * 22, "ä" * 22 + "." + "b" * 22])
def test_malformed_tickets_are_refused(bad: str) -> None:
    assert TicketSigner(KEY).verify("shop/launch", bad) is None


def test_every_bit_of_the_mac_counts() -> None:
    signer = TicketSigner(KEY)
    ticket_id, ticket = signer.issue("r")
    for index in range(23, len(ticket)):
        changed = ticket[:index] + ("A" if ticket[index] != "A" else "B") + ticket[index + 1 :]
        assert signer.verify("r", changed) is None


def test_ids_are_random_128_bits() -> None:
    signer = TicketSigner(KEY)
    ids = {signer.issue("r")[0] for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 22 for i in ids)


def test_a_short_or_missing_key_file_is_named(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too-short\n")
    with pytest.raises(ValueError, match=r"short: the waiting-room ticket key must be at least 32 bytes, it has 9"):
        read_key(short)
    with pytest.raises(ValueError, match=r"missing: cannot read the waiting-room ticket key"):
        read_key(tmp_path / "missing")
    good = tmp_path / "good"
    good.write_bytes(KEY + b"\n")
    assert read_key(good) == KEY


def test_the_ticket_is_read_from_its_header_or_the_routes_cookie() -> None:
    name = cookie_name("shop/launch")
    assert name != cookie_name("shop/other"), "one cookie per route"
    assert _presented({"x-gatehouse-ticket": " t1 "}, name) == "t1"
    assert _presented({"cookie": f"a=1; {name}=t2; b=2"}, name) == "t2"
    assert _presented({"cookie": f"{cookie_name('shop/other')}=t3"}, name) is None
    assert _presented({}, name) is None


def test_a_waiting_room_without_redis_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ext-authz.yaml"
    path.write_text(
        "issuers: [{issuer: https://i/, jwksFile: k.json}]\n"
        "http: {routes: {xds: {address: 127.0.0.1:1}}, waitingRoom: {ticketKeyFile: wr-key}}\n"
    )
    with pytest.raises(ConfigError, match=r"ext-authz.yaml: http: .*waitingRoom: needs rateLimit"):
        load_ext_authz_config(path)
