{{/*
Names and labels.
*/}}
{{- define "kretry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kretry.fullname" -}}
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

{{- define "kretry.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kretry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kretry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kretry.labels" -}}
helm.sh/chart: {{ include "kretry.chart" . }}
{{ include "kretry.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kretry.image" -}}
{{- printf "%s:%s" .Values.kretry.image.repository (default .Chart.AppVersion .Values.kretry.image.tag) }}
{{- end }}

{{/*
The port of config.metrics.listen: the probes, the Service and Prometheus
use it, so the endpoint cannot be disabled and cannot listen on loopback
only (the kubelet and Prometheus connect to the pod IP).
*/}}
{{- define "kretry.metricsPort" -}}
{{- $listen := toString (dig "metrics" "listen" "127.0.0.1:9464" .Values.config) }}
{{- if not $listen }}
{{- fail "config.metrics.listen is empty: the chart needs the metrics endpoint for the /healthz and /readyz probes (use 0.0.0.0:9464)" }}
{{- end }}
{{- $host := regexReplaceAll ":[^:]*$" $listen "" | trimPrefix "[" | trimSuffix "]" }}
{{- if or (hasPrefix "127." $host) (eq $host "localhost" "::1") }}
{{- fail (printf "config.metrics.listen %s listens on loopback only: the kubelet's probes and Prometheus could not reach it (use 0.0.0.0:%s)" $listen (splitList ":" $listen | last)) }}
{{- end }}
{{- $port := splitList ":" $listen | last }}
{{- if not (regexMatch "^[0-9]+$" $port) }}
{{- fail (printf "config.metrics.listen %s: no port (want host:port, e.g. 0.0.0.0:9464)" $listen) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
config.app.timeout in whole seconds, rounded up (Go duration syntax: 10s,
1m30s, 500ms; kretry's default 10s when unset).
*/}}
{{- define "kretry.appTimeoutSeconds" -}}
{{- $d := toString (dig "app" "timeout" "10s" .Values.config) }}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" $d -1 }}
{{- $num := regexFind "^[0-9.]+" . | float64 }}
{{- $total = addf $total (mulf $num (get $units (regexReplaceAll "^[0-9.]+" . ""))) }}
{{- end }}
{{- ceil $total | int }}
{{- end }}

{{/*
terminationGracePeriodSeconds: explicit, and then at least app.timeout + 5s
(the commit and the group leave after the last delivery), or app.timeout +
terminationGraceMarginSeconds.
*/}}
{{- define "kretry.terminationGracePeriodSeconds" -}}
{{- $timeout := include "kretry.appTimeoutSeconds" . | int }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $timeout (int .Values.terminationGraceMarginSeconds) }}
{{- else }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- if lt $grace (add $timeout 5) }}
{{- fail (printf "terminationGracePeriodSeconds %d must be at least config.app.timeout (%ds) + 5: on SIGTERM kretry waits up to app.timeout for deliveries in flight, then commits and leaves the group" $grace $timeout) }}
{{- end }}
{{- $grace }}
{{- end }}
{{- end }}

{{/*
A SASL mechanism needs a password: refuse a release whose pods would fail
validation at start.
*/}}
{{- define "kretry.checkSASL" -}}
{{- $mech := toString (dig "kafka" "sasl" "mechanism" "" .Values.config) }}
{{- $inFile := toString (dig "kafka" "sasl" "password" "" .Values.config) }}
{{- $inEnv := false }}
{{- range .Values.kretry.env }}
{{- if eq (toString .name) "KRETRY_KAFKA__SASL__PASSWORD" }}{{ $inEnv = true }}{{ end }}
{{- end }}
{{- if and $mech (not .Values.kretry.saslPassword.existingSecret) (not $inFile) (not $inEnv) }}
{{- fail (printf "config.kafka.sasl.mechanism is %q but no password: set kretry.saslPassword.existingSecret (a Secret holding it)" $mech) }}
{{- end }}
{{- end }}
