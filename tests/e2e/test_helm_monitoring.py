"""The chart's dashboard, alerts and scrape configuration (monitoring.grafanaDashboard,
monitoring.prometheusRule, monitoring.serviceMonitor, monitoring.podMonitor).

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
  schema does not allow;
- the ServiceMonitors / PodMonitors render only when switched on (never both), take their
  knobs from values, and resolve (Service selector → Service port → targetPort → container
  port, or pod selector → container port) to exactly the control plane's admin port, every
  gateway pod's Envoy stats port and the enabled sidecars' metrics ports;
- `helm install` into a real kube-apiserver with ServiceMonitor and PodMonitor CRDs defined
  in tests/e2e/monitoring/operator_crds.py: the monitors are stored, the API server's own
  label selection picks the chart's Services and Pods (created from the stored
  Deployments), the port names exist, `helm upgrade` switches to PodMonitors, and the CRDs'
  schemas refuse an endpoint without a port name;
- `promtool check rules` accepts the rendered rule groups (and refuses a broken one), and
  `promtool test rules` (tests/e2e/monitoring/alerts_test.yaml, plus cases generated here
  for non-default values) fires and clears GatehouseEnvoyNack, GatehouseEnvoyConfigBehind and
  GatehouseBreakerOpen on sample series; a naive NACK rule fails those cases.

Needs the tools from scripts/build-kube-tools, Envoy, git and promtool (Debian's
`prometheus` package); under CI=true a missing one fails.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
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
    WITH_ISSUERS,
    api,
    find,
    helm_home,
    objects,
    run_helm,
    template,
    tools,
)
from tests.e2e.monitoring.operator_crds import POD_MONITOR_CRD, SERVICE_MONITOR_CRD
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
    "breakerOpen": "GatehouseBreakerOpen",
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


def unchanged(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents to compare across renderings: each `helm template` generates new
    credentials (the route breakers' Secret), so Secrets' data is left out."""
    return [{**d, "data": None} if d["kind"] == "Secret" else d for d in docs]


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
    assert unchanged([d for d in both if (d["kind"], d["metadata"]["name"]) not in {("ConfigMap", DASHBOARD), ("PrometheusRule", ALERTS)}]) == unchanged(defaults)

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
        "GatehouseBreakerOpen": "warning",
    }  # fmt: skip
    durations = {name: r["for"] for name, r in rules.items()}
    assert durations == {
        "GatehouseEnvoyNack": "0s", "GatehouseEnvoyConfigBehind": "30s", "GatehouseRoute5xxRatio": "10m",
        "GatehouseUpstream5xxRatio": "5m", "GatehouseCircuitBreakerOpen": "2m", "GatehouseRequestsNotServedUpstream": "5m",
        "GatehouseBreakerOpen": "0s",
    }  # fmt: skip
    for name, r in rules.items():
        assert {k: v for k, v in r["labels"].items() if k != "severity"} == {"team": "edge", "page": "false"}, name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name
        assert "{{ $labels." in r["annotations"]["summary"] + r["annotations"]["description"], name  # Prometheus', not Helm's
        # Every rate window is `window` (three alerts read gauges only); every series
        # selector carries `selector`.
        gauges_only = name in {"GatehouseEnvoyConfigBehind", "GatehouseCircuitBreakerOpen", "GatehouseBreakerOpen"}
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
        # publicRouteLimits false: /limited goes through Envoy's ratelimit filter, whose
        # stats the dashboard reads for gRPC and opt-out setups (over HTTP, a public route's
        # failed checks count in the ext_authz stats, as an authenticated route's do).
        "extAuthz": {"address": f"127.0.0.1:{free_port()}", "timeout": "200ms", "publicRouteLimits": False},
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
    api.wait_established("prometheusrules.monitoring.coreos.com")

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


# --- scrape configuration: ServiceMonitor / PodMonitor ------------------------------------------

