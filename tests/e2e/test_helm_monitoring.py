"""The chart's dashboard and alerts (monitoring.grafanaDashboard, monitoring.prometheusRule).

- with the defaults neither renders; each switch renders exactly its object, with the
  labels, annotations and namespace from values; `helm lint --strict` is clean with both;
  values.schema.json refuses unknown keys and wrong types under `monitoring`;
- the dashboard ConfigMap holds dashboards/gatehouse.json: a Grafana dashboard with the
  datasource, namespace, route and cluster variables and a PromQL expression in every
  panel target;
- the alert rules carry the thresholds, `for` durations, severities, extra labels and the
  extra series selector from values;
- every metric name the dashboard and the rules query exists: gatehouse_* names in what the
  Python code registers (prometheus_client's registry, and the scrape-time collectors'
  families), envoy_* names in what a real Envoy, configured by the real control plane and
  sent real requests, exposes on /stats/prometheus, with the label names the selectors use;
  "served upstream" excludes exactly Gatehouse's own clusters;
- a real kube-apiserver, given a PrometheusRule CRD with a structural schema (defined here),
  stores the rendered PrometheusRule and the dashboard ConfigMap, and refuses a rule the
  schema does not allow.

Needs the tools from scripts/build-kube-tools, Envoy and git; under CI=true a missing one
fails.
"""

from __future__ import annotations

import importlib
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from control_plane.translator.access_log import ACCESS_LOG_CLUSTER
from control_plane.translator.ext_authz import EXT_AUTHZ_CLUSTER
from control_plane.translator.ratelimit import RATELIMIT_CLUSTER
from tests.e2e.test_helm_chart import (  # noqa: F401 - api, helm_home and tools are fixtures
    CHART,
    NAMESPACE,
    RELEASE,
    api,
    find,
    helm_home,
    objects,
    run_helm,
    template,
    tools,
)
from tests.harness.binaries import require_binary
from tests.harness.envoy import envoy_binary
from tests.harness.gateway import GatewayStack
from tests.harness.http_client import wait_for
from tests.harness.kubernetes import KubeAPIServer, KubeTools
from tests.harness.ports import free_port
from tests.harness.route_repo import route_doc

pytestmark = pytest.mark.timeout(600)

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_FILE = CHART / "dashboards" / "gatehouse.json"
DASHBOARD = f"{RELEASE}-gatehouse-dashboard"
ALERTS = f"{RELEASE}-gatehouse-alerts"
DASHBOARD_ON = ["--set", "monitoring.grafanaDashboard.enabled=true"]
RULES_ON = ["--set", "monitoring.prometheusRule.enabled=true"]
ALERT_NAMES = {
    "envoyNack": "GatehouseEnvoyNack",
    "envoyConfigBehind": "GatehouseEnvoyConfigBehind",
    "route5xxRatio": "GatehouseRoute5xxRatio",
    "upstream5xxRatio": "GatehouseUpstream5xxRatio",
    "circuitBreakerOpen": "GatehouseCircuitBreakerOpen",
    "requestsNotServedUpstream": "GatehouseRequestsNotServedUpstream",
}
# Where the Python code declares its metrics (module-level metrics register on import).
METRIC_MODULES = ["control_plane.metrics", "ext_authz.metrics", "limiter.metrics", "telemetry.metrics"]
PACKAGES = ["control_plane", "ext_authz", "ratelimit_svc", "telemetry", "gatehouse"]
# Labels Prometheus adds to every scraped series (not Envoy's): the selectors may use them.
TARGET_LABELS = {"namespace"}


def rule_docs(*values: str, tools: KubeTools, home: Path) -> list[dict[str, Any]]:
    return [d for d in objects(template(tools, home, *values)) if d["kind"] == "PrometheusRule"]


def dashboard_maps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ConfigMap" and "gatehouse.json" in d.get("data", {})]


