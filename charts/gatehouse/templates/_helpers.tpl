{{/*
Names and labels shared by every template.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "gatehouse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The resource-name prefix: fullnameOverride, else "<release>-<chart name>", or just the
release name when it already contains the chart name. Truncated to leave room for the
longest component suffix ("-control-plane", 14 characters) within 63.
*/}}
{{- define "gatehouse.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 49 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 49 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 49 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "gatehouse-0.1.0", for the helm.sh/chart label. */}}
{{- define "gatehouse.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gatehouse.labels" -}}
helm.sh/chart: {{ include "gatehouse.chart" . }}
app.kubernetes.io/name: {{ include "gatehouse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gatehouse
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of the whole release (no component). */}}
{{- define "gatehouse.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gatehouse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Per component: call with (dict "ctx" $ "component" "gateway"). */}}
{{- define "gatehouse.componentName" -}}
{{- printf "%s-%s" (include "gatehouse.fullname" .ctx) .component }}
{{- end }}

{{- define "gatehouse.componentLabels" -}}
{{ include "gatehouse.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gatehouse.componentSelectorLabels" -}}
{{ include "gatehouse.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image reference; the tag defaults to appVersion. */}}
{{- define "gatehouse.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The control plane's ServiceAccount name. */}}
{{- define "gatehouse.controlPlane.serviceAccountName" -}}
{{- if .Values.controlPlane.serviceAccount.create }}
{{- default (include "gatehouse.componentName" (dict "ctx" . "component" "control-plane")) .Values.controlPlane.serviceAccount.name }}
{{- else }}
{{- required "controlPlane.serviceAccount.name is required when controlPlane.serviceAccount.create is false" .Values.controlPlane.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Cluster-scoped names carry the namespace: two releases of the same name may coexist. */}}
{{- define "gatehouse.clusterRoleName" -}}
{{- printf "%s-%s-control-plane" .Release.Namespace (include "gatehouse.fullname" .) }}
{{- end }}

{{/* The control-plane Service's in-cluster DNS name (what Envoy dials for xDS). */}}
{{- define "gatehouse.controlPlane.host" -}}
{{- printf "%s.%s.svc.%s" (include "gatehouse.componentName" (dict "ctx" . "component" "control-plane")) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The Redis URL handed to the sidecars: redis.url, else the in-chart Redis, else "". */}}
{{- define "gatehouse.redisUrl" -}}
{{- if .Values.redis.url }}
{{- .Values.redis.url }}
{{- else if .Values.redis.enabled }}
{{- printf "redis://%s.%s.svc.%s:6379/0" (include "gatehouse.componentName" (dict "ctx" . "component" "redis")) .Release.Namespace .Values.clusterDomain }}
{{- end }}
{{- end }}

{{/* Restricted-profile container security context, shared by every container. */}}
{{- define "gatehouse.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Pod security context: the image's user (uid 10001, from the Dockerfile), never root. */}}
{{- define "gatehouse.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
A soft anti-affinity spreading a component's pods over nodes, used when the component's
affinity value is empty. Call with (dict "ctx" $ "component" "gateway").
*/}}
{{- define "gatehouse.defaultAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gatehouse.componentSelectorLabels" . | nindent 12 }}
{{- end }}

{{/* --- gateway --------------------------------------------------------------------- */}}

{{/*
Where the envoy container mounts the gateway.tls.secretName Secret (tls.crt, tls.key): the
control plane's gateway.tls names the files there, and Envoy watches this directory.
*/}}
{{- define "gatehouse.gateway.tlsDir" -}}/etc/gatehouse/tls{{- end }}

{{/* --- ext_authz ------------------------------------------------------------------- */}}

{{/* Where the sidecar's config file and admin credential are mounted. */}}
{{- define "gatehouse.extAuthz.configDir" -}}/etc/gatehouse{{- end }}
{{- define "gatehouse.extAuthz.credentialDir" -}}/etc/gatehouse-admin{{- end }}
{{- define "gatehouse.extAuthz.waitingRoomDir" -}}/etc/gatehouse-waiting-room{{- end }}

{{/* "true" when the sidecar serves routes' waiting rooms: the HTTP check with its rate
limits' Redis (docs/waiting-room.md); "" otherwise. */}}
{{/* How long Envoy holds a partly filled access-log buffer: telemetry.envoyFlushInterval, else
200ms when the breakers are wired (detection waits for it) and 1s otherwise. */}}
{{- define "gatehouse.telemetry.flushInterval" -}}
{{- .Values.telemetry.envoyFlushInterval | default (ternary "200ms" "1s" .Values.breakers.enabled) }}
{{- end }}

{{- define "gatehouse.extAuthz.waitingRooms" -}}
{{- if and .Values.extAuthz.enabled (eq .Values.extAuthz.protocol "http") .Values.rateLimit.enabled (include "gatehouse.redisUrl" .) -}}true{{- end -}}
{{- end }}

{{/* The Secret holding the waiting-room ticket key: extAuthz.waitingRoom.existingSecret, or the chart's. */}}
{{- define "gatehouse.extAuthz.waitingRoomSecretName" -}}
{{- default (include "gatehouse.componentName" (dict "ctx" . "component" "ext-authz-waiting-room")) .Values.extAuthz.waitingRoom.existingSecret }}
{{- end }}

{{/* The Secret holding the admin credential: extAuthz.admin.existingSecret, or the chart's. */}}
{{- define "gatehouse.extAuthz.adminSecretName" -}}
{{- default (include "gatehouse.componentName" (dict "ctx" . "component" "ext-authz-admin")) .Values.extAuthz.admin.existingSecret }}
{{- end }}

{{/*
The admin API's bind address: 127.0.0.1 (only `kubectl port-forward` reaches it) unless
extAuthz.admin.from names peers, then the pod IP (and the NetworkPolicy admits only them).
*/}}
{{- define "gatehouse.extAuthz.adminHost" -}}
{{- ternary "0.0.0.0" "127.0.0.1" (not (empty .Values.extAuthz.admin.from)) }}
{{- end }}

{{/*
Refuse values the sidecar could not run with, with a message naming the fix. Included by
every template that renders ext_authz parts, so `helm template -s` of any of them fails too.
*/}}
{{- define "gatehouse.extAuthz.validate" -}}
{{- $az := .Values.extAuthz }}
{{- if $az.enabled }}
{{- if not $az.issuers }}
{{- fail "extAuthz.enabled=true needs at least one trusted issuer in extAuthz.issuers, e.g. --set-json 'extAuthz.issuers=[{\"issuer\":\"https://auth.example.com/\",\"jwksUrl\":\"https://auth.example.com/.well-known/jwks.json\",\"audiences\":[\"api\"]}]' (docs/kubernetes.md)" }}
{{- end }}
{{- $seen := dict }}
{{- range $az.issuers }}
{{- if hasKey $seen .issuer }}
{{- fail (printf "extAuthz.issuers: issuer %q is listed twice; each iss may appear once" .issuer) }}
{{- end }}
{{- $_ := set $seen .issuer true }}
{{- end }}
{{- if and $az.revocation.enabled (not (include "gatehouse.redisUrl" .)) }}
{{- fail "extAuthz.revocation.enabled=true needs a Redis: set redis.url (production) or redis.enabled=true (trying out), or set extAuthz.revocation.enabled=false to run without revocation" }}
{{- end }}
{{- if and $az.admin.enabled (not $az.revocation.enabled) }}
{{- fail "extAuthz.admin.enabled=true needs extAuthz.revocation.enabled=true: the admin API manages revocations" }}
{{- end }}
{{- end }}
{{- end }}

{{/* --- ratelimit ------------------------------------------------------------------- */}}

{{/* Where the sidecar's config file is mounted. */}}
{{- define "gatehouse.rateLimit.configDir" -}}/etc/gatehouse{{- end }}

{{/*
How many sidecars share the limits (the config's expectedInstances): rateLimit.expectedInstances,
else gateway.autoscaling.maxReplicas with autoscaling (the local fallback then never admits
more than a limit in total), else gateway.replicas (at least 1).
*/}}
{{- define "gatehouse.rateLimit.expectedInstances" -}}
{{- $gw := .Values.gateway }}
{{- if .Values.rateLimit.expectedInstances }}
{{- int .Values.rateLimit.expectedInstances }}
{{- else if $gw.autoscaling.enabled }}
{{- int $gw.autoscaling.maxReplicas }}
{{- else }}
{{- max 1 (int $gw.replicas) }}
{{- end }}
{{- end }}

{{/*
Refuse values the sidecar could not run with, with a message naming the fix. Included by
every template that renders ratelimit parts, so `helm template -s` of any of them fails too.
*/}}
{{- define "gatehouse.rateLimit.validate" -}}
{{- if and .Values.rateLimit.enabled (not (include "gatehouse.redisUrl" .)) }}
{{- fail "rateLimit.enabled=true needs a Redis for the rate-limit counters: set redis.url (production) or redis.enabled=true (trying out)" }}
{{- end }}
{{- end }}

{{/* --- the control plane's admin port ------------------------------------------------ */}}

{{/* Where its credentials are mounted: admin.operatorCredentialFile and admin.readCredentialFile. */}}
{{- define "gatehouse.controlPlane.adminCredentialDir" -}}/etc/gatehouse/admin{{- end }}

{{/* The Secret holding operator-credential and read-credential: controlPlane.admin.existingSecret, or the chart's. */}}
{{- define "gatehouse.controlPlane.adminSecretName" -}}
{{- default (include "gatehouse.componentName" (dict "ctx" . "component" "control-plane-admin")) .Values.controlPlane.admin.existingSecret }}
{{- end }}

{{/* Where controlPlane.admin.webhookSecret is mounted: admin.webhookSecretFile names a file here. */}}
{{- define "gatehouse.controlPlane.webhookSecretDir" -}}/etc/gatehouse/webhook{{- end }}

{{/* --- route circuit breakers ------------------------------------------------------ */}}

{{/* Where the breakers' credentials are mounted: the control plane's breakers.*CredentialFile
and telemetry's breakerTallies.credentialFile name files here. */}}
{{- define "gatehouse.breakers.credentialDir" -}}/etc/gatehouse/breakers{{- end }}

{{/* The Secret holding tally-credential and operator-credential: breakers.existingSecret, or the chart's. */}}
{{- define "gatehouse.breakers.secretName" -}}
{{- default (include "gatehouse.componentName" (dict "ctx" . "component" "breakers")) .Values.breakers.existingSecret }}
{{- end }}

{{/* The route ACKs' ConfigMap (every replica's Envoys, for the Route status), which the control plane creates and patches itself (never rendered). */}}
{{- define "gatehouse.routeAcks.configMapName" -}}
{{- include "gatehouse.componentName" (dict "ctx" . "component" "route-acks") }}
{{- end }}

{{/* The breaker board's ConfigMap, which the control plane creates and patches itself (never rendered). */}}
{{- define "gatehouse.breakers.boardName" -}}
{{- include "gatehouse.componentName" (dict "ctx" . "component" "breakers") }}
{{- end }}

{{/*
The headless Service with one address per ready control-plane replica, to which telemetry
posts its tallies. Not componentName: "-control-plane-replicas" is 23 characters, 9 more than
the longest suffix gatehouse.fullname leaves room for.
*/}}
{{- define "gatehouse.controlPlane.replicasServiceName" -}}
{{- printf "%s-control-plane-replicas" (include "gatehouse.fullname" . | trunc 40 | trimSuffix "-") }}
{{- end }}

{{/* --- telemetry, Kafka and audit ------------------------------------------------------ */}}

{{/* Where the telemetry sidecar's config file is mounted. */}}
{{- define "gatehouse.telemetry.configDir" -}}/etc/gatehouse{{- end }}

{{/* Where a process's audit spool (an emptyDir) is mounted: its `audit.spoolDir`. */}}
{{- define "gatehouse.audit.spoolDir" -}}/var/lib/gatehouse/audit-spool{{- end }}

{{/* The emptyDir sizeLimit of an audit spool: twice audit.spool.maxBytes, in bytes. */}}
{{- define "gatehouse.audit.spoolSizeLimit" -}}
{{- mul (int64 .Values.audit.spool.maxBytes) 2 }}
{{- end }}

{{/*
kafka.bootstrapServers ("a:9092, b:9092") as a list for the configs' bootstrapServers;
returned as JSON ({"servers": [...]}) because include yields a string. Empty: no Kafka.
*/}}
{{- define "gatehouse.kafka.servers" -}}
{{- $servers := list }}
{{- range (splitList "," .Values.kafka.bootstrapServers) }}
{{- $server := trim . }}
{{- if $server }}{{ $servers = append $servers $server }}{{ end }}
{{- end }}
{{- dict "servers" $servers | toJson }}
{{- end }}

{{/*
The `audit:` block of a process that emits audit events (control plane, ext_authz), as
YAML, or "" without Kafka. Call with (dict "ctx" $ "component" "control-plane"): the
component names the Kafka client id.
*/}}
{{- define "gatehouse.audit.config" -}}
{{- $ctx := .ctx }}
{{- $servers := (include "gatehouse.kafka.servers" $ctx | fromJson).servers }}
{{- if $servers }}
{{- $audit := dict
      "kafka" (dict
        "bootstrapServers" $servers
        "auditTopic" $ctx.Values.kafka.auditTopic
        "clientId" (printf "gatehouse-%s" .component)
        "requestTimeout" $ctx.Values.kafka.requestTimeout)
      "spoolDir" (include "gatehouse.audit.spoolDir" $ctx)
      "spoolMaxBytes" (int64 $ctx.Values.audit.spool.maxBytes)
      "maxPending" (int $ctx.Values.audit.maxPending)
      "batchSize" (int $ctx.Values.audit.batchSize) }}
{{- toYaml $audit }}
{{- end }}
{{- end }}
