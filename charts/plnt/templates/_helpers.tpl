{{/*
Names, labels and the settings -> environment mapping of the plnt control plane.
*/}}

{{- define "plnt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plnt.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* <fullname>-<service>, a DNS-1123 label. Call with (dict "root" $ "service" "router"). */}}
{{- define "plnt.componentName" -}}
{{- $base := include "plnt.fullname" .root | trunc (int (sub 62 (len .service))) | trimSuffix "-" }}
{{- printf "%s-%s" $base .service }}
{{- end }}

{{- define "plnt.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plnt.labels" -}}
helm.sh/chart: {{ include "plnt.chart" . }}
app.kubernetes.io/name: {{ include "plnt.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: plnt
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one service's objects. Call with (dict "root" $ "service" "watcher"). */}}
{{- define "plnt.componentLabels" -}}
{{ include "plnt.labels" .root }}
app.kubernetes.io/component: {{ .service }}
{{- end }}

{{- define "plnt.selectorLabels" -}}
app.kubernetes.io/name: {{ include "plnt.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .service }}
{{- end }}

{{/* The service account of a service. Call with (dict "root" $ "service" "watcher"). */}}
{{- define "plnt.serviceAccountName" -}}
{{- $sa := (index .root.Values .service).serviceAccount }}
{{- if $sa.create }}
{{- default (include "plnt.componentName" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{- define "plnt.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* PLNT_NATS_URL: the bundled NATS chart's client Service, or externalNatsUrl. */}}
{{- define "plnt.natsUrl" -}}
{{- if .Values.nats.enabled }}
{{- if not (hasKey .Subcharts "nats") }}
{{- fail "nats.enabled is true but the NATS chart is not in charts/plnt/charts: run `helm dependency update charts/plnt` first, or set nats.enabled=false and externalNatsUrl" }}
{{- end }}
{{- $natsName := "" }}
{{- if .Values.nats.fullnameOverride }}
{{- $natsName = .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "nats" .Release.Name }}
{{- $natsName = .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $natsName = printf "%s-nats" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- printf "nats://%s.%s.svc.cluster.local:4222" $natsName .Release.Namespace }}
{{- else }}
{{- required "externalNatsUrl is required when nats.enabled is false" .Values.externalNatsUrl }}
{{- end }}
{{- end }}

{{/* PLNT_ROUTER_PUBLIC_URL: routerPublicUrl, or the router Service's in-cluster URL. */}}
{{- define "plnt.routerPublicUrl" -}}
{{- if .Values.routerPublicUrl }}
{{- .Values.routerPublicUrl | trimSuffix "/" }}
{{- else }}
{{- printf "http://%s.%s.svc.cluster.local:%d" (include "plnt.componentName" (dict "root" . "service" "router")) .Release.Namespace (int .Values.router.service.port) }}
{{- end }}
{{- end }}

{{/*
The values keys of each service that are settings of that service (pydantic-settings class
<Service>Settings, env prefix PLNT_<SERVICE>_). Key k becomes PLNT_<SERVICE>_<SNAKE_CASE(k)>.
tests/charts/test_charts_plnt.py checks every one against the settings classes.
*/}}
{{- define "plnt.settingKeys" -}}
{{- $keys := dict
  "watcher" (list "source" "concurrency" "statusLingerS" "deadlinePullingS" "deadlineInstallingS" "deadlineSmokingS" "deadlinePromotingS" "deadlineProgressingS" "deadlineCheckIntervalS" "replaceLostAfterS"
                  "kubeconfig" "kubeContext" "kubeNamespace" "kubeWatchTimeoutS" "kubeRequestTimeoutS" "kubeListPageSize" "kubeEvents"
                  "leaderElection" "leaseName" "leaseNamespace" "leaseDurationS" "leaseRenewDeadlineS" "leaseRetryPeriodS" "leaseIdentity")
  "puller" (list "s3EndpointUrl" "s3Region" "s3MaxAttempts" "connectTimeoutS" "readTimeoutS" "maxAttempts" "retryBackoffS" "concurrency"
                 "ociInsecureRegistries" "ociDockerConfig" "ociMaxAttempts" "backends" "kubeconfig")
  "installer" (list "readyTimeoutS" "uninstallTimeoutS" "concurrency" "capacityIntervalS" "capacityRetryS" "backendUnreachableAfterS" "runnerChart" "backends" "kubeconfig")
  "smoke" (list "concurrency" "requestTimeoutS" "sagas")
  "promoter" (list "concurrency" "followResyncS" "shadowCheckS" "figures" "prometheusUrl")
  "console" (list "host" "port")
  "router" (list "host" "port" "maxBodyBytes" "maxJsonDepth" "headerTimeoutS" "bodyTimeoutS" "keepaliveTimeoutS" "maxInFlight" "maxQueue" "retryAfterS" "upstreamTimeoutS" "shutdownGraceS" "figuresIntervalS" "shadowWorkers" "shadowQueue" "shadowPublishTimeoutS" "connectTimeoutS" "endpointDownAfter" "endpointProbeIntervalS" "endpointProbeTimeoutS" "endpointRampS" "retryUnanswered")
}}
{{- toJson (append (get $keys .) "metricsPort") }}
{{- end }}

{{/* A value as an environment string: strings verbatim, anything else as JSON. */}}
{{- define "plnt.envValue" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{/* The env list of one service. Call with (dict "root" $ "service" "puller"). */}}
{{- define "plnt.env" -}}
{{- $root := .root }}
{{- $values := index $root.Values .service -}}
- name: PLNT_NATS_URL
  value: {{ include "plnt.natsUrl" $root | quote }}
- name: PLNT_NATS_REPLICAS
  value: {{ $root.Values.natsReplicas | quote }}
- name: PLNT_NATS_PING_INTERVAL
  value: {{ $root.Values.natsPingInterval | quote }}
- name: PLNT_NATS_MAX_OUTSTANDING_PINGS
  value: {{ $root.Values.natsMaxOutstandingPings | quote }}
{{- range $variable, $value := include "plnt.retention" $root | fromJson }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ $variable }}
  value: {{ include "plnt.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- include "plnt.natsAuthEnv" $root }}
- name: PLNT_LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
- name: PLNT_LOG_FORMAT
  value: {{ $root.Values.logFormat | quote }}
- name: PLNT_ROUTER_PUBLIC_URL
  value: {{ include "plnt.routerPublicUrl" $root | quote }}
{{- include "plnt.tracingEnv" $root }}
{{- range $key := include "plnt.settingKeys" .service | fromJsonArray }}
{{- $value := index $values $key }}
{{- if and (eq $.service "watcher") (eq $key "leaseNamespace") (not $value) }}
{{- /* The Lease lives where the watcher's Role lets it: the release namespace. */}}
{{- $value = $root.Release.Namespace }}
{{- end }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ printf "PLNT_%s_%s" (upper $.service) (snakecase $key | upper) }}
  value: {{ include "plnt.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The OTEL_* variables of tracing.*, for every service; none without an endpoint. */}}
{{- define "plnt.tracingEnv" -}}
{{- $tracing := .Values.tracing | default dict }}
{{- if $tracing.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $tracing.endpoint | quote }}
{{- with $tracing.sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- if not (eq (toString $tracing.samplerArg) "") }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ include "plnt.envValue" $tracing.samplerArg | quote }}
{{- end }}
{{- with $tracing.resourceAttributes }}
{{- $pairs := list }}
{{- range $key, $value := . }}{{ $pairs = append $pairs (printf "%s=%s" $key $value) }}{{ end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $pairs | quote }}
{{- end }}
{{- if ($tracing.headersSecret | default dict).name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ $tracing.headersSecret.name | quote }}
      key: {{ $tracing.headersSecret.key | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Retention env of every service (each provisions the streams and buckets): variable ->
value, null for "not passed". events.maxAge, events.maxBytes, buckets.maxBytes,
sagas.maxAge and shadow.maxBytes; the older retention.* keys still win when set.
*/}}
{{- define "plnt.retention" -}}
{{- $old := .Values.retention | default dict }}
{{- $events := .Values.events | default dict }}
{{- $buckets := .Values.buckets | default dict }}
{{- $sagas := .Values.sagas | default dict }}
{{- $shadow := .Values.shadow | default dict }}
{{- $out := dict }}
{{- range $variable, $pair := dict "PLNT_EVENTS_MAX_AGE" (list $old.eventsMaxAge $events.maxAge) "PLNT_EVENTS_MAX_BYTES" (list $old.eventsMaxBytes $events.maxBytes) "PLNT_BUCKETS_MAX_BYTES" (list $old.bucketsMaxBytes $buckets.maxBytes) "PLNT_SAGAS_MAX_AGE" (list $old.sagasMaxAge $sagas.maxAge) "PLNT_SHADOW_MAX_BYTES" (list nil $shadow.maxBytes) }}
{{- $value := index $pair 0 }}
{{- if kindIs "invalid" $value }}{{ $value = index $pair 1 }}{{ end }}
{{- $_ := set $out $variable $value }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The NATS client auth of one mode, or "" (nats.auth: existingSecret with userKey +
passwordKey, tokenKey or credsKey). A half configuration fails with one line.
*/}}
{{- define "plnt.natsAuthMode" -}}
{{- $auth := .Values.nats.auth | default dict }}
{{- $modes := list }}
{{- if or $auth.userKey $auth.passwordKey }}
{{- if not (and $auth.userKey $auth.passwordKey) }}
{{- fail "nats.auth: userKey and passwordKey go together: set both, or use tokenKey or credsKey" }}
{{- end }}
{{- $modes = append $modes "userPassword" }}
{{- end }}
{{- if $auth.tokenKey }}{{ $modes = append $modes "token" }}{{ end }}
{{- if $auth.credsKey }}{{ $modes = append $modes "creds" }}{{ end }}
{{- if gt (len $modes) 1 }}
{{- fail (printf "nats.auth: set one of userKey+passwordKey, tokenKey or credsKey, not %s" (join " and " $modes)) }}
{{- end }}
{{- if and $modes (not $auth.existingSecret) }}
{{- fail "nats.auth: existingSecret (the Secret holding the NATS credentials) is required with userKey, tokenKey or credsKey" }}
{{- end }}
{{- if and $auth.existingSecret (not $modes) }}
{{- fail "nats.auth.existingSecret is set but names no key: set userKey+passwordKey, tokenKey or credsKey" }}
{{- end }}
{{- join "" $modes }}
{{- end }}

{{/* Whether the services talk TLS to NATS ("true" or ""); a half configuration fails. */}}
{{- define "plnt.natsTls" -}}
{{- $tls := .Values.nats.tls | default dict }}
{{- if $tls.enabled }}
{{- if not $tls.existingSecret }}
{{- fail "nats.tls.enabled is true but nats.tls.existingSecret is empty: name the Secret holding ca.crt (and tls.crt/tls.key for client certificates)" }}
{{- end }}
{{- if not (eq (empty $tls.certKey) (empty $tls.keyKey)) }}
{{- fail "nats.tls: certKey and keyKey go together (a client certificate needs its key): set both or neither" }}
{{- end }}
{{- print "true" }}
{{- end }}
{{- end }}

{{- define "plnt.natsCredsDir" -}}/etc/plnt/nats/creds{{- end }}
{{- define "plnt.natsTlsDir" -}}/etc/plnt/nats/tls{{- end }}

{{/* The NATS auth and TLS env entries (DESIGN section 15 names) of every service. */}}
{{- define "plnt.natsAuthEnv" -}}
{{- $auth := .Values.nats.auth | default dict }}
{{- $mode := include "plnt.natsAuthMode" . }}
{{- if eq $mode "userPassword" }}
- name: PLNT_NATS_USER
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret | quote }}
      key: {{ $auth.userKey | quote }}
- name: PLNT_NATS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret | quote }}
      key: {{ $auth.passwordKey | quote }}
{{- else if eq $mode "token" }}
- name: PLNT_NATS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $auth.existingSecret | quote }}
      key: {{ $auth.tokenKey | quote }}
{{- else if eq $mode "creds" }}
- name: PLNT_NATS_CREDS
  value: {{ printf "%s/nats.creds" (include "plnt.natsCredsDir" .) | quote }}
{{- end }}
{{- if include "plnt.natsTls" . }}
{{- $tls := .Values.nats.tls }}
- name: PLNT_NATS_TLS_CA
  value: {{ printf "%s/ca.crt" (include "plnt.natsTlsDir" .) | quote }}
{{- if $tls.certKey }}
- name: PLNT_NATS_TLS_CERT
  value: {{ printf "%s/tls.crt" (include "plnt.natsTlsDir" .) | quote }}
- name: PLNT_NATS_TLS_KEY
  value: {{ printf "%s/tls.key" (include "plnt.natsTlsDir" .) | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Volume mounts (first) and volumes (second) for the NATS creds and TLS files, as JSON
lists. Secrets are mounted read-only with mode 0440 (the pods' fsGroup reads them). */}}
{{- define "plnt.natsVolumes" -}}
{{- $mounts := list }}
{{- $volumes := list }}
{{- if eq (include "plnt.natsAuthMode" .) "creds" }}
{{- $auth := .Values.nats.auth }}
{{- $mounts = append $mounts (dict "name" "nats-creds" "mountPath" (include "plnt.natsCredsDir" .) "readOnly" true) }}
{{- $volumes = append $volumes (dict "name" "nats-creds" "secret" (dict "secretName" $auth.existingSecret "defaultMode" 288 "items" (list (dict "key" $auth.credsKey "path" "nats.creds")))) }}
{{- end }}
{{- if include "plnt.natsTls" . }}
{{- $tls := .Values.nats.tls }}
{{- $items := list (dict "key" $tls.caKey "path" "ca.crt") }}
{{- if $tls.certKey }}
{{- $items = append $items (dict "key" $tls.certKey "path" "tls.crt") }}
{{- $items = append $items (dict "key" $tls.keyKey "path" "tls.key") }}
{{- end }}
{{- $mounts = append $mounts (dict "name" "nats-tls" "mountPath" (include "plnt.natsTlsDir" .) "readOnly" true) }}
{{- $volumes = append $volumes (dict "name" "nats-tls" "secret" (dict "secretName" $tls.existingSecret "defaultMode" 288 "items" $items)) }}
{{- end }}
{{- toJson (list $mounts $volumes) }}
{{- end }}

{{/* The router's PLNT_ROUTER_AUTH: keys needs the keys Secret, or the chart refuses. */}}
{{- define "plnt.routerAuth" -}}
{{- $router := .Values.router }}
{{- if and (eq $router.auth "keys") (not $router.apiKeysSecret.name) }}
{{- fail "router.auth is keys but router.apiKeysSecret.name is empty: create a Secret with the namespace -> API key JSON map and set router.apiKeysSecret.name, or set router.auth=none to leave the router open" }}
{{- end }}
{{- $router.auth }}
{{- end }}

{{/* The metrics port of a service (also its probes' port); every service has one. */}}
{{- define "plnt.metricsPort" -}}
{{- $values := index .root.Values .service }}
{{- $port := int ($values.metricsPort | default 0) }}
{{- if le $port 0 }}
{{- fail (printf "%s.metricsPort must be a port (1-65535): the probes /healthz and /readyz are served there" .service) }}
{{- end }}
{{- if and (eq .service "router") (eq $port (int $values.port)) }}
{{- fail "router.metricsPort must differ from router.port: /metrics stays off the public port" }}
{{- end }}
{{- $port }}
{{- end }}

{{/* [{ipBlock: {cidr}}] of a list of CIDRs, as JSON. */}}
{{- define "plnt.cidrPeers" -}}
{{- $peers := list }}
{{- range . }}{{ $peers = append $peers (dict "ipBlock" (dict "cidr" .)) }}{{ end }}
{{- toJson $peers }}
{{- end }}

{{/* [{protocol: TCP, port}] of a list of ports, as JSON. */}}
{{- define "plnt.tcpPorts" -}}
{{- $ports := list }}
{{- range . }}{{ $ports = append $ports (dict "protocol" "TCP" "port" (int .)) }}{{ end }}
{{- toJson $ports }}
{{- end }}

{{/*
The NATS pods as NetworkPolicy peers (JSON): networkPolicy.nats.to when given; else the
NATS chart's pods of this release (nats.enabled); else, per externalNatsUrl server, the
namespace of its in-cluster name (<service>, <service>.<namespace>[.svc...]) with
networkPolicy.nats.podSelector. A server outside the cluster needs networkPolicy.nats.to.
*/}}
{{- define "plnt.natsPeers" -}}
{{- $nats := .Values.networkPolicy.nats }}
{{- $peers := list }}
{{- if $nats.to }}
{{- $peers = $nats.to }}
{{- else if .Values.nats.enabled }}
{{- $selector := $nats.podSelector | default (dict "matchLabels" (dict "app.kubernetes.io/name" "nats" "app.kubernetes.io/instance" .Release.Name)) }}
{{- $peers = list (dict "podSelector" $selector) }}
{{- else }}
{{- $namespaces := list }}
{{- range $server := splitList "," .Values.externalNatsUrl }}
{{- $host := regexReplaceAll "^[a-z]+://([^@/]*@)?([^:/]+).*$" (trim $server) "${2}" }}
{{- $parts := splitList "." $host }}
{{- $namespace := "" }}
{{- if eq (len $parts) 1 }}
{{- $namespace = $.Release.Namespace }}
{{- else if or (eq (len $parts) 2) (eq (index $parts 2) "svc") }}
{{- $namespace = index $parts 1 }}
{{- else }}
{{- fail (printf "networkPolicy: cannot tell which pods serve NATS at %s (not an in-cluster Service name): set networkPolicy.nats.to to its peers (e.g. an ipBlock), or networkPolicy.enabled=false" $host) }}
{{- end }}
{{- $namespaces = append $namespaces $namespace | uniq }}
{{- end }}
{{- range $namespace := $namespaces }}
{{- $peers = append $peers (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $namespace)) "podSelector" ($nats.podSelector | default dict)) }}
{{- end }}
{{- end }}
{{- toJson $peers }}
{{- end }}

{{/*
The runner pods as peers (JSON): plnt-runner's pods (part-of plnt, component runner) in
the namespaces the installer installs into (installer.targetNamespaces, else the release
namespace), or networkPolicy.runners.namespaceSelector when set.
*/}}
{{- define "plnt.runnerPeers" -}}
{{- $runners := .Values.networkPolicy.runners }}
{{- $namespaces := .Values.installer.targetNamespaces | default (list .Release.Namespace) }}
{{- $namespaceSelector := $runners.namespaceSelector | default (dict "matchExpressions" (list (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" $namespaces))) }}
{{- toJson (list (dict "namespaceSelector" $namespaceSelector "podSelector" $runners.podSelector)) }}
{{- end }}
