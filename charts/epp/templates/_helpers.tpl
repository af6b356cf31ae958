{{/* Name of the chart: router.epp.nameOverride, else the chart's name. */}}
{{- define "epp.name" -}}
{{- .Values.router.epp.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: router.epp.fullnameOverride; else the release name when it contains the name, else release-name. */}}
{{- define "epp.fullname" -}}
{{- if .Values.router.epp.fullnameOverride }}
{{- .Values.router.epp.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "epp.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels that select the pods (never change them: selectors are immutable). */}}
{{- define "epp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The app.kubernetes.io labels of everything the chart renders, and commonLabels. */}}
{{- define "epp.labels" -}}
{{ include "epp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: epp
app.kubernetes.io/part-of: {{ include "epp.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.router.epp.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the pods: the chart's labels and podLabels. */}}
{{- define "epp.podLabels" -}}
{{ include "epp.labels" . }}
{{- with .Values.router.epp.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "epp.serviceAccountName" -}}
{{- $sa := .Values.router.epp.serviceAccount -}}
{{- if $sa.create }}
{{- $sa.name | default (include "epp.fullname" .) }}
{{- else }}
{{- $sa.name | default "default" }}
{{- end }}
{{- end }}

{{/* The Service whose EndpointSlices are the peer source. */}}
{{- define "epp.peerService" -}}
{{- .Values.router.epp.peerDiscovery.serviceName | default (include "epp.fullname" .) }}
{{- end }}

{{/* Name of the peer discovery Role and RoleBinding. */}}
{{- define "epp.peerRole" -}}
{{- printf "%s-peer-discovery" (include "epp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Peer discovery in the sidecar? */}}
{{- define "epp.sidecar" -}}
{{- $pd := .Values.router.epp.peerDiscovery -}}
{{- if and $pd.enabled (eq ($pd.mode | default "epp") "sidecar") }}true{{ end }}
{{- end }}

{{/* Where the sidecar writes the peers, and the EPP container reads them. */}}
{{- define "epp.peersDir" -}}/var/run/epp-peers{{- end }}

{{/* image: an image reference from {repository, tag}; the tag defaults to appVersion. Call with (list $ .image). */}}
{{- define "epp.image" -}}
{{- $root := index . 0 -}}{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository ($img.tag | default $root.Chart.AppVersion) }}
{{- end }}

{{/* The peer discovery flags of epp (both modes). */}}
{{- define "epp.peerFlags" -}}
{{- with .Values.router.epp.peerDiscovery }}
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

{{/* A flags map rendered as args, sorted by name; managed flags are refused. Call with (dict "flags" <map> "path" <value path>). */}}
{{- define "epp.userFlags" -}}
{{- $managed := list "enable-peer-discovery" "epp-peer-service" "epp-peer-file" "epp-peer-port-name" "epp-peer-port" "epp-peer-membership" "epp-peer-snapshot-file" "epp-peer-probe-interval" "peer-sync-bind-address" "metrics-bind-address" "health-probe-bind-address" "pool-namespace" }}
{{- $flags := .flags | default dict }}
{{- range $name := keys $flags | sortAlpha }}
{{- if has $name $managed }}
{{- fail (printf "%s.%s is set by the chart: use router.epp.peerDiscovery or the ports values instead" $.path $name) }}
{{- end }}
{{- $value := get $flags $name }}
{{- if kindIs "bool" $value }}
- --{{ $name }}={{ $value }}
{{- else if kindIs "invalid" $value }}
- --{{ $name }}
{{- else }}
- {{ printf "--%s=%v" $name $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The args of epp as the EPP container (mode epp): managed flags first (the listeners, then peer discovery's), then the user's flags sorted by name. epp answers on the peer-sync port so that its peers' probes succeed. */}}
{{- define "epp.args" -}}
{{- $epp := .Values.router.epp -}}
- --metrics-bind-address=:{{ $epp.ports.metrics }}
- --health-probe-bind-address=:{{ $epp.ports.probes }}
{{- if $epp.peerDiscovery.enabled }}
- --peer-sync-bind-address=:{{ $epp.peerDiscovery.port }}
{{- include "epp.peerFlags" . }}
{{- end }}
{{- include "epp.userFlags" (dict "flags" $epp.flags "path" "router.epp.flags") }}
{{- end }}

{{/* The args of the peer-discovery sidecar. */}}
{{- define "epp.sidecarArgs" -}}
{{- $sc := .Values.router.epp.peerDiscovery.sidecar -}}
- --metrics-bind-address=:{{ $sc.ports.metrics }}
- --health-probe-bind-address=:{{ $sc.ports.probes }}
{{- include "epp.peerFlags" . }}
- --epp-peer-snapshot-file={{ include "epp.peersDir" . }}/peers.json
{{- include "epp.userFlags" (dict "flags" $sc.flags "path" "router.epp.peerDiscovery.sidecar.flags") }}
{{- end }}

{{/* The env that turns reachability probing on, for the container that runs discovery; before the identity env, where kustomize's component puts it too. */}}
{{- define "epp.probeEnv" -}}
{{- with .Values.router.epp.peerDiscovery.probeInterval }}
- name: EPP_PEER_PROBE_INTERVAL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The downward-API identity env of epp. */}}
{{- define "epp.identityEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_IPS
  valueFrom:
    fieldRef:
      fieldPath: status.podIPs
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end }}