SERVICE_MONITORS_ON = ["--set", "monitoring.serviceMonitor.enabled=true"]
POD_MONITORS_ON = ["--set", "monitoring.podMonitor.enabled=true"]
SIDECARS = ["--set", "extAuthz.enabled=true,rateLimit.enabled=true,telemetry.enabled=true,redis.enabled=true", *WITH_ISSUERS]
CONTROL_PLANE_MONITOR = f"{RELEASE}-gatehouse-control-plane"
GATEWAY_MONITOR = f"{RELEASE}-gatehouse-gateway"
GATEWAY_METRICS = f"{RELEASE}-gatehouse-gateway-metrics"
MONITOR_KINDS = {"ServiceMonitor", "PodMonitor"}
# A target: (pod, or the Deployment whose template it is; container; container port).
Target = tuple[str, str, int]
# What each endpoint (port name, path) scrapes, with every sidecar on and default ports.
SIDECAR_ENDPOINTS = {
    "ServiceMonitor": {
        CONTROL_PLANE_MONITOR: {("http-admin", "/metrics"): {("control-plane", 19000)}},
        GATEWAY_MONITOR: {
            ("envoy-stats", "/stats/prometheus"): {("envoy", 9902)},
            ("authz-metrics", "/metrics"): {("ext-authz", 9003)},
            ("rl-metrics", "/metrics"): {("ratelimit", 9004)},
            ("tm-metrics", "/metrics"): {("telemetry", 9005)},
        },
    },
    "PodMonitor": {
        CONTROL_PLANE_MONITOR: {("admin", "/metrics"): {("control-plane", 19000)}},
        GATEWAY_MONITOR: {
            ("health", "/stats/prometheus"): {("envoy", 9902)},
            ("authz-metrics", "/metrics"): {("ext-authz", 9003)},
            ("rl-metrics", "/metrics"): {("ratelimit", 9004)},
            ("tm-metrics", "/metrics"): {("telemetry", 9005)},
        },
    },
}


def monitors(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in MONITOR_KINDS}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector, as the API server evaluates it."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        matched = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
                   "Exists": key in labels, "DoesNotExist": key not in labels}[operator]  # fmt: skip
        if not matched:
            return False
    return True


def selector_arg(selector: dict[str, Any]) -> str:
    """The same LabelSelector as kubectl's -l, for the API server to evaluate."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    terms = [f"{key}={value}" for key, value in selector.get("matchLabels", {}).items()]
    for e in selector.get("matchExpressions", []):
        values = ",".join(e.get("values", []))
        terms.append({"In": f"{e['key']} in ({values})", "NotIn": f"{e['key']} notin ({values})",
                      "Exists": e["key"], "DoesNotExist": f"!{e['key']}"}[e["operator"]])  # fmt: skip
    assert terms, "an empty selector would pick everything"
    return ",".join(terms)


def template_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each Deployment's pod template as the pod it makes (named after the Deployment)."""
    return [
        {"metadata": {**d["spec"]["template"]["metadata"], "name": d["metadata"]["name"], "namespace": d["metadata"]["namespace"]},
         "spec": d["spec"]["template"]["spec"]}
        for d in docs if d["kind"] == "Deployment"
    ]  # fmt: skip


def container_ports(pod: dict[str, Any], port: str | int) -> set[Target]:
    """The container ports a port name (or number) means in a pod."""
    return {
        (pod["metadata"]["name"], container["name"], p["containerPort"])
        for container in pod["spec"]["containers"]
        for p in container.get("ports", [])
        if port in (p.get("name"), p["containerPort"])
    }


def in_scope(monitor: dict[str, Any], obj: dict[str, Any]) -> bool:
    spec = monitor["spec"]
    return obj["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"] and selects(spec["selector"], obj["metadata"].get("labels", {}))


def endpoints_of(monitor: dict[str, Any]) -> list[dict[str, Any]]:
    return list(monitor["spec"]["endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"])


