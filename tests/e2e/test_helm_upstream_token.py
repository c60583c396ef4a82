"""The chart's token swap values (extAuthz.upstreamTokens) with the pinned helm: the
sidecar's config loads with the signing key file from the Secret, mounted into the
ext-authz container only; enabled without an issuer is refused by the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from ext_authz.config import load_ext_authz_config
from tests.e2e.test_helm_chart import EXT_AUTHZ, EXT_AUTHZ_ON, GATEWAY, find, helm_home, objects, template, tools, volume_file  # noqa: F401 - fixtures
from tests.harness.kubernetes import KubeTools

SWAP_ON = [*EXT_AUTHZ_ON, "--set", "extAuthz.upstreamTokens.enabled=true,extAuthz.upstreamTokens.issuer=https://gateway.internal/"]


def test_the_signing_key_comes_from_the_secret_into_the_ext_authz_container_only(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    docs = objects(template(tools, helm_home, *SWAP_ON, "--set", "extAuthz.upstreamTokens.keySecret=swap-key,extAuthz.upstreamTokens.ttl=30s",
                            "--set-json", 'extAuthz.upstreamTokens.audiences={"legacy":["legacy-billing"],"*":["reports"]}',
                            "--set-json", 'extAuthz.upstreamTokens.exchangeEndpoints=["https://sts.example/token"]'))
    config_file = tmp_path / "ext-authz.yaml"
    config_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    config = load_ext_authz_config(config_file)
    assert config.http is not None and config.http.upstream_tokens is not None
    swap = config.http.upstream_tokens
    assert (swap.issuer, swap.ttl, swap.exchange.timeout) == ("https://gateway.internal/", 30_000, 200)
    assert swap.key_file is not None
    assert swap.audiences == {"legacy": ["legacy-billing"], "*": ["reports"]}, "what each namespace's routes may ask for"
    assert (swap.exchange.endpoints, swap.exchange.allow_plain_http) == (["https://sts.example/token"], False)
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == "ext-authz")
    volume, name = volume_file(pod, sidecar, swap.key_file)
    assert (volume["secret"]["secretName"], volume["secret"]["items"], name) == ("swap-key", [{"key": "key.pem", "path": "key.pem"}], "key.pem")
    others = [c for c in pod["containers"] if c["name"] != "ext-authz"]
    assert not any(m["name"] == volume["name"] for c in others for m in c.get("volumeMounts", []))


def test_without_a_key_secret_only_exchange_routes_and_no_mount(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    docs = objects(template(tools, helm_home, *SWAP_ON))
    config_file = tmp_path / "ext-authz.yaml"
    config_file.write_text(find(docs, "ConfigMap", EXT_AUTHZ)["data"]["ext-authz.yaml"])
    config = load_ext_authz_config(config_file)
    assert config.http is not None and config.http.upstream_tokens is not None and config.http.upstream_tokens.key_file is None
    assert config.http.upstream_tokens.audiences == {} and config.http.upstream_tokens.exchange.endpoints == [], "nothing allowed by default"
    pod = find(docs, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    assert not any(v["name"] == "ext-authz-upstream-token-key" for v in pod["volumes"])


def test_enabled_without_an_issuer_is_refused(tools: KubeTools, helm_home: Path) -> None:
    with pytest.raises(AssertionError) as refused:
        template(tools, helm_home, *EXT_AUTHZ_ON, "--set", "extAuthz.upstreamTokens.enabled=true")
    assert "at '/extAuthz/upstreamTokens/issuer': minLength: got 0, want 1" in str(refused.value)