def rules_of(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Alert name → rule, over every group."""
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every target of every panel, rows' nested panels included."""
    return [(title, target) for _, title, target in row_targets(dashboard)]


def row_targets(dashboard: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(row title, panel title, target), in the dashboard's order."""
    found = []
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((row, inner["title"], target))
    return found


# --- PromQL: the metric names an expression reads ------------------------------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')


def metric_names(expr: str) -> set[str]:
    """Every metric an expression (or a Grafana label_values() query) selects: identifiers
    that are not functions, keywords, label lists, label matchers, strings or durations."""
    text = STRING.sub('""', expr)
    text = re.sub(r"^\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*$", r"\1", text, flags=re.S)  # Grafana's: the label is not a metric
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if not call and word not in PROMQL_KEYWORDS:
            names.add(word)
    return names


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric, [(label, operator, value), ...]) for every `metric{...}` of an expression."""
    found = []
    for match in SELECTOR.finditer(expr):
        matchers = [(m.group(1), m.group(2), json.loads(m.group(3))) for m in MATCHER.finditer(match.group(2))]
        found.append((match.group(1), matchers))
    return found


def test_metric_name_extraction_finds_every_metric_and_nothing_else() -> None:
    """The check below is only as good as this: functions, label lists, matchers, strings,
    durations, numbers and Grafana variables are not metrics; every metric is found."""
    expr = (
        'histogram_quantile(0.95, sum by (type, le) (rate(some_bucket{a="x",b=~"$route"}[$__rate_interval])))'
        ' / on(namespace) group_left(pod) other_total > 1e-05 and ignoring(x) bare unless '
        'label_replace(g{c!~"a|b"}, "breaker", "default_rq", "", "") or topk(10, up offset 5m) * 0'
    )
    assert metric_names(expr) == {"some_bucket", "other_total", "bare", "g", "up"}
    assert metric_names('label_values(envoy_x{namespace=~"$namespace"}, envoy_route)') == {"envoy_x"}
    assert selectors('a{x="1", y!~"b|c"} + b{}') == [("a", [("x", "=", "1"), ("y", "!~", "b|c")]), ("b", [])]


# --- rendering ----------------------------------------------------------------------------


def test_defaults_render_neither_and_each_switch_renders_exactly_its_object(tools: KubeTools, helm_home: Path) -> None:
    def keys(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")) for d in docs}

    defaults = objects(template(tools, helm_home))
    assert not [d for d in defaults if d["kind"] == "PrometheusRule"]
    assert not dashboard_maps(defaults)
    dashboard_only = objects(template(tools, helm_home, *DASHBOARD_ON))
    assert keys(dashboard_only) - keys(defaults) == {("ConfigMap", DASHBOARD, NAMESPACE)}
    assert keys(defaults) <= keys(dashboard_only)
    rules_only = objects(template(tools, helm_home, *RULES_ON))
    assert keys(rules_only) - keys(defaults) == {("PrometheusRule", ALERTS, NAMESPACE)}
    assert keys(defaults) <= keys(rules_only)
    both = objects(template(tools, helm_home, *DASHBOARD_ON, *RULES_ON))
    assert keys(both) - keys(defaults) == {("ConfigMap", DASHBOARD, NAMESPACE), ("PrometheusRule", ALERTS, NAMESPACE)}
    # Nothing else changes: the workloads render the same.
    assert [d for d in both if (d["kind"], d["metadata"]["name"]) not in {("ConfigMap", DASHBOARD), ("PrometheusRule", ALERTS)}] == defaults

    rule = find(rules_only, "PrometheusRule", ALERTS)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rules_of(rule)) == set(ALERT_NAMES.values())


def test_helm_lint_is_clean_with_dashboard_and_alerts(tools: KubeTools, helm_home: Path) -> None:
    values = [*DASHBOARD_ON, *RULES_ON, "--set-json", 'monitoring.prometheusRule.labels={"release":"prometheus"}']
    result = run_helm(tools, helm_home, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_dashboard_configmap_holds_the_dashboard_with_its_variables_and_queries(tools: KubeTools, helm_home: Path) -> None:
    values = [
        *DASHBOARD_ON,
        "--set", "monitoring.grafanaDashboard.namespace=monitoring",
        "--set", "monitoring.grafanaDashboard.label=grafana.example.com/dashboard,monitoring.grafanaDashboard.labelValue=gatehouse",
        # An extra label may not take the sidecar's label away.
        "--set-json", 'monitoring.grafanaDashboard.labels={"team":"edge","grafana.example.com/dashboard":"other"}',
        "--set-json", 'monitoring.grafanaDashboard.annotations={"grafana_folder":"Gateways"}',
    ]  # fmt: skip
    (config_map,) = dashboard_maps(objects(template(tools, helm_home, *values)))
    metadata = config_map["metadata"]
    assert (metadata["name"], metadata["namespace"]) == (DASHBOARD, "monitoring")
    assert metadata["labels"]["grafana.example.com/dashboard"] == "gatehouse"
    assert metadata["labels"]["team"] == "edge"
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "Gateways"}
    # The default label is the one the grafana chart's sidecar looks for.
    (default_map,) = dashboard_maps(objects(template(tools, helm_home, *DASHBOARD_ON)))
    assert default_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default_map["metadata"]["namespace"] == NAMESPACE and "annotations" not in default_map["metadata"]

    # The file, untouched (Grafana's {{...}} legends are not Helm's).
    assert list(config_map["data"]) == ["gatehouse.json"]
    dashboard = json.loads(config_map["data"]["gatehouse.json"])
    assert dashboard == json.loads(DASHBOARD_FILE.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41 and dashboard["uid"] and dashboard["title"]

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name, label in (("namespace", "namespace"), ("route", "envoy_route"), ("cluster", "envoy_cluster_name")):
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"]["uid"] == "${datasource}", variable
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        assert re.fullmatch(rf"label_values\(\w+\{{.*\}}, {label}\)", query), query
        assert variable["includeAll"] and variable["allValue"] == ".*"

    targets = dashboard_targets(dashboard)
    assert len(targets) >= 40
    for title, target in targets:
        assert target["expr"].strip(), title
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" and p.get("targets") for p in panels)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exprs = "\n".join(t["expr"] for _, t in targets)
    # What the issue asks for, by the series that show it.
    for needed in (
        "histogram_quantile(0.5,", "histogram_quantile(0.95,", "histogram_quantile(0.99,",
        "envoy_vhost_route_upstream_rq_time_bucket", "envoy_cluster_upstream_rq_time_bucket",
        'envoy_response_code="429"', 'envoy_response_code="503"', 'envoy_response_code_class="4"', 'envoy_response_code_class="5"',
        "envoy_cluster_circuit_breakers_default_rq_open", "envoy_cluster_upstream_rq_pending_overflow",
        "envoy_cluster_outlier_detection_ejections_active", "gatehouse_xds_connected_proxies", "gatehouse_xds_pushes_total",
        "gatehouse_xds_nacks_total", "gatehouse_xds_change_to_push_seconds_bucket", "gatehouse_xds_push_to_ack_seconds_bucket",
        "gatehouse_authz_decisions_total", "gatehouse_authz_token_cache_lookups_total", "gatehouse_ratelimit_over_limit_total", "gatehouse_ratelimit_redis_errors_total",
        "gatehouse_ratelimit_fallback_active",
    ):  # fmt: skip
        assert needed in exprs, needed
    # The route rows follow $route, the upstream rows $cluster, everything $namespace.
    rows = row_targets(dashboard)
    route_exprs = [t["expr"] for row, _, t in rows if row.startswith("Per route")]
    cluster_exprs = [t["expr"] for row, _, t in rows if row.startswith(("Per upstream", "Circuit breakers"))]
    assert len(route_exprs) >= 8 and len(cluster_exprs) >= 20
    for expr in route_exprs:
        assert all(("envoy_route", "=~", "$route") in m for _, m in selectors(expr)), expr
    for expr in cluster_exprs:
        assert all(("envoy_cluster_name", "=~", "$cluster") in m for _, m in selectors(expr)), expr
    for _, target in targets:
        found = selectors(target["expr"])
        assert {metric for metric, _ in found} == metric_names(target["expr"]), target["expr"]  # every series selected with labels
        assert all(("namespace", "=~", "$namespace") in m for _, m in found), target["expr"]


def test_alert_rules_take_thresholds_durations_labels_and_selector_from_values(tools: KubeTools, helm_home: Path) -> None:
    selector = 'job=~"gatehouse.*",cluster="eu-1"'
    values = [
        *RULES_ON,
        "--set", "monitoring.prometheusRule.namespace=monitoring,monitoring.prometheusRule.window=10m,monitoring.prometheusRule.interval=30s",
        "--set-string", f"monitoring.prometheusRule.selector={selector.replace(',', chr(92) + ',')}",
        "--set-json", 'monitoring.prometheusRule.labels={"release":"prometheus"}',
        "--set-json", 'monitoring.prometheusRule.annotations={"owner":"edge-team"}',
        "--set-json", 'monitoring.prometheusRule.ruleLabels={"team":"edge","page":"false"}',
        "--set", "monitoring.prometheusRule.alerts.route5xxRatio.threshold=0.02,monitoring.prometheusRule.alerts.route5xxRatio.minRequestRate=0.5",
        "--set", "monitoring.prometheusRule.alerts.route5xxRatio.for=10m,monitoring.prometheusRule.alerts.route5xxRatio.severity=critical",
        "--set", "monitoring.prometheusRule.alerts.upstream5xxRatio.threshold=0.1,monitoring.prometheusRule.alerts.upstream5xxRatio.minRequestRate=2",
        "--set", "monitoring.prometheusRule.alerts.requestsNotServedUpstream.threshold=0.45",
        "--set", "monitoring.prometheusRule.alerts.requestsNotServedUpstream.minRequestRate=3",
        "--set", "monitoring.prometheusRule.alerts.envoyConfigBehind.seconds=90,monitoring.prometheusRule.alerts.envoyConfigBehind.for=30s",
        "--set", "monitoring.prometheusRule.alerts.circuitBreakerOpen.for=2m,monitoring.prometheusRule.alerts.envoyNack.severity=critical",
    ]  # fmt: skip
    (rule,) = rule_docs(*values, tools=tools, home=helm_home)
    metadata = rule["metadata"]
    assert (metadata["name"], metadata["namespace"]) == (ALERTS, "monitoring")
    assert metadata["labels"]["release"] == "prometheus" and metadata["labels"]["app.kubernetes.io/component"] == "monitoring"
    assert metadata["annotations"] == {"owner": "edge-team"}
    (group,) = rule["spec"]["groups"]
    assert group["interval"] == "30s"
    rules = rules_of(rule)
    assert set(rules) == set(ALERT_NAMES.values())
    severities = {name: r["labels"]["severity"] for name, r in rules.items()}
    assert severities == {
        "GatehouseEnvoyNack": "critical", "GatehouseEnvoyConfigBehind": "warning", "GatehouseRoute5xxRatio": "critical",
        "GatehouseUpstream5xxRatio": "warning", "GatehouseCircuitBreakerOpen": "warning", "GatehouseRequestsNotServedUpstream": "critical",
    }  # fmt: skip
    durations = {name: r["for"] for name, r in rules.items()}
    assert durations == {
        "GatehouseEnvoyNack": "0s", "GatehouseEnvoyConfigBehind": "30s", "GatehouseRoute5xxRatio": "10m",
        "GatehouseUpstream5xxRatio": "5m", "GatehouseCircuitBreakerOpen": "2m", "GatehouseRequestsNotServedUpstream": "5m",
    }  # fmt: skip
    for name, r in rules.items():
        assert {k: v for k, v in r["labels"].items() if k != "severity"} == {"team": "edge", "page": "false"}, name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name
        assert "{{ $labels." in r["annotations"]["summary"] + r["annotations"]["description"], name  # Prometheus', not Helm's
        # Every rate window is `window` (two alerts read gauges only); every series
        # selector carries `selector`.
        gauges_only = name in {"GatehouseEnvoyConfigBehind", "GatehouseCircuitBreakerOpen"}
        assert set(re.findall(r"\[[^\]]*\]", r["expr"])) == (set() if gauges_only else {"[10m]"}), (name, r["expr"])
        names = metric_names(r["expr"])
        found = selectors(r["expr"])
        assert names and {metric for metric, _ in found} == names, (name, r["expr"])
        for metric, matchers in found:
            assert ("job", "=~", "gatehouse.*") in matchers and ("cluster", "=", "eu-1") in matchers, (name, metric)
    exprs = {name: " ".join(r["expr"].split()) for name, r in rules.items()}
    assert "> 0.02 and" in exprs["GatehouseRoute5xxRatio"] and exprs["GatehouseRoute5xxRatio"].endswith(">= 0.5")
    assert "> 0.1 and" in exprs["GatehouseUpstream5xxRatio"] and exprs["GatehouseUpstream5xxRatio"].endswith(">= 2")
    assert "> 0.45 and" in exprs["GatehouseRequestsNotServedUpstream"] and exprs["GatehouseRequestsNotServedUpstream"].endswith(">= 3")
    assert exprs["GatehouseEnvoyConfigBehind"].endswith("gatehouse_xds_oldest_unacked_push_seconds{" + selector + "}) > 90")
    assert "increase(gatehouse_xds_nacks_total{" + selector + "}[10m])" in exprs["GatehouseEnvoyNack"]

    # The defaults: no selector ({} nowhere), a 5m window, 5% / 30% thresholds, 1 request/s.
    (default,) = rule_docs(*RULES_ON, tools=tools, home=helm_home)
    assert default["metadata"]["namespace"] == NAMESPACE and "annotations" not in default["metadata"]
    assert "interval" not in default["spec"]["groups"][0]
    defaults = {name: " ".join(r["expr"].split()) for name, r in rules_of(default).items()}
    assert not any("{}" in e for e in defaults.values()), defaults
    assert all(set(re.findall(r"\[[^\]]*\]", e)) <= {"[5m]"} for e in defaults.values())
    assert "> 0.05 and" in defaults["GatehouseRoute5xxRatio"] and defaults["GatehouseRoute5xxRatio"].endswith(">= 1")
    assert "> 0.3 and" in defaults["GatehouseRequestsNotServedUpstream"]
    assert defaults["GatehouseEnvoyConfigBehind"].endswith("> 60")
    assert {r["labels"]["severity"] for r in rules_of(default).values()} == {"warning", "critical"}
    assert all(set(r["labels"]) == {"severity"} for r in rules_of(default).values())


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_each_alert_can_be_switched_off(tools: KubeTools, helm_home: Path, alert: str) -> None:
    (rule,) = rule_docs(*RULES_ON, "--set", f"monitoring.prometheusRule.alerts.{alert}.enabled=false", tools=tools, home=helm_home)
    assert set(rules_of(rule)) == set(ALERT_NAMES.values()) - {ALERT_NAMES[alert]}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "monitoring.bogus=1"], "bogus"),
        (["--set", "monitoring.grafanaDashboard.enabeld=true"], "enabeld"),
        (["--set", "monitoring.grafanaDashboard.enabled=yes"], "enabled"),
        (["--set", "monitoring.grafanaDashboard.label=-not-a-label"], "label"),
        (["--set", "monitoring.grafanaDashboard.namespace=Monitoring"], "namespace"),
        (["--set", "monitoring.prometheusRule.alerts.route5xxRatio.threshold=5"], "threshold"),  # a share, not a percentage
        (["--set", "monitoring.prometheusRule.alerts.upstream5xxRatio.threshold=0"], "threshold"),
        (["--set", "monitoring.prometheusRule.alerts.upstream5xxRatio.threshold=0.0"], "threshold"),
        (["--set", "monitoring.prometheusRule.alerts.upstream5xxRatio.threshold=5%"], "threshold"),
        (["--set-json", "monitoring.prometheusRule.alerts.upstream5xxRatio.threshold=1.5"], "threshold"),
        (["--set", "monitoring.prometheusRule.alerts.route5xxRatio.minRequestRate=lots"], "minRequestRate"),
        (["--set", "monitoring.prometheusRule.alerts.requestsNotServedUpstream.minRequestRate=-1"], "minRequestRate"),
        (["--set", "monitoring.prometheusRule.alerts.envoyConfigBehind.seconds=0"], "seconds"),
        (["--set", "monitoring.prometheusRule.alerts.envoyNack.for=1minute"], "for"),
        (["--set", "monitoring.prometheusRule.alerts.circuitBreakerOpen.threshold=1"], "threshold"),
        (["--set", "monitoring.prometheusRule.alerts.circuitBreakerOpen.severity="], "severity"),
        (["--set", "monitoring.prometheusRule.alerts.gatewayDown.enabled=true"], "gatewayDown"),
        (["--set", "monitoring.prometheusRule.window=0s"], "window"),
        (["--set", "monitoring.prometheusRule.interval=often"], "interval"),
        (["--set", "monitoring.prometheusRule.selector=namespace=gatehouse"], "selector"),  # unquoted value
        (["--set-string", 'monitoring.prometheusRule.selector=job="a"} or vector(1) or x{a="b"'], "selector"),
        (["--set", "monitoring.prometheusRule.ruleLabels.severity=info"], "severity"),  # set per alert
        (["--set", "monitoring.prometheusRule.ruleLabels.bad-name=x"], "bad-name"),
        (["--set", "monitoring.prometheusRule.labels.release=1"], "release"),  # a number, not a string
    ],
)
def test_schema_refuses_unknown_and_mistyped_monitoring_values(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:
    result = run_helm(tools, helm_home, "template", RELEASE, str(CHART), *values, check=False)
    assert result.returncode != 0, f"helm template {values} was accepted"
    assert "schema" in result.stderr and message in result.stderr, result.stderr


# --- every metric exists -------------------------------------------------------------------


def exposition_names(family_name: str, family_type: str) -> set[str]:
    """The sample names Prometheus stores for a prometheus_client metric family."""
    suffixes = {
        "counter": ["_total", "_created"],
        "histogram": ["_bucket", "_count", "_sum", "_created"],
        "summary": ["", "_count", "_sum", "_created"],
        "info": ["_info"],
    }.get(family_type, [""])
    return {family_name + suffix for suffix in suffixes}


SOURCE_METRIC = re.compile(r"\b(Counter|Gauge|Histogram|Summary)(MetricFamily)?\(\s*\"(gatehouse_\w+)\"")


def gatehouse_metric_names() -> set[str]:
    """What the Python code exposes: the module-level metrics, through prometheus_client's
    registry, and the families of scrape-time collectors (`...MetricFamily("name"`), as
    prometheus_client names their samples."""
    for module in METRIC_MODULES:
        importlib.import_module(module)
    names: set[str] = set()
    for family in prometheus_client.REGISTRY.collect():
        names |= exposition_names(family.name, family.type)
        names |= {sample.name for sample in family.samples}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            for kind, _, name in SOURCE_METRIC.findall(path.read_text()):
                kind = kind.lower()
                # Counters and CounterMetricFamily take the name with or without _total.
                names |= exposition_names(name.removesuffix("_total") if kind == "counter" else name, kind)
    return {n for n in names if n.startswith("gatehouse_")}


class _Zero:
    """A verifier whose every number is 0 (for the scrape-time collector)."""

    def __getattr__(self, name: str) -> int:
        return 0


def sample_names(registry: CollectorRegistry) -> set[str]:
    text = generate_latest(registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_gatehouse_names_are_what_prometheus_client_exposes() -> None:
    """The derivation above is prometheus_client's own naming: for each kind of metric, and
    for the scrape-time collector's families (exposed here with no issuer configured)."""
    from ext_authz.metrics import VerifierCollector

    registry = CollectorRegistry()
    prometheus_client.Counter("gatehouse_probe_total", "", ["type"], registry=registry).labels("RDS").inc()
    prometheus_client.Counter("gatehouse_plain", "", registry=registry).inc()
    prometheus_client.Gauge("gatehouse_level", "", registry=registry).set(1)
    prometheus_client.Histogram("gatehouse_wait_seconds", "", registry=registry).observe(0.1)
    derived = set()
    for family in registry.collect():
        derived |= exposition_names(family.name, family.type)
    assert sample_names(registry) == derived == {
        "gatehouse_probe_total", "gatehouse_probe_created", "gatehouse_plain_total", "gatehouse_plain_created",
        "gatehouse_level", "gatehouse_wait_seconds_bucket", "gatehouse_wait_seconds_count",
        "gatehouse_wait_seconds_sum", "gatehouse_wait_seconds_created",
    }  # fmt: skip

    known = gatehouse_metric_names()
    registry = CollectorRegistry()
    registry.register(VerifierCollector(_Zero(), []))
    exposed = sample_names(registry)
    assert "gatehouse_authz_token_cache_hits_total" in exposed
    assert exposed <= known, exposed - known
    assert {"gatehouse_xds_pushes_total", "gatehouse_xds_push_to_ack_seconds_bucket", "gatehouse_xds_connected_proxies"} <= known


@pytest.fixture(scope="module")
def envoy_stats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, set[str]]]:
    """A real gateway (Git routes, the control plane, Envoy, an echo upstream) configured
    with ext_authz, rate limits and the access log (their sidecars absent: Envoy still
    creates their clusters and filters), after real requests: Envoy's /stats/prometheus
    text and the control plane's gatehouse_* sample names."""
    envoy_binary()
    require_binary("git", "apt-get install git")
    extra = {
        "extAuthz": {"address": f"127.0.0.1:{free_port()}", "timeout": "200ms"},
        "rateLimit": {"address": f"127.0.0.1:{free_port()}", "timeout": "100ms"},
        "accessLog": {"address": f"127.0.0.1:{free_port()}"},
    }
    stack = GatewayStack(tmp_path_factory.mktemp("monitoring-stack"), upstreams=("svc-a",), control_plane_extra=extra)
    backend = [{"service": "svc-a", "port": 8080}]
    try:
        stack.commit_routes({"routes.yaml": [
            # outlierDetection: Envoy creates a cluster's outlier stats only with it.
            route_doc("echo", {"match": {"pathPrefix": "/echo"}, "backends": backend, "auth": {"required": False},
                               "outlierDetection": {"consecutive5xx": 50}}),
            route_doc("limited", {"match": {"pathPrefix": "/limited"}, "backends": backend, "auth": {"required": False},
                                  "rateLimits": [{"key": "ip", "algorithm": "fixedWindow", "limit": 1000, "window": "60s"}]}),
        ]})  # fmt: skip
        stack.start(wait_path="/echo")
        assert stack.envoy is not None
        statuses = [stack.get(path).status for path in ("/echo", "/echo", "/echo?status=503", "/nowhere", "/limited")]
        assert statuses == [200, 200, 503, 404, 200], statuses  # the ratelimit sidecar is absent: failClosed false lets it through
        envoy = stack.envoy

        # Histograms are merged from the workers at each stats flush (every 5 s by default).
        def flushed() -> bool:
            return "envoy_vhost_route_upstream_rq_time_bucket{" in envoy.admin_get("/stats/prometheus")

        wait_for(flushed, 15, "Envoy's first histogram flush", 0.25)
        text = envoy.admin_get("/stats/prometheus")
        url = f"http://127.0.0.1:{stack.control_plane.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            control_plane = {line.split("{")[0].split(" ")[0] for line in response.read().decode().splitlines() if line.startswith("gatehouse_")}
        yield text, control_plane
    finally:
        stack.stop()


def envoy_series(text: str) -> dict[str, set[str]]:
    """Metric name → label names, exactly as Prometheus stores Envoy's text format (no
    `_total` added to counters, histograms as _bucket/_count/_sum)."""
    series: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
        assert match, line
        labels = series.setdefault(match.group(1), set())
        labels |= set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', match.group(3) or ""))
    return series


def dashboard_and_rule_exprs(tools: KubeTools, home: Path) -> dict[str, str]:
    """Every PromQL expression the chart ships, by where it is: rules (with every alert on),
    dashboard targets and variable queries."""
    docs = objects(template(tools, home, *DASHBOARD_ON, *RULES_ON))
    exprs = {f"rule {name}": r["expr"] for name, r in rules_of(find(docs, "PrometheusRule", ALERTS)).items()}
    (config_map,) = dashboard_maps(docs)
    dashboard = json.loads(config_map["data"]["gatehouse.json"])
    for index, (title, target) in enumerate(dashboard_targets(dashboard)):
        exprs[f"panel {title!r} #{index}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            exprs[f"variable {variable['name']}"] = query
    return exprs


def test_every_metric_the_dashboard_and_alerts_query_exists(
    tools: KubeTools, helm_home: Path, envoy_stats: tuple[str, set[str]]
) -> None:
    text, control_plane = envoy_stats
    envoy = envoy_series(text)
    gatehouse = gatehouse_metric_names()
    # The sources of truth are real: Envoy's golden-signal series, the control plane's own
    # output (every gatehouse_* name the running control plane exposes is a known one).
    assert {"envoy_vhost_route_upstream_rq_xx", "envoy_cluster_upstream_rq_total", "envoy_http_downstream_rq_total"} <= set(envoy)
    assert "envoy_vhost_route_upstream_rq_xx_total" not in envoy  # Envoy's counters carry no _total
    assert control_plane and control_plane <= gatehouse, control_plane - gatehouse
    assert {"gatehouse_xds_nacks_total", "gatehouse_authz_decisions_total", "gatehouse_ratelimit_hits_total"} <= gatehouse

    exprs = dashboard_and_rule_exprs(tools, helm_home)
    used: dict[str, set[str]] = {}
    unknown = []
    wrong_labels = []
    for where, expr in exprs.items():
        names = metric_names(expr)
        assert names, f"{where} reads no metric: {expr}"
        for name in names:
            used.setdefault(name, set()).add(where)
            known = envoy if name.startswith("envoy_") else gatehouse if name.startswith("gatehouse_") else set()
            if name not in known:
                unknown.append(f"{name} ({where})")
        for metric, matchers in selectors(expr):
            if metric in envoy:
                missing = {label for label, _, _ in matchers} - envoy[metric] - TARGET_LABELS
                if missing:
                    wrong_labels.append(f"{metric} has no label {sorted(missing)} ({where})")
    assert not unknown, "metrics that exist nowhere:\n" + "\n".join(sorted(unknown))
    assert not wrong_labels, "\n".join(sorted(wrong_labels))
    assert len(used) >= 40, sorted(used)


def test_served_upstream_excludes_exactly_gatehouses_own_clusters(
    tools: KubeTools, helm_home: Path, envoy_stats: tuple[str, set[str]]
) -> None:
    text, _ = envoy_stats
    exprs = dashboard_and_rule_exprs(tools, helm_home)
    exclusions = {m for expr in exprs.values() for m in re.findall(r'envoy_cluster_name!~("(?:[^"\\]|\\.)*")', expr)}
    assert len(exclusions) == 1, exclusions  # the dashboard and the rules agree
    excluded = re.compile(f"(?:{json.loads(exclusions.pop())})")  # Prometheus anchors regex matchers

    def is_excluded(name: str) -> bool:
        return excluded.fullmatch(name) is not None

    clusters = set(re.findall(r'envoy_cluster_name="([^"]*)"', text))
    # Gatehouse's own: the bootstrap's (the chart's, which adds the admin cluster behind the
    # health listener) and the sidecars' clusters the control plane adds.
    bootstrap = yaml.safe_load(find(objects(template(tools, helm_home)), "ConfigMap", f"{RELEASE}-gatehouse-gateway")["data"]["bootstrap.yaml"])
    own = {c["name"] for c in bootstrap["static_resources"]["clusters"]} | {EXT_AUTHZ_CLUSTER, RATELIMIT_CLUSTER, ACCESS_LOG_CLUSTER}
    assert own == {"gatehouse_xds", "gatehouse_envoy_admin", "gatehouse_ext_authz", "gatehouse_ratelimit", "gatehouse_access_log"}
    assert {EXT_AUTHZ_CLUSTER, RATELIMIT_CLUSTER, ACCESS_LOG_CLUSTER, "gatehouse_xds"} <= clusters  # the real Envoy had them
    upstreams = clusters - own
    assert upstreams == {"default_svc-a_8080"}, clusters
    assert all(is_excluded(name) for name in own)
    assert not any(is_excluded(name) for name in upstreams)
    assert is_excluded("")  # another Envoy's series, without envoy_cluster_name
    # A service in a namespace called "gatehouse" is an upstream like any other.
    assert not any(is_excluded(name) for name in ("gatehouse_xds_8080", "gatehouse_ext-authz_9001", "gatehouse_api_443"))


# --- the real API server ---------------------------------------------------------------------

DURATION_PATTERN = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
PROMETHEUS_RULE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList", "plural": "prometheusrules", "singular": "prometheusrule"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "required": ["spec"],
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {
                        "type": "object",
                        "properties": {
                            "groups": {
                                "type": "array",
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["name"],
                                "items": {
                                    "type": "object",
                                    "required": ["name"],
                                    "properties": {
                                        "name": {"type": "string", "minLength": 1},
                                        "interval": {"type": "string", "pattern": DURATION_PATTERN},
                                        "rules": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "required": ["expr"],
                                                "properties": {
                                                    "alert": {"type": "string"},
                                                    "record": {"type": "string"},
                                                    "expr": {"x-kubernetes-int-or-string": True},
                                                    "for": {"type": "string", "pattern": DURATION_PATTERN},
                                                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            }},
        }],
    },
}  # fmt: skip


def test_api_server_stores_the_rendered_prometheus_rule_and_dashboard(api: KubeAPIServer, tools: KubeTools, helm_home: Path) -> None:
    api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(PROMETHEUS_RULE_CRD))
    api.kubectl("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com", "--timeout=60s")

    values = [
        *DASHBOARD_ON, *RULES_ON,
        "--set", "monitoring.prometheusRule.namespace=monitoring,monitoring.grafanaDashboard.namespace=monitoring",
        "--set", "monitoring.prometheusRule.interval=1m",
        "--set-json", 'monitoring.prometheusRule.labels={"release":"prometheus"}',
        "--set-json", 'monitoring.prometheusRule.ruleLabels={"team":"edge"}',
        "--set-string", 'monitoring.prometheusRule.selector=job=~"gatehouse.*"',
    ]  # fmt: skip
    docs = objects(template(tools, helm_home, *values))
    rule = find(docs, "PrometheusRule", ALERTS)
    (config_map,) = dashboard_maps(docs)
    manifest = yaml.safe_dump_all([rule, config_map])
    result = api.kubectl("apply", "--server-side", "--field-manager=helm-monitoring-test", "-f", "-", input=manifest)
    assert f"prometheusrule.monitoring.coreos.com/{ALERTS} serverside-applied" in result.stdout, result.stdout
    assert f"configmap/{DASHBOARD} serverside-applied" in result.stdout, result.stdout

    # Read back: stored as rendered, nothing pruned by the schema.
    stored = json.loads(api.kubectl("get", "prometheusrule", ALERTS, "-n", "monitoring", "-o", "json").stdout)
    assert stored["spec"] == rule["spec"]
    assert stored["metadata"]["labels"]["release"] == "prometheus"
    assert {r["alert"] for r in stored["spec"]["groups"][0]["rules"]} == set(ALERT_NAMES.values())
    stored_map = json.loads(api.kubectl("get", "configmap", DASHBOARD, "-n", "monitoring", "-o", "json").stdout)
    assert json.loads(stored_map["data"]["gatehouse.json"]) == json.loads(DASHBOARD_FILE.read_text())
    assert stored_map["metadata"]["labels"]["grafana_dashboard"] == "1"

    # The defaults go to the release namespace.
    default_rule = find(objects(template(tools, helm_home, *RULES_ON)), "PrometheusRule", ALERTS)
    api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(default_rule))
    stored = json.loads(api.kubectl("get", "prometheusrule", ALERTS, "-n", NAMESPACE, "-o", "json").stdout)
    assert stored["spec"] == default_rule["spec"]

    # The schema is enforced: a `for` Prometheus cannot parse and an unknown field are refused.
    broken = json.loads(json.dumps(rule))
    broken["metadata"]["name"] = "broken"
    broken["spec"]["groups"][0]["rules"][0]["for"] = "1 minute"
    refused = api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(broken), check=False)
    assert refused.returncode != 0 and "for" in refused.stderr and "should match" in refused.stderr, refused.stderr
    typo = json.loads(json.dumps(rule))
    typo["metadata"]["name"] = "typo"
    typo["spec"]["groups"][0]["rules"][0]["exprr"] = typo["spec"]["groups"][0]["rules"][0]["expr"]
    refused = api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(typo), check=False)
    assert refused.returncode != 0 and "exprr" in refused.stderr, refused.stderr
    assert api.kubectl("get", "prometheusrule", "broken", "typo", "-n", "monitoring", "--ignore-not-found", "-o", "name").stdout == ""