def scrape_targets(monitor: dict[str, Any], services: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[tuple[str, str], set[Target]]:
    """What the operator would scrape for each endpoint (port name, path): a ServiceMonitor's
    selector picks Services in its namespaceSelector's namespaces, the endpoint names one of
    their ports, whose targetPort is a container port of the pods the Service selects; a
    PodMonitor's selector picks pods, the endpoint names a container port."""
    found: dict[tuple[str, str], set[Target]] = {}
    for endpoint in endpoints_of(monitor):
        targets: set[Target] = set()
        if monitor["kind"] == "ServiceMonitor":
            for service in (s for s in services if in_scope(monitor, s)):
                for port in (p for p in service["spec"]["ports"] if p.get("name") == endpoint["port"]):
                    for pod in pods:
                        same_namespace = pod["metadata"]["namespace"] == service["metadata"]["namespace"]
                        if same_namespace and selects({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"]):
                            targets |= container_ports(pod, port["targetPort"])
        else:
            for pod in (p for p in pods if in_scope(monitor, p)):
                targets |= container_ports(pod, endpoint["port"])
        found[(endpoint["port"], endpoint["path"])] = targets
    return found


def by_container(targets: dict[tuple[str, str], set[Target]]) -> dict[tuple[str, str], set[tuple[str, int]]]:
    return {endpoint: {(container, port) for _, container, port in found} for endpoint, found in targets.items()}


def test_monitors_render_only_when_switched_on_and_never_both(tools: KubeTools, helm_home: Path) -> None:
    def keys(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")) for d in docs}

    defaults = objects(template(tools, helm_home))
    assert not monitors(defaults) and not [d for d in defaults if d["metadata"]["name"] == GATEWAY_METRICS]
    service_monitors = objects(template(tools, helm_home, *SERVICE_MONITORS_ON))
    assert keys(service_monitors) - keys(defaults) == {
        ("ServiceMonitor", CONTROL_PLANE_MONITOR, NAMESPACE), ("ServiceMonitor", GATEWAY_MONITOR, NAMESPACE), ("Service", GATEWAY_METRICS, NAMESPACE),
    }  # fmt: skip
    pod_monitors = objects(template(tools, helm_home, *POD_MONITORS_ON))
    assert keys(pod_monitors) - keys(defaults) == {("PodMonitor", CONTROL_PLANE_MONITOR, NAMESPACE), ("PodMonitor", GATEWAY_MONITOR, NAMESPACE)}
    for docs in (service_monitors, pod_monitors):
        # Nothing else changes: the workloads and the client-facing Services render the same.
        assert unchanged([d for d in docs if d["kind"] not in MONITOR_KINDS and d["metadata"]["name"] != GATEWAY_METRICS]) == unchanged(defaults)
        assert all(m["apiVersion"] == "monitoring.coreos.com/v1" for m in monitors(docs).values())

    both = run_helm(tools, helm_home, "template", RELEASE, str(CHART), *SERVICE_MONITORS_ON, *POD_MONITORS_ON, check=False)
    assert both.returncode != 0 and "every series would be collected twice" in both.stderr, both.stderr


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
@pytest.mark.parametrize("sidecars", [False, True], ids=["envoy-only", "every-sidecar"])
def test_monitors_resolve_to_exactly_the_metrics_ports(tools: KubeTools, helm_home: Path, kind: str, sidecars: bool) -> None:
    switch = SERVICE_MONITORS_ON if kind == "ServiceMonitor" else POD_MONITORS_ON
    docs = objects(template(tools, helm_home, *switch, *(SIDECARS if sidecars else [])))
    found = monitors(docs)
    assert set(found) == {(kind, CONTROL_PLANE_MONITOR), (kind, GATEWAY_MONITOR)}
    services = [d for d in docs if d["kind"] == "Service"]
    pods = template_pods(docs)
    expected = SIDECAR_ENDPOINTS[kind]
    for name in (CONTROL_PLANE_MONITOR, GATEWAY_MONITOR):
        monitor = found[(kind, name)]
        want = expected[name] if sidecars or name == CONTROL_PLANE_MONITOR else dict(list(expected[name].items())[:1])
        targets = scrape_targets(monitor, services, pods)
        assert by_container(targets) == want, (name, targets)
        # Each endpoint reaches one Deployment's pods: the control plane's or the gateway's.
        owners = {owner for found_targets in targets.values() for owner, _, _ in found_targets}
        assert owners == {f"{RELEASE}-gatehouse-{'control-plane' if name == CONTROL_PLANE_MONITOR else 'gateway'}"}, owners
        spec = monitor["spec"]
        assert spec["jobLabel"] == "app.kubernetes.io/name" and spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert all(e["scheme"] == "http" and e["interval"] == "30s" and "scrapeTimeout" not in e for e in endpoints_of(monitor))
    if kind == "ServiceMonitor":
        # The monitors pick only their own Service; the client-facing gateway Service (a
        # LoadBalancer, maybe) exposes no metrics port.
        picked = {m["metadata"]["name"]: {s["metadata"]["name"] for s in services if in_scope(m, s)} for m in found.values()}
        assert picked == {CONTROL_PLANE_MONITOR: {CONTROL_PLANE_MONITOR}, GATEWAY_MONITOR: {GATEWAY_METRICS}}, picked
        assert [p["name"] for p in find(docs, "Service", f"{RELEASE}-gatehouse-gateway")["spec"]["ports"]] == ["http"]
        metrics_service = find(docs, "Service", GATEWAY_METRICS)
        assert metrics_service["spec"]["clusterIP"] == "None"
        # The job label the operator takes from each Service: job="gatehouse" for every series.
        assert {s["metadata"]["labels"]["app.kubernetes.io/name"] for s in services if any(in_scope(m, s) for m in found.values())} == {"gatehouse"}
    else:
        pod_labels = {p["metadata"]["name"]: p["metadata"]["labels"]["app.kubernetes.io/name"] for p in pods}
        assert set(pod_labels.values()) == {"gatehouse"}


def test_monitor_knobs_come_from_values(tools: KubeTools, helm_home: Path) -> None:
    relabelings = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}]
    metric_relabelings = [{"sourceLabels": ["__name__"], "regex": "envoy_vhost_route_upstream_rq_time_bucket", "action": "drop"}]
    for kind, key in (("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")):
        values = [
            "--set", f"monitoring.{key}.enabled=true,monitoring.{key}.namespace=monitoring",
            "--set", f"monitoring.{key}.interval=15s,monitoring.{key}.scrapeTimeout=10s",
            "--set-json", f'monitoring.{key}.labels={{"release":"prometheus"}}',
            "--set-json", f'monitoring.{key}.annotations={{"owner":"edge-team"}}',
            "--set-json", f"monitoring.{key}.relabelings={json.dumps(relabelings)}",
            "--set-json", f"monitoring.{key}.metricRelabelings={json.dumps(metric_relabelings)}",
            "--set", "rateLimit.enabled=true,redis.enabled=true",
        ]  # fmt: skip
        found = monitors(objects(template(tools, helm_home, *values)))
        assert len(found) == 2
        for monitor in found.values():
            metadata = monitor["metadata"]
            assert monitor["kind"] == kind and metadata["namespace"] == "monitoring"
            assert metadata["labels"]["release"] == "prometheus" and metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
            assert metadata["annotations"] == {"owner": "edge-team"}
            # The monitor lives in `monitoring`, the targets stay in the release namespace.
            assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
            for endpoint in endpoints_of(monitor):
                assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s"), endpoint
                assert endpoint["relabelings"] == relabelings and endpoint["metricRelabelings"] == metric_relabelings
        assert len(endpoints_of(found[(kind, GATEWAY_MONITOR)])) == 2  # Envoy and the ratelimit sidecar

        # "" leaves interval and timeout to Prometheus.
        unset = monitors(objects(template(tools, helm_home, "--set", f"monitoring.{key}.enabled=true,monitoring.{key}.interval=")))
        for monitor in unset.values():
            assert all(set(e) == {"port", "path", "scheme"} for e in endpoints_of(monitor)), monitor
            assert monitor["metadata"]["namespace"] == NAMESPACE and "annotations" not in monitor["metadata"]


def test_gateway_metrics_service_name_fits_a_dns_label(tools: KubeTools, helm_home: Path) -> None:
    long_name = "a" * 60
    docs = objects(template(tools, helm_home, *SERVICE_MONITORS_ON, "--set", f"fullnameOverride={long_name}"))
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["labels"]["app.kubernetes.io/component"] == "gateway-metrics")
    name = service["metadata"]["name"]
    assert len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and name.endswith("-gateway-metrics"), name


def test_helm_lint_is_clean_with_monitors(tools: KubeTools, helm_home: Path) -> None:
    for switch in (SERVICE_MONITORS_ON, POD_MONITORS_ON):
        result = run_helm(tools, helm_home, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *switch, *SIDECARS, *RULES_ON)
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "monitoring.serviceMonitor.enabeld=true"], "enabeld"),
        (["--set", "monitoring.podMonitor.enabled=yes"], "enabled"),
        (["--set", "monitoring.serviceMonitor.interval=30"], "interval"),
        (["--set", "monitoring.podMonitor.interval=0s"], "interval"),
        (["--set", "monitoring.serviceMonitor.scrapeTimeout=soon"], "scrapeTimeout"),
        (["--set", "monitoring.podMonitor.namespace=Monitoring"], "namespace"),
        (["--set", "monitoring.serviceMonitor.labels.release=1"], "release"),
        (["--set-json", 'monitoring.serviceMonitor.relabelings=[{"source_labels":["__name__"]}]'], "source_labels"),  # Prometheus' spelling, not the operator's
        (["--set-json", 'monitoring.podMonitor.metricRelabelings=[{"sourceLabels":["__name__"],"action":"delete"}]'], "action"),
        (["--set-json", 'monitoring.podMonitor.metricRelabelings={"action":"drop"}'], "metricRelabelings"),
        (["--set", "monitoring.serviceMonitor.port=metrics"], "port"),
    ],
)
def test_schema_refuses_unknown_and_mistyped_monitor_values(tools: KubeTools, helm_home: Path, values: list[str], message: str) -> None:
    result = run_helm(tools, helm_home, "template", RELEASE, str(CHART), *values, check=False)
    assert result.returncode != 0, f"helm template {values} was accepted"
    assert "schema" in result.stderr and message in result.stderr, result.stderr


