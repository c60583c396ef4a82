"""Every generated config passes `envoy --mode validate` (a real Envoy, no mocks).

For each translator golden case (tests/unit/control_plane/translator/testdata/in, with its gateway
settings), the translation becomes one STATIC bootstrap: the listener's HCM gets the
RouteConfiguration inline instead of `rds`, and each EDS cluster becomes `type: STATIC`
with the case's ClusterLoadAssignment (or one 127.0.0.1:1 endpoint when the case has
none); the clusters of Gatehouse's own services (ext_authz, ratelimit, access log) have
static addresses already and stay as they are. A TLS listener's SDS secret becomes a
static secret of the same name, pointing at a real certificate. The inline route config
is switched to `validate_clusters: true`, so Envoy also checks that every cluster a route
names exists: RDS and CDS agree. Validate mode builds the listeners and route tables, so
regexes, URI templates, header rules and typed extensions are all checked, exactly as a
NACK would check them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from control_plane.model import Origin, Route, parse_route_file
from control_plane.model.paths import check_re2
from control_plane.render import resource_data
from control_plane.sources.files import load_route_path
from control_plane.sources.static_endpoints import StaticEndpointTable, parse_endpoints
from control_plane.translator.access_log import AccessLogSettings
from control_plane.translator import EndpointTranslator, GatewaySettings, RouteTranslator
from tests.harness.envoy import envoy_binary, validate_config, write_bootstrap
from tests.harness.static_bootstrap import static_bootstrap
from tests.unit.control_plane.translator.golden import CaseResult, case_names, translate_case
from tests.unit.control_plane.translator.test_tls import write_self_signed
from tests.unit.control_plane.translator.route_generator import route_documents

pytestmark = pytest.mark.envoy

REPO_ROOT = Path(__file__).resolve().parents[2]
def with_static_secrets(bootstrap: dict[str, Any], secrets: list[dict[str, Any]], certs: Path) -> dict[str, Any]:
    """The listener's SDS secrets as static ones (no ADS here): the same Secret messages,
    looked up by name, with their files replaced by a real certificate and key."""
    [chain] = bootstrap["static_resources"]["listeners"][0]["filter_chains"]
    common = chain["transport_socket"]["typed_config"]["common_tls_context"]
    configs = common["tls_certificate_sds_secret_configs"]
    assert [c["name"] for c in configs] == [s["name"] for s in secrets] and all("ads" in c["sds_config"] for c in configs)
    common["tls_certificate_sds_secret_configs"] = [{"name": c["name"]} for c in configs]
    cert, key = write_self_signed(certs)
    static = copy.deepcopy(secrets)
    for secret in static:
        pair = secret["tls_certificate"]
        pair["certificate_chain"]["filename"], pair["private_key"]["filename"] = str(cert), str(key)
        pair["watched_directory"]["path"] = str(certs)
    bootstrap["static_resources"]["secrets"] = static
    return bootstrap


def case_bootstrap(result: CaseResult, certs: Path | None = None) -> dict[str, Any]:
    bootstrap = static_bootstrap(result.data("listeners"), result.data("routes"), result.data("clusters"), result.data("endpoints"))
    if result.translation.secrets:
        assert certs is not None, "a TLS case needs a directory for its certificate"
        with_static_secrets(bootstrap, result.data("secrets"), certs)
    return bootstrap


def assert_valid(bootstrap: dict[str, Any], path: Path) -> None:
    write_bootstrap(bootstrap, path)
    result = validate_config(envoy_binary(), path)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"envoy --mode validate refused {path} (exit {result.returncode}):\n{output}"
    assert "OK" in output, output


def route_count(bootstrap: dict[str, Any]) -> int:
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return sum(len(vhost.get("routes", [])) for vhost in hcm["route_config"]["virtual_hosts"])


@pytest.mark.parametrize("case", case_names())
def test_golden_case_passes_envoy_validate(case: str, tmp_path: Path) -> None:
    result = translate_case(case)
    bootstrap = case_bootstrap(result, tmp_path / "certs")
    translated = resource_data(result.translation.routes[0])
    assert route_count(bootstrap) == sum(len(v.get("routes", [])) for v in translated["virtual_hosts"])
    assert len(bootstrap["static_resources"]["clusters"]) == len(result.translation.clusters)
    assert_valid(bootstrap, tmp_path / f"{case}.yaml")


def routes_bootstrap(routes: list[Route], table: StaticEndpointTable | None = None) -> dict[str, Any]:
    translation = RouteTranslator(GatewaySettings()).translate(routes)
    endpoints = EndpointTranslator().translate(translation.cluster_refs, table or StaticEndpointTable({}))
    return static_bootstrap(
        [resource_data(r) for r in translation.listeners],
        [resource_data(r) for r in translation.routes],
        [resource_data(r) for r in translation.clusters],
        [resource_data(r) for r in endpoints],
    )


def test_the_example_route_repo_passes_envoy_validate(tmp_path: Path) -> None:
    routes, problems = load_route_path(REPO_ROOT / "examples" / "routes")
    assert problems == [] and routes
    table = parse_endpoints((REPO_ROOT / "examples" / "endpoints.yaml").read_bytes(), "endpoints.yaml")
    assert_valid(routes_bootstrap(routes, table), tmp_path / "examples.yaml")


@pytest.mark.parametrize("seed", range(8))
def test_random_valid_route_sets_pass_envoy_validate(seed: int, tmp_path: Path) -> None:
    """Property check: any set of routes the schema accepts gives a config Envoy accepts."""
    text = yaml.safe_dump_all(route_documents(seed, 40), sort_keys=False)
    (tmp_path / "routes.yaml").write_text(text)
    routes, problems = parse_route_file(text, Origin("file", "routes.yaml"))
    assert problems == [], [str(p) for p in problems]
    assert_valid(routes_bootstrap(routes), tmp_path / "bootstrap.yaml")


# --- the check is real: Envoy refuses broken configs built the same way ---------------------


def refusal(bootstrap: dict[str, Any], path: Path) -> str:
    write_bootstrap(bootstrap, path)
    result = validate_config(envoy_binary(), path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"envoy accepted a broken config:\n{output}"
    return output


def test_a_route_to_a_missing_cluster_is_refused(tmp_path: Path) -> None:
    bootstrap = case_bootstrap(translate_case("weighted_backends"))
    clusters = bootstrap["static_resources"]["clusters"]
    removed = clusters.pop(next(i for i, c in enumerate(clusters) if c["name"] == "shop/checkout:8080"))
    assert removed["name"] == "shop/checkout:8080"
    output = refusal(bootstrap, tmp_path / "missing-cluster.yaml")
    assert "unknown" in output and "shop/checkout:8080" in output, output


def test_a_regex_re2_cannot_compile_is_refused(tmp_path: Path) -> None:
    bootstrap = case_bootstrap(translate_case("path_kinds"))
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    regex_route = next(r for r in routes if "safe_regex" in r["match"])
    regex_route["match"]["safe_regex"]["regex"] = "/orders(?=x)"
    output = refusal(bootstrap, tmp_path / "bad-regex.yaml")
    assert "(?=" in output, output


def test_a_uri_template_with_six_variables_is_refused(tmp_path: Path) -> None:
    bootstrap = case_bootstrap(translate_case("rewrites"))
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    template_route = next(r for r in routes if "path_match_policy" in r["match"] and "path_rewrite_policy" not in r["route"])
    template_route["match"]["path_match_policy"]["typed_config"]["path_template"] = "/{a}/{b}/{c}/{d}/{e}/{f}"
    output = refusal(bootstrap, tmp_path / "six-variables.yaml")
    assert "variable count" in output, output


# --- what Envoy refuses, the schema refuses first (with file, line and field) -----------------

HEAD = "apiVersion: gatehouse.io/v1alpha1\nkind: Route\nmetadata: {name: r, namespace: shop}\n"
REFUSED_UP_FRONT = {
    # Python's `re` accepts \\Z, (?#...) and (?(1)...); RE2 does not. These used to reach Envoy (a NACK).
    "python-only regex anchor": (
        "  match: {pathRegex: '/orders\\Z'}\n  backends: [{service: a, port: 80}]\n",
        "r.yaml:5: spec.match.pathRegex: '/orders\\\\Z' is not a valid RE2 regex",
    ),
    "python-only regex comment in a header matcher": (
        "  match: {path: /orders, headers: [{name: x-id, regex: '[0-9]+(?#digits)'}]}\n  backends: [{service: a, port: 80}]\n",
        "r.yaml:5: spec.match.headers[0].regex: '[0-9]+(?#digits)' is not a valid RE2 regex",
    ),
    "python-only conditional group in rewrite.regex": (
        "  match: {pathPrefix: /orders}\n  backends: [{service: a, port: 80}]\n"
        "  rewrite: {regex: '^(/v1)?(?(1)/a|/b)', substitution: /c}\n",
        "r.yaml:7: spec.rewrite.regex: '^(/v1)?(?(1)/a|/b)' is not a valid RE2 regex",
    ),
    "regex beyond Envoy's program size": (
        "  match: {pathRegex: '/(ab|cd){16}'}\n  backends: [{service: a, port: 80}]\n",
        "r.yaml:5: spec.match.pathRegex: '/(ab|cd){16}' is too complex for Envoy: RE2 program size 101 exceeds 100",
    ),
    # The translator names the glob {gh_rest=**}: a sixth variable.
    "five variables, a glob and rewrite.prefix": (
        "  match: {path: '/{a}/{b}/{c}/{d}/{e}/**'}\n  backends: [{service: a, port: 80}]\n  rewrite: {prefix: /v3}\n",
        "r.yaml:7: spec.rewrite.prefix: rewriting /{a}/{b}/{c}/{d}/{e}/** needs its trailing /** named as a variable",
    ),
    # Beyond protobuf's Duration range: used to fail the whole translation.
    "a huge timeout": (
        "  match: {path: /orders}\n  backends: [{service: a, port: 80}]\n  timeouts: {request: 100000000h}\n",
        "r.yaml:7: spec.timeouts.request: '100000000h' is longer than the maximum of 720h",
    ),
}


@pytest.mark.parametrize("body, problem", REFUSED_UP_FRONT.values(), ids=list(REFUSED_UP_FRONT))
def test_what_envoy_would_refuse_is_refused_up_front(body: str, problem: str) -> None:
    routes, problems = parse_route_file(HEAD + "spec:\n" + body, Origin("file", "r.yaml"))
    assert routes == []
    assert len(problems) == 1 and problem in str(problems[0]), [str(p) for p in problems]


# check_re2 compiles with RE2 as Envoy does (the UTF-8 bytes, as Latin-1) and applies Envoy's
# default program-size limit (100); this holds it to what a real Envoy says, both ways, at the
# boundary and beyond.
RE2_VERDICTS = [
    # (regex, does Envoy accept it?)
    pytest.param("/c\\++", True, id="escaped plus, repeated"),
    pytest.param("/a\\\\1", True, id="escaped backslash before a digit"),
    pytest.param("/\\Q(v1)\\E/.*", True, id="RE2 literal quoting"),
    pytest.param("\\p{Greek}+", True, id="Unicode script"),
    pytest.param("(ab|cd){16}", True, id="program size 100"),
    pytest.param("(ab|cd){16}e", False, id="program size 101"),
    pytest.param("x{99}", False, id="program size 103"),
    pytest.param("/orders(?=x)", False, id="lookahead"),
    pytest.param("/orders\\Z", False, id="python-only anchor"),
    pytest.param("/orders(?#id)", False, id="python-only comment"),
    pytest.param("/(a)?(?(1)b|c)", False, id="python-only conditional"),
    pytest.param("/a*+", False, id="possessive"),
    pytest.param("(a)\\1", False, id="backreference"),
    pytest.param(".{60}", False, id="dot x60: 124 in Envoy"),
    pytest.param(".{30}", True, id="dot x30: 64 in Envoy"),
    pytest.param("/api/v[0-9]+/.{1,20}", True, id="realistic dot range"),
    pytest.param("/users/[^/]+/avatar/[^/]{1,16}\\.png", True, id="realistic negated classes"),
    pytest.param("\\pL+", True, id="Unicode letter class"),
    pytest.param("\\x{100}", False, id="escape above xff"),
]


def envoy_accepts_regex(regex: str, path: Path) -> bool:
    bootstrap = case_bootstrap(translate_case("path_kinds"))
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    next(r for r in routes if "safe_regex" in r["match"])["match"]["safe_regex"]["regex"] = regex
    write_bootstrap(bootstrap, path)
    return validate_config(envoy_binary(), path).returncode == 0


@pytest.mark.parametrize("regex, envoy_accepts", RE2_VERDICTS)
def test_check_re2_agrees_with_envoy(regex: str, envoy_accepts: bool, tmp_path: Path) -> None:
    assert envoy_accepts_regex(regex, tmp_path / "regex.yaml") is envoy_accepts, "the table is wrong about Envoy"
    try:
        check_re2(regex)
        ours = True
    except ValueError:
        ours = False
    assert ours is envoy_accepts, f"check_re2 {'refuses' if envoy_accepts else 'accepts'} {regex!r}, Envoy does not"


def test_the_access_log_wiring_passes_envoy_validate(tmp_path: Path) -> None:
    routes, problems = load_route_path(REPO_ROOT / "examples" / "routes")
    assert problems == [] and routes
    settings = GatewaySettings(access_log=AccessLogSettings((("127.0.0.1", 9411), ("localhost", 9412)), 0, 50))
    translation = RouteTranslator(settings).translate(routes)
    table = parse_endpoints((REPO_ROOT / "examples" / "endpoints.yaml").read_bytes(), "endpoints.yaml")
    endpoints = EndpointTranslator().translate(translation.cluster_refs, table)
    bootstrap = static_bootstrap(
        [resource_data(r) for r in translation.listeners],
        [resource_data(r) for r in translation.routes],
        [resource_data(r) for r in translation.clusters],
        [resource_data(r) for r in endpoints],
    )
    hcm = bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["access_log"][0]["name"] == "envoy.access_loggers.http_grpc"
    assert_valid(bootstrap, tmp_path / "access-log.yaml")
