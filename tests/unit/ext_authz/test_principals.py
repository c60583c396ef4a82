"""Principals never collide (issue 33, item 3): the principal's encoding, a route's issuers
in the check's route table, and what ext_authz's config refuses at load."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from control_plane.model.auth import Auth
from ext_authz.check.route_table import RouteTable
from ext_authz.check.steps import CheckParts
from ext_authz.config import load_ext_authz_config
from ext_authz.denial_audit import DenialAudit
from ext_authz.tokens.principal import key_principal, token_principal
from servicekit.audit import MemoryAuditSink
from servicekit.errors import ConfigError
from servicekit.protos.gatehouse.policy.v1 import policy_pb2
from tests.integration.test_http_check_limits import issuer_authorizer
from tests.unit.ext_authz.signing import ISSUER

SAFE_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x00"), max_size=40)


@settings(max_examples=400, deadline=None)
@given(first=st.tuples(SAFE_TEXT, SAFE_TEXT), second=st.tuples(SAFE_TEXT, SAFE_TEXT), consumer=SAFE_TEXT)
def test_no_two_sources_or_ids_share_a_principal(first: tuple[str, str], second: tuple[str, str], consumer: str) -> None:
    """Injective: equal principals only for equal (issuer, id); a key's never a token's."""
    if first != second:
        assert token_principal(*first) != token_principal(*second)
    assert token_principal(*first) != key_principal(consumer)
    issuer_part = token_principal(*first).split(";")[1]
    assert issuer_part.isascii() and issuer_part.isprintable(), "the issuer part is safe in a header"


def test_the_principal_reads_as_its_source() -> None:
    assert token_principal("https://issuer-a.test/", "123") == "jwt;https://issuer-a.test/;123"
    assert token_principal("urn:a;b", "c") == "jwt;urn:a%3Bb;c", "a ';' in an issuer cannot move the boundary"
    assert token_principal("urn:a", "b;c") != token_principal("urn:a;b", "c")
    assert key_principal("123") == "apikey;123"


@settings(max_examples=300, deadline=None)
@given(issuers=st.one_of(st.none(), st.lists(st.one_of(st.text(max_size=600), st.integers(), st.none()), max_size=40), st.text()),
       required=st.booleans(), jwt=st.booleans())
def test_no_route_issuers_crash_the_model(issuers: Any, required: bool, jwt: bool) -> None:
    """What a tenant writes in ``auth.issuers`` is accepted or refused with a field, never a crash."""
    document = {"issuers": issuers, "required": required, "jwt": jwt}
    try:
        auth = Auth.model_validate(document)
    except ValidationError as exc:
        assert exc.errors(), document
        return
    assert auth.issuers is None or (auth.required and auth.jwt and 1 <= len(auth.issuers) <= 32)


def _policy(route: str, *issuers: str) -> policy_pb2.RoutePolicy:
    policy = policy_pb2.RoutePolicy(route=route)
    policy.auth.SetInParent()
    policy.auth.issuers.extend(issuers)
    return policy


def test_a_route_naming_an_issuer_the_check_does_not_trust_is_refused_alone() -> None:
    authorizer, _ = asyncio.run(issuer_authorizer())
    table = RouteTable(CheckParts(authorizer, DenialAudit(MemoryAuditSink())))
    refused = table.replace([_policy("t/ok", ISSUER), _policy("t/all"), _policy("t/typo", ISSUER, "https://evil.test/")])
    assert set(table.routes) == {"t/ok", "t/all"}
    assert refused == {"t/typo": "auth.issuers: not an issuer this authorization service trusts (its issuers): 'https://evil.test/'"}


def _config(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "ext-authz.yaml"
    data: dict[str, Any] = {"issuers": [{"issuer": "https://idp.test/", "jwksFile": "k.json"}], **extra}
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_swap_signer_can_never_be_a_trusted_issuer(tmp_path: Path) -> None:
    routes = {"xds": {"address": "127.0.0.1:1", "nodeId": "n"}}
    same = _config(tmp_path, http={"routes": routes, "upstreamTokens": {"issuer": "https://idp.test/", "keyFile": "s.pem"}})
    with pytest.raises(ConfigError) as caught:
        load_ext_authz_config(same)
    message = str(caught.value)
    assert message.startswith(f"{same}: ") and "http.upstreamTokens.issuer: 'https://idp.test/' is also issuers[0]" in message
    own = _config(tmp_path, http={"routes": routes, "upstreamTokens": {"issuer": "https://gateway.internal/", "keyFile": "s.pem"}})
    assert load_ext_authz_config(own).http is not None, "a signer with an issuer of its own loads"


def test_no_claim_may_fill_the_principal(tmp_path: Path) -> None:
    path = tmp_path / "ext-authz.yaml"
    claim_headers = {"x-user-id": "sub", "X-Principal": "sub"}
    path.write_text(yaml.safe_dump({"issuers": [{"issuer": "https://idp.test/", "jwksFile": "k.json", "claimHeaders": claim_headers}]}))
    with pytest.raises(ConfigError, match=r"issuers\[0\].*claimHeaders: x-principal is set by the check"):
        load_ext_authz_config(path)


def _validate(tmp_path: Path, routes: list[dict[str, Any]], ext_authz: dict[str, Any]) -> Any:
    import subprocess
    import sys

    (tmp_path / "routes.yaml").write_text(yaml.safe_dump_all(routes))
    config = tmp_path / "control-plane.yaml"
    config.write_text(yaml.safe_dump({"sources": {}, "extAuthz": ext_authz}))
    argv = [sys.executable, "-m", "gatehouse", "validate", "--config", str(config), str(tmp_path / "routes.yaml")]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _route(name: str, auth: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "gatehouse.io/v1alpha1", "kind": "Route", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"match": {"pathPrefix": f"/{name}"}, "backends": [{"service": "s", "port": 80}], "auth": auth}}


def test_validate_refuses_a_token_route_without_audiences_when_the_gateway_requires_one(tmp_path: Path) -> None:
    routes = [_route("open", {"scopes": ["s"]}), _route("named", {"audiences": ["api"], "issuers": ["https://idp.test/"]}),
              _route("keys", {"apiKeys": True, "jwt": False}), _route("public", {"required": False})]
    strict = _validate(tmp_path, routes, {"address": "127.0.0.1:1", "requireAudience": True})
    assert strict.returncode == 1, strict.stderr
    errors = [line for line in strict.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "shop/open: auth.audiences: the route reads tokens and names no audience" in errors[0], errors
    # Without the setting the same route passes, with a warning that it takes every issuer's tokens.
    lenient = _validate(tmp_path, routes, {"address": "127.0.0.1:1"})
    assert lenient.returncode == 0, lenient.stderr
    warnings = [line for line in lenient.stderr.splitlines() if "auth.issuers: not set" in line]
    assert len(warnings) == 1 and "shop/open" in warnings[0], lenient.stderr