SCRAPE_RELEASE = "scrape"
SCRAPE_NAMESPACE = "gatehouse-scrape"


def kube_items(api: KubeAPIServer, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(api.kubectl("get", *args, "-o", "json").stdout)["items"])


def kube_names(api: KubeAPIServer, *args: str) -> set[str]:
    return {item["metadata"]["name"] for item in kube_items(api, *args)}


def test_api_server_stores_the_monitors_and_they_select_the_charts_services_and_pods(api: KubeAPIServer, tmp_path: Path) -> None:
    for crd in (SERVICE_MONITOR_CRD, POD_MONITOR_CRD):
        api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(crd))
        api.wait_established(crd["metadata"]["name"])
    prefix = f"{SCRAPE_RELEASE}-gatehouse"
    monitored = ["-l", f"app.kubernetes.io/instance={SCRAPE_RELEASE}", "-n", "monitoring"]
    install = api.helm(
        "install", SCRAPE_RELEASE, str(CHART), "--namespace", SCRAPE_NAMESPACE, "--create-namespace", *SIDECARS,
        "--set", "monitoring.serviceMonitor.enabled=true,monitoring.serviceMonitor.namespace=monitoring",
        "--set-json", 'monitoring.serviceMonitor.labels={"release":"prometheus"}',
        # NetworkPolicies are on by default: Prometheus's namespace is let in, as a user would.
        "--set-json", 'networkPolicy.controlPlane.adminFrom=[{"namespaceSelector":{"matchLabels":'
                      '{"kubernetes.io/metadata.name":"monitoring"}}}]',
    )  # fmt: skip
    assert "Prometheus Operator ServiceMonitors are installed in namespace monitoring" in install.stdout, install.stdout
    assert "adminFrom is empty" not in install.stdout, install.stdout
    # No controllers run here: the pods the Deployments would make, from their stored templates.
    deployments = kube_items(api, "deployments", "-n", SCRAPE_NAMESPACE)
    assert {d["metadata"]["name"] for d in deployments} == {f"{prefix}-control-plane", f"{prefix}-gateway", f"{prefix}-redis"}
    pods = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{d['metadata']['name']}-0", "namespace": SCRAPE_NAMESPACE, "labels": d["spec"]["template"]["metadata"]["labels"]},
         "spec": d["spec"]["template"]["spec"]}
        for d in deployments
    ]  # fmt: skip
    api.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pods))
    stored_pods = kube_items(api, "pods", "-n", SCRAPE_NAMESPACE)
    assert len(stored_pods) == 3

    def check_targets(kind: str) -> None:
        stored = {m["metadata"]["name"]: m for m in kube_items(api, kind.lower() + "s", *monitored)}
        assert set(stored) == {f"{prefix}-control-plane", f"{prefix}-gateway"}, set(stored)
        services = kube_items(api, "services", "-n", SCRAPE_NAMESPACE)
        for name, monitor in stored.items():
            assert monitor["metadata"]["labels"]["release"] == "prometheus"
            (namespace,) = monitor["spec"]["namespaceSelector"]["matchNames"]
            assert namespace == SCRAPE_NAMESPACE
            # The API server's own selection, at each step the operator takes.
            selector = selector_arg(monitor["spec"]["selector"])
            component = "control-plane" if name.endswith("control-plane") else "gateway"
            if kind == "ServiceMonitor":
                picked = kube_names(api, "services", "-n", namespace, "-l", selector)
                assert picked == {f"{prefix}-control-plane" if component == "control-plane" else f"{prefix}-gateway-metrics"}, (name, picked)
                for service in (s for s in services if s["metadata"]["name"] in picked):
                    behind = kube_names(api, "pods", "-n", namespace, "-l", selector_arg({"matchLabels": service["spec"]["selector"]}))
                    assert behind == {f"{prefix}-{component}-0"}, (service["metadata"]["name"], behind)
                    port_names = {p["name"] for p in service["spec"]["ports"]}
                    assert {e["port"] for e in endpoints_of(monitor)} <= port_names, (name, port_names)
            else:
                picked = kube_names(api, "pods", "-n", namespace, "-l", selector)
                assert picked == {f"{prefix}-{component}-0"}, (name, picked)
            # Every endpoint ends at the container port serving its path.
            targets = by_container(scrape_targets(monitor, services, stored_pods))
            want = SIDECAR_ENDPOINTS[kind][CONTROL_PLANE_MONITOR if component == "control-plane" else GATEWAY_MONITOR]
            assert targets == want, (name, targets)

    check_targets("ServiceMonitor")
    assert kube_names(api, "podmonitors", *monitored) == set()

    # Switched to PodMonitors: the ServiceMonitors and their Service go, the PodMonitors select.
    # With NetworkPolicies and no adminFrom, the notes say the control plane refuses Prometheus.
    upgrade = api.helm(
        "upgrade", SCRAPE_RELEASE, str(CHART), "--namespace", SCRAPE_NAMESPACE, "--reuse-values",
        "--set", "monitoring.serviceMonitor.enabled=false,monitoring.podMonitor.enabled=true,monitoring.podMonitor.namespace=monitoring",
        "--set-json", 'monitoring.podMonitor.labels={"release":"prometheus"}', "--set", "networkPolicy.enabled=true",
        "--set-json", "networkPolicy.controlPlane.adminFrom=[]",
    )  # fmt: skip
    assert "Prometheus Operator PodMonitors are installed in namespace monitoring" in upgrade.stdout, upgrade.stdout
    assert "networkPolicy.controlPlane.adminFrom is empty" in upgrade.stdout, upgrade.stdout
    assert kube_names(api, "servicemonitors", *monitored) == set()
    assert f"{prefix}-gateway-metrics" not in kube_names(api, "services", "-n", SCRAPE_NAMESPACE)
    check_targets("PodMonitor")

    # The CRDs' schemas are live: a port number where the name belongs, an endpoint without
    # a port, Prometheus' snake_case relabeling key.
    (gateway,) = [m for m in kube_items(api, "podmonitors", *monitored) if m["metadata"]["name"] == f"{prefix}-gateway"]
    base = {"apiVersion": gateway["apiVersion"], "kind": "PodMonitor", "metadata": {"name": "broken", "namespace": "monitoring"}, "spec": gateway["spec"]}
    broken: list[tuple[str, dict[str, Any], str]] = []
    numbered = json.loads(json.dumps(base))
    numbered["spec"]["podMetricsEndpoints"][0]["port"] = 9902
    broken.append(("numbered", numbered, "port"))
    portless = json.loads(json.dumps(base))
    del portless["spec"]["podMetricsEndpoints"][0]["port"]
    broken.append(("portless", portless, "port"))
    snake = json.loads(json.dumps(base))
    snake["spec"]["podMetricsEndpoints"][0]["relabelings"] = [{"source_labels": ["__name__"], "action": "drop"}]
    broken.append(("snake", snake, "source_labels"))
    for case, doc, field in broken:
        refused = api.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(doc), check=False)
        assert refused.returncode != 0 and field in refused.stderr, (case, refused.stderr)
    assert api.kubectl("get", "podmonitor", "broken", "-n", "monitoring", "--ignore-not-found", "-o", "name").stdout == ""
    api.helm("uninstall", SCRAPE_RELEASE, "--namespace", SCRAPE_NAMESPACE)
    assert kube_names(api, "podmonitors", *monitored) == set()


