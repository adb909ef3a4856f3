{{/*
Naming and labels of a plnt-runner release. The release name is already unique per
revision (`<run>-g<generation>`, at most 53 characters), so it is the full name.
*/}}

{{- define "plnt-runner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plnt-runner.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* A name with a suffix, still a DNS-1123 label. */}}
{{- define "plnt-runner.suffixed" -}}
{{- $base := include "plnt-runner.fullname" .root | trunc (int (sub 62 (len .suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base .suffix }}
{{- end }}

{{- define "plnt-runner.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Any string as a valid label value: disallowed characters become "_", at most 63
characters, alphanumeric at both ends. */}}
{{- define "plnt-runner.labelValue" -}}
{{- regexReplaceAll "[^-A-Za-z0-9_.]" (toString .) "_" | trunc 63 | trimAll "-_." }}
{{- end }}

{{- define "plnt-runner.revision" -}}
{{- required "revision is required (e.g. 1.2.0-g3)" .Values.revision | toString }}
{{- end }}

{{- define "plnt-runner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "plnt-runner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of the pod template: no role, so promoting a canary does not restart its pods. */}}
{{- define "plnt-runner.podLabels" -}}
helm.sh/chart: {{ include "plnt-runner.chart" . }}
{{ include "plnt-runner.selectorLabels" . }}
app.kubernetes.io/version: {{ include "plnt-runner.labelValue" (include "plnt-runner.revision" .) | quote }}
app.kubernetes.io/component: runner
app.kubernetes.io/part-of: plnt
app.kubernetes.io/managed-by: {{ .Release.Service }}
plnt.work/workflowrun: {{ required "workflowRun.name is required" .Values.workflowRun.name | include "plnt-runner.labelValue" | quote }}
plnt.work/revision: {{ include "plnt-runner.labelValue" (include "plnt-runner.revision" .) | quote }}
{{- with .Values.specDigest }}
plnt.work/spec-digest: {{ trimPrefix "sha256:" . | include "plnt-runner.labelValue" | quote }}
{{- end }}
{{- end }}

{{- define "plnt-runner.labels" -}}
{{ include "plnt-runner.podLabels" . }}
{{- with .Values.role }}
plnt.work/role: {{ include "plnt-runner.labelValue" . | quote }}
{{- end }}
{{- end }}

{{/* Which autoscaler owns the replica count: "keda", "hpa", or "" (fixed replicas.min).
A kept previous revision takes no traffic: none scales it. */}}
{{- define "plnt-runner.autoscaler" -}}
{{- if eq .Values.role "previous" }}
{{- else if .Values.keda.enabled }}keda
{{- else if and .Values.autoscaling.enabled .Values.autoscaling.targetInvocationsPerSecond }}hpa
{{- end }}
{{- end }}

{{/* The runtime entrypoint as a list: a string is split on whitespace. */}}
{{- define "plnt-runner.command" -}}
{{- $ep := .Values.runtime.entrypoint }}
{{- if kindIs "string" $ep }}
{{- if trim $ep }}
{{- toJson (regexSplit "\\s+" (trim $ep) -1) }}
{{- end }}
{{- else if $ep }}
{{- toJson $ep }}
{{- end }}
{{- end }}

{{/* A number as a Kubernetes quantity / KEDA threshold string. */}}
{{- define "plnt-runner.number" -}}
{{- $n := . }}
{{- if eq (float64 $n) (floor (float64 $n)) }}{{ int64 $n }}{{ else }}{{ toString $n }}{{ end }}
{{- end }}

{{- define "plnt-runner.workflowMountDir" -}}/etc/plnt/workflow{{- end }}

{{/* The OTEL_* variables of tracing.*; none without an endpoint. */}}
{{- define "plnt-runner.tracingEnv" -}}
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
  value: {{ toString $tracing.samplerArg | quote }}
{{- end }}
{{- with $tracing.resourceAttributes }}
{{- $pairs := list }}
{{- range $key, $value := . }}{{ $pairs = append $pairs (printf "%s=%s" $key $value) }}{{ end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $pairs | quote }}
{{- end }}
{{- if $tracing.content }}
- name: PLNT_TRACE_CONTENT
  value: "true"
{{- end }}
{{- end }}
{{- end }}
