{{/* Name of the chart. */}}
{{- define "epp.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name when it contains the chart name, else release-chart. */}}
{{- define "epp.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "epp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "epp.labels" -}}
{{ include "epp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The Service whose EndpointSlices are the peer source. */}}
{{- define "epp.peerService" -}}
{{- .Values.router.epp.peerDiscovery.serviceName | default (include "epp.fullname" .) }}
{{- end }}

{{/* Name of the peer discovery Role and RoleBinding. */}}
{{- define "epp.peerRole" -}}
{{- printf "%s-peer-discovery" (include "epp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The container args: managed flags first, then the user's flags sorted by name. */}}
{{- define "epp.args" -}}
{{- $epp := .Values.router.epp -}}
- --metrics-bind-address=:{{ $epp.ports.metrics }}
- --health-probe-bind-address=:{{ $epp.ports.probes }}
{{- with $epp.peerDiscovery }}
{{- if .enabled }}
- --enable-peer-discovery
- --epp-peer-service={{ include "epp.peerService" $ }}
{{- if ne .portName "peer-sync" }}
- --epp-peer-port-name={{ .portName }}
{{- end }}
{{- if ne (int .port) 9005 }}
- --epp-peer-port={{ .port }}
{{- end }}
{{- if ne (.membership | default "ready") "ready" }}
- --epp-peer-membership={{ .membership }}
{{- end }}
{{- end }}
{{- end }}
{{- $managed := list "enable-peer-discovery" "epp-peer-service" "epp-peer-file" "epp-peer-port-name" "epp-peer-port" "epp-peer-membership" "metrics-bind-address" "health-probe-bind-address" "pool-namespace" }}
{{- range $name := keys ($epp.flags | default dict) | sortAlpha }}
{{- if has $name $managed }}
{{- fail (printf "router.epp.flags.%s is set by the chart: use router.epp.peerDiscovery or router.epp.ports instead" $name) }}
{{- end }}
{{- $value := get $epp.flags $name }}
{{- if kindIs "bool" $value }}
- --{{ $name }}={{ $value }}
{{- else if kindIs "invalid" $value }}
- --{{ $name }}
{{- else }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- end }}
{{- end }}