# --- promtool: the rules as Prometheus loads and evaluates them -------------------------------------

ALERTS_TEST = REPO_ROOT / "tests" / "e2e" / "monitoring" / "alerts_test.yaml"
RULES_FILE = "gatehouse-alerts.rules.yaml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_binary("promtool", "Debian's prometheus package provides it: apt-get install -y --no-install-recommends prometheus (only /usr/bin/promtool is used)")


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=cwd, stdin=subprocess.DEVNULL)


def write_rule_groups(rule: dict[str, Any], directory: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the operator writes)."""
    path = directory / RULES_FILE
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


CHECKED_VARIANTS = {
    "defaults": [],
    "custom": [
        "--set", "monitoring.prometheusRule.window=10m,monitoring.prometheusRule.interval=30s",
        "--set-string", 'monitoring.prometheusRule.selector=job="gatehouse"\\,namespace=~"gatehouse-.*"',
        "--set-json", 'monitoring.prometheusRule.ruleLabels={"team":"edge"}',
        "--set", "monitoring.prometheusRule.alerts.envoyConfigBehind.seconds=90,monitoring.prometheusRule.alerts.route5xxRatio.for=10m",
    ],
    "some-alerts-off": ["--set", "monitoring.prometheusRule.alerts.envoyNack.enabled=false,monitoring.prometheusRule.alerts.circuitBreakerOpen.enabled=false"],
}  # fmt: skip


@pytest.mark.parametrize("variant", CHECKED_VARIANTS)
def test_promtool_check_rules_accepts_the_rendered_rule_groups(tools: KubeTools, helm_home: Path, promtool: str, tmp_path: Path, variant: str) -> None:
    (rule,) = rule_docs(*RULES_ON, *CHECKED_VARIANTS[variant], tools=tools, home=helm_home)
    path = write_rule_groups(rule, tmp_path)
    count = len(rules_of(rule))
    result = run_promtool(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {count} rules found" in result.stdout, result.stdout
    assert count == (5 if variant == "some-alerts-off" else 7)


def test_promtool_check_rules_refuses_a_broken_rule(tools: KubeTools, helm_home: Path, promtool: str, tmp_path: Path) -> None:
    """The check above can fail: a PromQL syntax error, an unclosed annotation template."""
    (rule,) = rule_docs(*RULES_ON, tools=tools, home=helm_home)
    rule["spec"]["groups"][0]["rules"][1]["expr"] = "max by (namespace (gatehouse_xds_oldest_unacked_push_seconds) > 60"
    rule["spec"]["groups"][0]["rules"][0]["annotations"]["summary"] = "{{ $labels.type "
    result = run_promtool(promtool, "check", "rules", str(write_rule_groups(rule, tmp_path)), cwd=tmp_path)
    assert result.returncode != 0, result.stdout
    output = result.stdout + result.stderr
    assert re.search(r'"GatehouseEnvoyNack": annotation "summary": .*unclosed action', output), output
    assert re.search(r'"GatehouseEnvoyConfigBehind": could not parse expression: .*parse error', output), output


def promtool_test(promtool: str, rule: dict[str, Any], directory: Path, tests: Path | None = None, text: str | None = None) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on a test file next to the rendered rules."""
    write_rule_groups(rule, directory)
    target = directory / "alerts_test.yaml"
    if tests is not None:
        shutil.copyfile(tests, target)
    else:
        assert text is not None
        target.write_text(text)
    return run_promtool(promtool, "test", "rules", target.name, cwd=directory)


