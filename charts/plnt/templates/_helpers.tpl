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
  "watcher" (list "source" "concurrency" "statusLingerS" "deadlinePullingS" "deadlineInstallingS" "deadlineSmokingS" "deadlinePromotingS" "deadlineProgressingS" "deadlineCheckIntervalS"
                  "kubeconfig" "kubeContext" "kubeNamespace" "kubeWatchTimeoutS" "kubeRequestTimeoutS" "kubeEvents"
                  "leaderElection" "leaseName" "leaseNamespace" "leaseDurationS" "leaseRenewDeadlineS" "leaseRetryPeriodS" "leaseIdentity")
  "puller" (list "s3EndpointUrl" "s3Region" "s3MaxAttempts" "connectTimeoutS" "readTimeoutS" "maxAttempts" "retryBackoffS" "concurrency"
                 "ociInsecureRegistries" "ociDockerConfig" "ociMaxAttempts" "backends" "kubeconfig")
  "installer" (list "readyTimeoutS" "uninstallTimeoutS" "concurrency" "runnerChart" "backends" "kubeconfig")
  "smoke" (list "concurrency" "requestTimeoutS" "sagas")
  "promoter" (list "concurrency" "followResyncS" "figures" "prometheusUrl")
  "router" (list "host" "port" "maxBodyBytes" "maxJsonDepth" "headerTimeoutS" "bodyTimeoutS" "keepaliveTimeoutS" "maxInFlight" "maxQueue" "retryAfterS" "upstreamTimeoutS" "shutdownGraceS" "figuresIntervalS")
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
{{- range $key, $variable := dict "eventsMaxAge" "PLNT_EVENTS_MAX_AGE" "eventsMaxBytes" "PLNT_EVENTS_MAX_BYTES" "bucketsMaxBytes" "PLNT_BUCKETS_MAX_BYTES" "sagasMaxAge" "PLNT_SAGAS_MAX_AGE" }}
{{- $value := index ($root.Values.retention | default dict) $key }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ $variable }}
  value: {{ include "plnt.envValue" $value | quote }}
{{- end }}
{{- end }}
- name: PLNT_LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
- name: PLNT_LOG_FORMAT
  value: {{ $root.Values.logFormat | quote }}
- name: PLNT_ROUTER_PUBLIC_URL
  value: {{ include "plnt.routerPublicUrl" $root | quote }}
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
