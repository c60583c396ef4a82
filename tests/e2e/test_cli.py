"""The `gatehouse` command as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


def gatehouse(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatehouse", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_validate_accepts_the_examples() -> None:
    result = gatehouse("validate", "examples/routes")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok: 11 route(s)"


def test_validate_names_file_line_field_and_reason(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: ok}\n"
        "spec: {match: {path: /ok}, backends: [{service: svc, port: 80}]}\n"
    )
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: bad}\nspec:\n"
        "  match: {path: '/orders/{id'}\n  backends: [{service: svc, port: 80}]\n"
        "  timeouts: {request: 10}\n"
    )
    result = gatehouse("validate", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert "error: bad.yaml:5: spec.match.path: '/orders/{id': segment '{id' must be a literal or a whole {name} variable" in lines
    assert "error: bad.yaml:7: spec.timeouts.request: 10 has no unit; write it as 10s or 10ms" in lines
    assert lines[-1] == "2 problem(s); nothing would be applied"


def test_validate_reports_a_missing_path() -> None:
    result = gatehouse("validate", "no/such/dir")
    assert result.returncode == 1
    assert "no/such/dir: no such file or directory" in result.stderr


def test_render_prints_envoy_resources_as_yaml(tmp_path: Path) -> None:
    # The examples ask for tokens and limits: render them for a gateway that enforces both.
    config = tmp_path / "cp.yaml"
    config.write_text("sources: {}\nextAuthz: {address: 127.0.0.1:9196}\nrateLimit: {address: 127.0.0.1:8081}\n")
    result = gatehouse("render", "examples/routes", "--endpoints", "examples/endpoints.yaml", "--config", str(config))
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(result.stdout)
    assert set(data) == {"LDS", "RDS", "CDS", "EDS"}
    assert [c["name"] for c in data["CDS"] if c["name"].startswith("shop/")] == ["shop/order-service:8080", "shop/order-service-v3:8080"]
    names = [r["name"] for r in data["RDS"][0]["virtual_hosts"][0]["routes"]]
    assert names.index("shop/orders-bulk") < names.index("shop/orders-by-id") < names.index("shop/orders-legacy")
    endpoint = data["EDS"][0]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert endpoint == {"address": "127.0.0.1", "port_value": 18081}

    # For a gateway without a check, the routes that ask for tokens are left out, and named.
    bare = gatehouse("render", "examples/routes")
    assert bare.returncode == 0, bare.stderr
    served = [r["name"] for r in yaml.safe_load(bare.stdout)["RDS"][0]["virtual_hosts"][0]["routes"]]
    assert "shop/orders-by-id" not in served and "shop/orders-legacy" in served
    assert "refused: file:orders.yaml:" in bare.stderr and "shop/orders-by-id: auth: the route requires a token" in bare.stderr


def test_control_plane_refuses_a_bad_config_file(tmp_path: Path) -> None:
    config = tmp_path / "cp.yaml"
    config.write_text("sources: {git: [{repo: x, pollInterval: 5}]}\nxds: {adress: 1}\n")
    result = gatehouse("control-plane", "--config", str(config))
    assert result.returncode == 2
    assert f"{config}: sources.git[0].pollInterval: Value error, 5 has no unit" in result.stderr
    assert f"{config}: xds.adress: Extra inputs are not permitted" in result.stderr


def test_bootstrap_renders_a_delta_ads_bootstrap() -> None:
    result = gatehouse("bootstrap", "--xds", "cp.example:18000", "--delta", "--node-cluster", "edge")
    data = yaml.safe_load(result.stdout)
    assert data["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    assert data["node"]["cluster"] == "edge"


def test_validate_with_the_config_errs_on_what_the_gateway_would_refuse(tmp_path: Path) -> None:
    routes = tmp_path / "routes"
    routes.mkdir()
    (routes / "r.yaml").write_text(
        "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r}\n"
        "spec: {match: {path: /r}, backends: [{service: svc, port: 80}], rateLimits: [{key: ip, limit: 5, window: 1s}]}\n"
        "---\napiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: open}\n"
        "spec: {match: {path: /open}, backends: [{service: svc, port: 80}], auth: {required: false}}\n"
    )
    bare = tmp_path / "bare.yaml"
    bare.write_text("sources: {}\n")
    result = gatehouse("validate", "--config", str(bare), str(routes))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    [auth] = [line for line in lines if "auth: the route requires a token" in line]
    assert auth.startswith("error: file:r.yaml:1: default/r: ") and "Helm: extAuthz.enabled=true" in auth
    assert any("rateLimits: this gateway has no rate-limit service" in line for line in lines)
    assert lines[-1] == "1 problem(s); nothing would be applied"

    # A gateway that enforces both: no problem. One that serves limits unlimited: a warning.
    full = tmp_path / "full.yaml"
    full.write_text("sources: {}\nextAuthz: {address: 127.0.0.1:9196}\nrateLimit: {address: 127.0.0.1:8081}\n")
    assert gatehouse("validate", "--config", str(full), str(routes)).returncode == 0
    unlimited = tmp_path / "unlimited.yaml"
    unlimited.write_text("sources: {}\nextAuthz: {address: 127.0.0.1:9196}\nrateLimitsWithoutLimiter: serveUnlimited\n")
    result = gatehouse("validate", "--config", str(unlimited), str(routes))
    assert result.returncode == 0, result.stderr
    assert "warning: file:r.yaml:1: default/r: rateLimits: not enforced" in result.stderr

    # Without the config, the schema only, and it says so.
    result = gatehouse("validate", str(routes))
    assert result.returncode == 0 and "judged against the schema only" in result.stderr
