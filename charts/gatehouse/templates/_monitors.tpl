{{/*
Scrape configuration for the Prometheus Operator: the ServiceMonitors (servicemonitors.yaml)
and PodMonitors (podmonitors.yaml) share these. What each component serves:

  component      | pod port (container)      | Service port (*)  | path
  control plane  | admin (control-plane)     | http-admin        | /metrics
  gateway Envoy  | health (envoy)            | envoy-stats       | /stats/prometheus
  ext_authz      | authz-metrics (ext-authz) | authz-metrics     | /metrics
  ratelimit      | rl-metrics (ratelimit)    | rl-metrics        | /metrics
  telemetry      | tm-metrics (telemetry)    | tm-metrics        | /metrics

(*) the control-plane Service, and the headless gateway metrics Service of
servicemonitors.yaml. A sidecar's endpoint is there only while the sidecar is enabled.
*/}}

{{/*
The headless Service behind the gateway's ServiceMonitor. Not componentName: "-gateway-metrics"
is 16 characters, 2 more than the longest suffix gatehouse.fullname leaves room for.
*/}}
{{- define "gatehouse.gatewayMetricsServiceName" -}}
{{- printf "%s-gateway-metrics" (include "gatehouse.fullname" . | trunc 47 | trimSuffix "-") }}
{{- end }}

{{/* Refuse both kinds at once: every series would be scraped twice. */}}
{{- define "gatehouse.monitors.validate" -}}
{{- $m := .Values.monitoring }}
{{- if and $m.serviceMonitor.enabled $m.podMonitor.enabled }}
{{- fail "monitoring.serviceMonitor.enabled and monitoring.podMonitor.enabled scrape the same ports: every series would be collected twice and every sum of the dashboard and the alerts doubled. Enable one of them." }}
{{- end }}
{{- end }}

{{/*
metadata of a monitor. Call with (dict "ctx" $ "m" <the serviceMonitor/podMonitor values>
"component" "control-plane").
*/}}
{{- define "gatehouse.monitor.metadata" -}}
name: {{ include "gatehouse.componentName" (dict "ctx" .ctx "component" .component) }}
namespace: {{ default .ctx.Release.Namespace .m.namespace }}
labels:
  {{- include "gatehouse.componentLabels" (dict "ctx" .ctx "component" "monitoring") | nindent 2 }}
  {{- with .m.labels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .m.annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
What both kinds' specs start with: the job label (app.kubernetes.io/name, so `job="gatehouse"`
whichever kind scrapes), the release namespace (the monitor may live elsewhere) and the
component's selector labels. Call with (dict "ctx" $ "component" "control-plane").
*/}}
{{- define "gatehouse.monitor.specHead" -}}
jobLabel: app.kubernetes.io/name
namespaceSelector:
  matchNames:
    - {{ .ctx.Release.Namespace }}
selector:
  matchLabels:
    {{- include "gatehouse.componentSelectorLabels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
{{- end }}

{{/*
One scrape endpoint (a ServiceMonitor's `endpoints` item, a PodMonitor's
`podMetricsEndpoints` item). Call with (dict "port" "http-admin" "path" "/metrics" "m" <values>).
*/}}
{{- define "gatehouse.monitor.endpoint" -}}
- port: {{ .port }}
  path: {{ .path }}
  scheme: http
  {{- with .m.interval }}
  interval: {{ . | quote }}
  {{- end }}
  {{- with .m.scrapeTimeout }}
  scrapeTimeout: {{ . | quote }}
  {{- end }}
  {{- with .m.relabelings }}
  relabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
The gateway pod's endpoints: Envoy's stats, then every enabled sidecar's /metrics. Call with
(dict "ctx" $ "m" <values> "envoyPort" "envoy-stats" (Service) or "health" (pod)).
*/}}
{{- define "gatehouse.monitor.gatewayEndpoints" -}}
{{- $v := .ctx.Values }}
{{- include "gatehouse.monitor.endpoint" (dict "port" .envoyPort "path" "/stats/prometheus" "m" .m) }}
{{- if $v.extAuthz.enabled }}
{{ include "gatehouse.monitor.endpoint" (dict "port" "authz-metrics" "path" "/metrics" "m" .m) }}
{{- end }}
{{- if $v.rateLimit.enabled }}
{{ include "gatehouse.monitor.endpoint" (dict "port" "rl-metrics" "path" "/metrics" "m" .m) }}
{{- end }}
{{- if $v.telemetry.enabled }}
{{ include "gatehouse.monitor.endpoint" (dict "port" "tm-metrics" "path" "/metrics" "m" .m) }}
{{- end }}
{{- end }}