def test_promtool_test_rules_nack_and_config_behind_fire_and_clear(tools: KubeTools, helm_home: Path, promtool: str, tmp_path: Path) -> None:
    (rule,) = rule_docs(*RULES_ON, tools=tools, home=helm_home)
    result = promtool_test(promtool, rule, tmp_path, tests=ALERTS_TEST)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    checked = [t for case in cases for t in case["alert_rule_test"]]
    for alert in ("GatehouseEnvoyNack", "GatehouseEnvoyConfigBehind", "GatehouseBreakerOpen"):
        outcomes = [bool(t["exp_alerts"]) for t in checked if t["alertname"] == alert]
        assert True in outcomes and False in outcomes, alert  # both firing and quiet


@pytest.mark.parametrize(
    ("mutation", "failing_case"),
    [
        # The rule as it was: increase() alone misses the NACK that creates a counter.
        ("naive-nack", "the first NACK of a process fires for one window"),
        ("late-behind", "an Envoy out of date for more than 60s fires until it catches up"),
        # OPEN only: each HALF_OPEN probe scrape would resolve the alert.
        ("breaker-open-only", "an opened route breaker fires at once and through its probes until it closes"),
    ],
)
def test_promtool_test_rules_catch_a_wrong_rule(tools: KubeTools, helm_home: Path, promtool: str, tmp_path: Path, mutation: str, failing_case: str) -> None:
    values = ["--set", "monitoring.prometheusRule.alerts.envoyConfigBehind.seconds=120"] if mutation == "late-behind" else []
    (rule,) = rule_docs(*RULES_ON, *values, tools=tools, home=helm_home)
    if mutation == "naive-nack":
        nack = rules_of(rule)["GatehouseEnvoyNack"]
        nack["expr"] = "sum by (namespace, type) (increase(gatehouse_xds_nacks_total[5m])) > 0"
    if mutation == "breaker-open-only":
        rules_of(rule)["GatehouseBreakerOpen"]["expr"] = 'max by (namespace, route) (gatehouse_breaker_state{phase="open"}) > 0'
    result = promtool_test(promtool, rule, tmp_path, tests=ALERTS_TEST)
    assert result.returncode != 0, result.stdout
    assert f"name: {failing_case}" in result.stdout + result.stderr, result.stdout + result.stderr


