"""The chart's API keys (extAuthz.apiKeys), with the pinned helm and a real kube-apiserver:
the Secrets it renders hold the hash only, with the documented label and type, and after
a round trip through the API server are what the control plane's sync reads; the control
plane's config (as it loads it) syncs them from the release namespace into the sidecars'
Redis, with a Role that reads Secrets there and nowhere else; inconsistent values are
refused with a message naming them."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from control_plane.config import load_config
from control_plane.sources.kubernetes.api_key_secrets import LABEL, SECRET_TYPE, secret_key
from tests.e2e.test_helm_chart import CONTROL_PLANE, NAMESPACE, WITH_ISSUERS, find, helm_home, objects, run_helm, template, tools
from tests.harness.kubernetes import KubeAPIServer, KubeTools

__all__ = ["helm_home", "tools"]  # fixtures, shared with test_helm_chart

KEY = "ghk_0a1b2c3d_" + "x" * 43
DIGEST = hashlib.sha256(KEY.encode()).hexdigest()
SECRETS = [{"consumer": "partner-a", "keyId": "0a1b2c3d", "sha256": DIGEST}]
API_KEYS_ON = [
    "--set", "extAuthz.enabled=true,redis.enabled=true,extAuthz.apiKeys.enabled=true", *WITH_ISSUERS,
    "--set-json", f"extAuthz.apiKeys.secrets={json.dumps(SECRETS)}",
]  # fmt: skip


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"))
    try:
        yield server
    finally:
        server.stop()


def test_the_chart_renders_hash_only_secrets_the_control_plane_syncs(tools: KubeTools, helm_home: Path, tmp_path: Path) -> None:
    manifest = template(tools, helm_home, *API_KEYS_ON)
    assert KEY not in manifest
    docs = objects(manifest)
    secret = find(docs, "Secret", "apikey-partner-a-0a1b2c3d")
    assert secret["type"] == SECRET_TYPE and secret["metadata"]["labels"][LABEL] == "true"
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["stringData"] == {"consumer": "partner-a", "keyId": "0a1b2c3d", "sha256": DIGEST}

    config_file = tmp_path / "control-plane.yaml"
    config_file.write_text(find(docs, "ConfigMap", CONTROL_PLANE)["data"]["control-plane.yaml"])
    kube = load_config(config_file).sources.kubernetes
    assert kube is not None and kube.api_keys is not None
    assert kube.api_keys.namespace == NAMESPACE and kube.api_keys.redis_url.startswith("redis://")
    assert kube.api_keys.key_prefix == "gatehouse:"

    role = find(docs, "Role", f"{CONTROL_PLANE}-api-keys")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    assert not any(
        "secrets" in rule.get("resources", []) for doc in docs if doc["kind"] == "ClusterRole" for rule in doc["rules"]
    ), "no cluster-wide Secret access"

    off = objects(template(tools, helm_home, "--set", "extAuthz.enabled=true,redis.enabled=true", *WITH_ISSUERS))
    assert not [d for d in off if d["kind"] == "Secret" and d.get("type") == SECRET_TYPE]
    assert not [d for d in off if d["kind"] == "Role" and d["metadata"]["name"].endswith("-api-keys")]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "extAuthz.revocation.enabled=false"], "extAuthz.apiKeys.enabled needs extAuthz.revocation.enabled"),
        (["--set-json", 'extAuthz.apiKeys.secrets=[{"consumer":"partner-a","keyId":"0a1b2c3d","sha256":"abc"}]'], "sha256"),
        (["--set-json", 'extAuthz.apiKeys.secrets=[{"consumer":"Partner A","keyId":"0a1b2c3d","sha256":"' + DIGEST + '"}]'], "consumer"),
    ],
    ids=["without-revocation", "bad-sha256", "bad-consumer"],
)
def test_inconsistent_api_key_values_are_refused(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:
    result = run_helm(tools, helm_home, "template", "gh", "charts/gatehouse", *API_KEYS_ON, *values, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_a_rendered_secret_read_back_from_the_api_server_is_the_key(
    api: KubeAPIServer, tools: KubeTools, helm_home: Path
) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    api.kubectl("create", "namespace", namespace)
    docs = objects(template(tools, helm_home, *API_KEYS_ON))
    secret = find(docs, "Secret", "apikey-partner-a-0a1b2c3d")
    secret["metadata"]["namespace"] = namespace
    api.kubectl("apply", "-f", "-", input=yaml.safe_dump(secret))
    listed = json.loads(api.kubectl("get", "secrets", "-n", namespace, "-l", f"{LABEL}=true", "-o", "json").stdout)
    (stored,) = listed["items"]
    key = secret_key(stored)  # what the control plane's watch hands the sync
    assert (key.key_id, key.consumer, key.key_hash.hex()) == ("0a1b2c3d", "partner-a", DIGEST)
    assert key.source == f"kubernetes:{namespace}/apikey-partner-a-0a1b2c3d"