def test_promtool_test_rules_with_a_selector_and_a_threshold_from_values(tools: KubeTools, helm_home: Path, promtool: str, tmp_path: Path) -> None:
    """Non-default values, cases generated here: with selector job="gatehouse" (what the
    chart's monitors set) another job's NACKs and lag are not Gatehouse's; seconds=90."""
    values = [
        "--set-string", 'monitoring.prometheusRule.selector=job="gatehouse"',
        "--set", "monitoring.prometheusRule.alerts.envoyConfigBehind.seconds=90,monitoring.prometheusRule.alerts.envoyNack.severity=critical",
        "--set-json", 'monitoring.prometheusRule.ruleLabels={"team":"edge"}',
    ]  # fmt: skip
    (rule,) = rule_docs(*RULES_ON, *values, tools=tools, home=helm_home)
    ours = 'job="gatehouse",namespace="gatehouse-system",pod="cp-a"'
    theirs = 'job="other-xds",namespace="gatehouse-system",pod="x-1"'

    def nack(type_: str) -> list[dict[str, Any]]:
        description = (
            f"Envoys NACKed about 1 {type_} push(es) in namespace gatehouse-system in the last 5m. They keep serving their previous"
            " configuration. Run gatehouse status (or GET /status on the control plane's admin port) for the node, Envoy's error and"
            " the routes suspected (docs/monitoring.md)."
        )
        labels = {"severity": "critical", "team": "edge", "namespace": "gatehouse-system", "type": type_}
        return [{"exp_labels": labels, "exp_annotations": {"summary": f"Envoy refused a {type_} configuration from the control plane", "description": description}}]

    def behind(type_: str, age: str) -> list[dict[str, Any]]:
        description = (
            f"A connected Envoy in namespace gatehouse-system has not ACKed a {type_} push for {age}: it refused it or is stuck, and"
            " serves an older configuration than the control plane's. gatehouse status --node <node> --diff shows what it lacks"
            " (docs/monitoring.md)."
        )
        labels = {"severity": "warning", "team": "edge", "namespace": "gatehouse-system", "type": type_}
        return [{"exp_labels": labels, "exp_annotations": {"summary": f"An Envoy has been out of date for {age} ({type_})", "description": description}}]

    tests = {
        "rule_files": [RULES_FILE],
        "evaluation_interval": "30s",
        "tests": [{
            "name": "selector and threshold from values",
            "interval": "30s",
            "input_series": [
                {"series": f"gatehouse_xds_nacks_total{{{ours},type=\"RDS\"}}", "values": "_x4 1x20"},
                {"series": f"gatehouse_xds_nacks_total{{{theirs},type=\"CDS\"}}", "values": "_x4 1x20"},
                {"series": f"gatehouse_xds_oldest_unacked_push_seconds{{{ours},type=\"LDS\"}}", "values": "0 30+30x10"},  # 90 at 1m30s, 120 at 2m
                {"series": f"gatehouse_xds_oldest_unacked_push_seconds{{{theirs},type=\"CDS\"}}", "values": "600x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "1m30s", "alertname": "GatehouseEnvoyConfigBehind", "exp_alerts": []},  # 90 is not over 90
                {"eval_time": "2m", "alertname": "GatehouseEnvoyConfigBehind", "exp_alerts": behind("LDS", "2m 0s")},
                {"eval_time": "2m", "alertname": "GatehouseEnvoyNack", "exp_alerts": nack("RDS")},
                {"eval_time": "8m", "alertname": "GatehouseEnvoyNack", "exp_alerts": []},
            ],
        }],
    }  # fmt: skip
    result = promtool_test(promtool, rule, tmp_path, text=yaml.safe_dump(tests, sort_keys=False))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
