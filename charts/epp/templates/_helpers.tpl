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

{{/* image: an image reference from {registry, repository, tag}; the tag defaults to appVersion, the registry (when set) is prepended. Call with (list $ .image). */}}
{{- define "epp.image" -}}
{{- $root := index . 0 -}}{{- $img := index . 1 -}}
{{- $repo := $img.repository -}}
{{- with $img.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- printf "%s:%s" $repo ($img.tag | default $root.Chart.AppVersion) }}
{{- end }}

{{/* Peer discovery in mode epp (llm-d-router's EPP with the plugin)? */}}
{{- define "epp.pluginMode" -}}
{{- $pd := .Values.router.epp.peerDiscovery -}}
{{- if and $pd.enabled (ne ($pd.mode | default "epp") "sidecar") }}true{{ end }}
{{- end }}

{{/* The headless peer Service of source dns. */}}
{{- define "epp.peerDNSService" -}}
{{- printf "%s-peers" (include "epp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The SRV name of the peer port (source dns). */}}
{{- define "epp.peerDNSName" -}}
{{- printf "_%s._tcp.%s.%s.svc.%s" .Values.router.epp.peerDiscovery.portName (include "epp.peerDNSService" .) .Release.Namespace .Values.router.clusterDomain }}
{{- end }}

{{/* Peer discovery from EndpointSlices (so it needs the Role)? */}}
{{- define "epp.peerSlices" -}}
{{- $pd := .Values.router.epp.peerDiscovery -}}
{{- if and $pd.enabled (ne ($pd.source | default "endpointslice") "dns") }}true{{ end }}
{{- end }}

{{/* The name of the peer-discovery plugin in the EPP configuration (and its metrics' discovery label). */}}
{{- define "epp.pluginName" -}}peer-discovery{{- end }}

{{/* The EPP configuration file with the peer-discovery plugin added (mode epp). Call with (list $ <file name> <content>). */}}
{{- define "epp.withPeerDiscovery" -}}
{{- $root := index . 0 -}}{{- $file := index . 1 -}}{{- $content := index . 2 -}}
{{- $cfg := fromYaml $content -}}
{{- if hasKey $cfg "Error" }}
{{- fail (printf "router.epp: the EPP configuration %s is not YAML: %s" $file (get $cfg "Error")) }}
{{- end }}
{{- $dl := $cfg.dataLayer | default dict -}}
{{- if $dl.peerDiscovery }}
{{- fail (printf "router.epp: the EPP configuration %s already sets dataLayer.peerDiscovery; with router.epp.peerDiscovery.enabled=true the chart adds its plugin: remove it from the file" $file) }}
{{- end }}
{{- $type := ternary "endpointslice-peer-discovery" "dns-peer-discovery" (eq (include "epp.peerSlices" $root) "true") -}}
{{- $plugins := $cfg.plugins | default list -}}
{{- $plugins = append $plugins (dict "name" (include "epp.pluginName" $root) "type" $type) -}}
{{- $_ := set $cfg "plugins" $plugins -}}
{{- $_ := set $dl "peerDiscovery" (dict "pluginRef" (include "epp.pluginName" $root)) -}}
{{- $ss := $root.Values.router.epp.stateSync -}}
{{- if $ss.enabled }}
{{- if $dl.crossReplicaSyncerPluginRef }}
{{- fail (printf "router.epp: the EPP configuration %s already sets dataLayer.crossReplicaSyncerPluginRef; with router.epp.stateSync.enabled=true the chart adds its syncer: remove it from the file" $file) }}
{{- end }}
{{- $plugins = append $plugins (dict "name" (include "epp.syncerName" $root) "type" "peer-syncer" "parameters" (dict "peerDiscoveryRef" (include "epp.pluginName" $root) "interval" $ss.interval)) -}}
{{- $_ := set $cfg "plugins" $plugins -}}
{{- $_ := set $dl "crossReplicaSyncerPluginRef" (include "epp.syncerName" $root) -}}
{{- $_ := set $dl "crossReplicaSyncInterval" $ss.interval -}}
{{- if dig "sharedPrefixIndex" "enabled" false $ss }}
{{- $producer := include "epp.sharedPrefixName" $root -}}
{{- $scorers := 0 -}}
{{- range $plugins }}
{{- if or (eq (.type | default "") "shared-prefix-cache-producer") (eq (.name | default "") $producer) }}
{{- fail (printf "router.epp: the EPP configuration %s already has a plugin %s (type %s); with router.epp.stateSync.sharedPrefixIndex.enabled=true the chart adds its shared-prefix-cache-producer %q: remove it from the file" $file (.name | default .type) .type $producer) }}
{{- end }}
{{- if eq (.type | default "") "prefix-cache-scorer" }}
{{- $params := .parameters | default dict }}
{{- with $params.prefixMatchInfoProducerName }}
{{- if ne . $producer }}
{{- fail (printf "router.epp: the EPP configuration %s has a prefix-cache-scorer that reads the producer %q; with router.epp.stateSync.sharedPrefixIndex.enabled=true the chart points it at the shared index (%q): remove its prefixMatchInfoProducerName" $file . $producer) }}
{{- end }}
{{- end }}
{{- $_ := set $params "prefixMatchInfoProducerName" $producer }}
{{- $_ := set . "parameters" $params }}
{{- $scorers = add1 $scorers }}
{{- end }}
{{- end }}
{{- if not $scorers }}
{{- fail (printf "router.epp: the EPP configuration %s has no prefix-cache-scorer to read the index that router.epp.stateSync.sharedPrefixIndex.enabled=true shares: add one, or leave the value off" $file) }}
{{- end }}
{{- $plugins = append $plugins (dict "name" $producer "type" "shared-prefix-cache-producer" "parameters" (dict "peerSyncerRef" (include "epp.syncerName" $root))) -}}
{{- $_ := set $cfg "plugins" $plugins -}}
{{- end }}
{{- if dig "sharedScraping" "enabled" false $ss }}
{{- $plugins = include "epp.withSharedScraping" (list $root $file $cfg $dl) | fromYamlArray -}}
{{- $_ := set $cfg "plugins" $plugins -}}
{{- end }}
{{- end }}
{{- $_ := set $cfg "dataLayer" $dl -}}
{{- toYaml $cfg }}
{{- end }}

{{/* The EPP configuration's plugins with fleet-metrics-data-source in place of metrics-data-source (its parameters carried over) and dataLayer (set in place) feeding the extractors from it, upstream's injection of metrics-data-source off. Call with (list $ <file name> <configuration> <its dataLayer>). */}}
{{- define "epp.withSharedScraping" -}}
{{- $root := index . 0 -}}{{- $file := index . 1 -}}{{- $cfg := index . 2 -}}{{- $dl := index . 3 -}}
{{- $src := include "epp.fleetMetricsName" $root -}}
{{- $params := dict "peerSyncerRef" (include "epp.syncerName" $root) -}}
{{- $kept := list -}}{{- $replaced := list -}}{{- $extractors := list -}}
{{- range $cfg.plugins }}
{{- $type := .type | default "" -}}{{- $name := .name | default $type -}}
{{- if or (eq $type "fleet-metrics-data-source") (eq $name $src) }}
{{- fail (printf "router.epp: the EPP configuration %s already has a plugin %s (type %s); with router.epp.stateSync.sharedScraping.enabled=true the chart adds its fleet-metrics-data-source %q: remove it from the file" $file $name $type $src) }}
{{- else if eq $type "metrics-data-source" }}
{{- if $replaced }}
{{- fail (printf "router.epp: the EPP configuration %s has two metrics-data-source plugins; with router.epp.stateSync.sharedScraping.enabled=true the chart replaces the one: keep one" $file) }}
{{- end }}
{{- range $k, $v := .parameters | default dict }}{{ $_ := set $params $k $v }}{{ end }}
{{- $replaced = append $replaced $name -}}
{{- else }}
{{- if eq $type "core-metrics-extractor" }}{{ $extractors = append $extractors $name }}{{ end }}
{{- $kept = append $kept . -}}
{{- end }}
{{- end }}
{{- if not $extractors }}
{{- $kept = append $kept (dict "type" "core-metrics-extractor") -}}{{- $extractors = list "core-metrics-extractor" -}}
{{- end }}
{{- $kept = append $kept (dict "name" $src "type" "fleet-metrics-data-source" "parameters" $params) -}}
{{- $sources := list -}}
{{- range $dl.sources | default list }}
{{- if has .pluginRef $replaced }}{{ $_ := set . "pluginRef" $src }}{{ end }}
{{- $sources = append $sources . -}}
{{- end }}
{{- if not $dl.sources }}
{{- $refs := list -}}{{- range $extractors }}{{ $refs = append $refs (dict "pluginRef" .) }}{{ end }}
{{- $sources = list (dict "pluginRef" $src "extractors" $refs) -}}
{{- end }}
{{- $_ := set $dl "sources" $sources -}}
{{- $_ := set $dl "injectDefaults" false -}}
{{- toYaml $kept }}
{{- end }}

{{/* The shared scraping's plugin name. */}}
{{- define "epp.fleetMetricsName" -}}fleet-metrics{{- end }}

{{/* The cross-replica syncer's plugin name. */}}
{{- define "epp.syncerName" -}}peer-syncer{{- end }}

{{/* The shared prefix index's plugin name (prefix-cache-scorer's prefixMatchInfoProducerName). */}}
{{- define "epp.sharedPrefixName" -}}shared-prefix{{- end }}

{{/* Where the mTLS Secret of state sync is mounted. */}}
{{- define "epp.syncTLSDir" -}}/var/run/epp-peer-sync-tls{{- end }}

{{/* Checks of router.epp.stateSync: it needs peer discovery in mode epp, and an interval of at least 10ms; its sharedPrefixIndex and sharedScraping need it. */}}
{{- define "epp.checkStateSync" -}}
{{- $ss := .Values.router.epp.stateSync -}}
{{- if and (dig "sharedScraping" "enabled" false $ss) (not $ss.enabled) -}}
{{- fail "router.epp.stateSync.sharedScraping.enabled=true needs router.epp.stateSync.enabled=true: the metrics travel over the syncer's peer-sync connections" -}}
{{- end -}}
{{- if and (dig "sharedPrefixIndex" "enabled" false $ss) (not $ss.enabled) -}}
{{- fail "router.epp.stateSync.sharedPrefixIndex.enabled=true needs router.epp.stateSync.enabled=true: the index travels over the syncer's peer-sync connections" -}}
{{- end -}}
{{- if $ss.enabled -}}
{{- if not .Values.router.epp.peerDiscovery.enabled -}}
{{- fail "router.epp.stateSync.enabled=true needs router.epp.peerDiscovery.enabled=true: the syncer shares state with the discovered peers" -}}
{{- end -}}
{{- if include "epp.sidecar" . -}}
{{- fail "router.epp.stateSync.enabled=true needs router.epp.peerDiscovery.mode=epp: the syncer is a plugin of llm-d-router's EPP, not of the sidecar" -}}
{{- end -}}
{{- $s := include "epp.seconds" $ss.interval | float64 -}}
{{- if lt $s 0.01 -}}
{{- fail (printf "router.epp.stateSync.interval=%q: want at least 10ms" $ss.interval) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The env of the peer-discovery plugin (mode epp): its settings, which the plugin reads where its configuration entry leaves them out. */}}
{{- define "epp.pluginEnv" -}}
{{- $pd := .Values.router.epp.peerDiscovery -}}
{{- if include "epp.peerSlices" . }}
- name: EPP_PEER_SERVICE
  value: {{ include "epp.peerService" . | quote }}
{{- else }}
- name: EPP_PEER_DNS_SERVICE
  value: {{ include "epp.peerDNSService" . | quote }}
{{- end }}
{{- if ne $pd.portName "peer-sync" }}
- name: EPP_PEER_PORT_NAME
  value: {{ $pd.portName | quote }}
{{- end }}
{{- if ne (int $pd.port) 9005 }}
- name: EPP_PEER_PORT
  value: {{ $pd.port | quote }}
{{- end }}
{{- if ne ($pd.membership | default "ready") "ready" }}
- name: EPP_PEER_MEMBERSHIP
  value: {{ $pd.membership | quote }}
{{- end }}
- name: EPP_PEER_DEBUG_ADDRESS
  value: {{ printf ":%v" $pd.debugPort | quote }}
{{- if or $pd.probeInterval .Values.router.epp.stateSync.enabled }}
- name: EPP_PEER_SYNC_ADDRESS
  value: {{ printf ":%v" $pd.port | quote }}
{{- end }}
{{- if and .Values.router.epp.stateSync.enabled .Values.router.epp.stateSync.tls.secretName }}
- name: EPP_PEER_SYNC_TLS_DIR
  value: {{ include "epp.syncTLSDir" . | quote }}
{{- end }}
{{- end }}

{{/* The peer discovery flags of epp (the sidecar). */}}
{{- define "epp.peerFlags" -}}
{{- with .Values.router.epp.peerDiscovery }}
- --enable-peer-discovery
{{- if include "epp.peerSlices" $ }}
- --epp-peer-service={{ include "epp.peerService" $ }}
{{- else }}
- --epp-peer-dns={{ include "epp.peerDNSName" $ }}
{{- end }}
{{- if ne .portName "peer-sync" }}
- --epp-peer-port-name={{ .portName }}
{{- end }}
{{- if ne (int .port) 9005 }}
- --epp-peer-port={{ .port }}
{{- end }}
{{- end }}
{{- end }}

{{/* A flags map rendered as args, sorted by name; managed flags are refused, naming the value that sets each. Call with (dict "flags" <map> "path" <value path> "managed" <dict flag: the value to use instead>). */}}
{{- define "epp.userFlags" -}}
{{- $flags := .flags | default dict }}
{{- range $name := keys $flags | sortAlpha }}
{{- if hasKey $.managed $name }}
{{- fail (printf "%s.%s is set by the chart: use %s" $.path $name (get $.managed $name)) }}
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

{{/* The flags of the epp binary the chart sets, refused in the sidecar's flags map, with the value that sets each. */}}
{{- define "epp.binaryManagedFlags" -}}
{{- $pd := "router.epp.peerDiscovery" -}}
{{- dict "enable-peer-discovery" (printf "%s.enabled" $pd) "epp-peer-service" (printf "%s.serviceName" $pd) "epp-peer-file" "nothing: the sidecar writes the file the EPP reads" "epp-peer-dns" (printf "%s.source=dns" $pd) "epp-peer-port-name" (printf "%s.portName" $pd) "epp-peer-port" (printf "%s.port" $pd) "epp-peer-membership" (printf "%s.membership" $pd) "epp-peer-snapshot-file" "nothing: the chart sets it to the shared file" "epp-peer-probe-interval" (printf "%s.probeInterval" $pd) "peer-sync-bind-address" "nothing: the EPP container owns the peer-sync port" "metrics-bind-address" (printf "%s.sidecar.ports.metrics" $pd) "health-probe-bind-address" (printf "%s.sidecar.ports.probes" $pd) "pool-namespace" "the release's namespace" | toJson }}
{{- end }}

{{/* The args of llm-d-router's EPP (mode epp): the chart's flags, then the user's flags sorted by name, then the user's args. */}}
{{- define "epp.eppArgs" -}}
{{- $epp := include "epp.values" . | fromJson -}}
- --config-file=/config/{{ $epp.pluginsConfigFile }}
{{- if .Values.router.inferencePool.name }}
- --pool-name={{ .Values.router.inferencePool.name }}
- --pool-namespace={{ .Release.Namespace }}
- --pool-group={{ .Values.router.inferencePool.group }}
{{- else }}
{{- $labels := list }}
{{- range $k, $v := .Values.router.modelServers.matchLabels }}
{{- $labels = append $labels (printf "%s=%s" $k $v) }}
{{- end }}
{{- if not $labels }}
{{- fail "router.modelServers.matchLabels is required (the EPP's --endpoint-selector) unless router.inferencePool.name is set" }}
{{- end }}
- --endpoint-selector={{ $labels | sortAlpha | join "," }}
{{- $ports := list }}
{{- range .Values.router.modelServers.targetPorts }}
{{- $ports = append $ports (toString .number) }}
{{- end }}
{{- if not $ports }}
{{- fail "router.modelServers.targetPorts needs at least one {number: <port>}" }}
{{- end }}
- --endpoint-target-ports={{ $ports | join "," }}
{{- end }}
- --grpc-port={{ $epp.ports.extProc }}
- --grpc-health-port={{ $epp.ports.grpcHealth }}
- --metrics-port={{ $epp.ports.metrics }}
- --metrics-endpoint-auth={{ include "epp.metricsAuth" . | eq "true" }}
{{- /* As upstream's chart: JSON logs, and tracing only when router.tracing.enabled (the EPP's own default is on, printing spans to stdout); flags.zap-encoder and flags.tracing take their place. */}}
{{- if not (hasKey ($epp.flags | default dict) "zap-encoder") }}
- --zap-encoder=json
{{- end }}
{{- if not (hasKey ($epp.flags | default dict) "tracing") }}
- --tracing={{ include "epp.tracing" . | eq "true" }}
{{- end }}
{{- if $epp.leaderElection }}
- --ha-enable-leader-election
{{- end }}
{{- $pool := "router.inferencePool.name (standalone: router.modelServers.matchLabels)" }}
{{- $managed := dict "config-file" "router.epp.pluginsConfigFile and router.epp.pluginsCustomConfig" "endpoint-selector" "router.modelServers.matchLabels" "endpoint-target-ports" "router.modelServers.targetPorts" "pool-name" $pool "pool-namespace" $pool "pool-group" "router.inferencePool.group" "grpc-port" "router.epp.ports.extProc" "grpc-health-port" "router.epp.ports.grpcHealth" "metrics-port" "router.epp.ports.metrics" "metrics-endpoint-auth" "router.monitoring.prometheus.auth.enabled" "ha-enable-leader-election" "router.epp.leaderElection" }}
{{- include "epp.userFlags" (dict "flags" $epp.flags "path" "router.epp.flags" "managed" $managed) }}
{{- with $epp.args }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The args of the peer-discovery sidecar. */}}
{{- define "epp.sidecarArgs" -}}
{{- $sc := .Values.router.epp.peerDiscovery.sidecar -}}
- --metrics-bind-address=:{{ $sc.ports.metrics }}
- --health-probe-bind-address=:{{ $sc.ports.probes }}
{{- include "epp.peerFlags" . }}
- --epp-peer-snapshot-file={{ include "epp.peersDir" . }}/peers.json
{{- include "epp.userFlags" (dict "flags" $sc.flags "path" "router.epp.peerDiscovery.sidecar.flags" "managed" (include "epp.binaryManagedFlags" . | fromJson)) }}
{{- end }}

{{/* The env that turns reachability probing on, for the container that runs discovery. */}}
{{- define "epp.probeEnv" -}}
{{- with .Values.router.epp.peerDiscovery.probeInterval }}
- name: EPP_PEER_PROBE_INTERVAL
  value: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The sidecar's settings as env (what the kustomize components set too): its membership, its probing. */}}
{{- define "epp.sidecarEnv" -}}
{{- if ne (.Values.router.epp.peerDiscovery.membership | default "ready") "ready" }}
- name: EPP_PEER_MEMBERSHIP
  value: {{ .Values.router.epp.peerDiscovery.membership | quote }}
{{- end }}
{{- include "epp.probeEnv" . }}
{{- end }}

{{/* Tracing of llm-d-router's EPP on (router.tracing.enabled, mode epp)? */}}
{{- define "epp.tracing" -}}
{{- if and (not (include "epp.sidecar" .)) (dig "tracing" "enabled" false .Values.router) }}true{{ end }}
{{- end }}

{{/* Checks of router.tracing: it sets llm-d-router's EPP's flag and env (mode epp), and router.epp.flags.tracing would contradict it. */}}
{{- define "epp.checkTracing" -}}
{{- if dig "tracing" "enabled" false .Values.router -}}
{{- if include "epp.sidecar" . -}}
{{- fail "router.tracing.enabled=true sets the flag and env of llm-d-router's EPP; with router.epp.peerDiscovery.mode=sidecar the EPP container is yours: set its tracing in router.epp.args and router.epp.env" -}}
{{- end -}}
{{- if hasKey (.Values.router.epp.flags | default dict) "tracing" -}}
{{- fail "router.epp.flags.tracing and router.tracing.enabled=true: set one (router.tracing.enabled=true renders --tracing=true and the OTLP exporter's env)" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The env of llm-d-router's EPP's OTLP exporter, as upstream's chart sets it (after NAMESPACE, which it refers to). */}}
{{- define "epp.tracingEnv" -}}
{{- with .Values.router.tracing }}
- name: OTEL_SERVICE_NAME
  value: "llm-d-router/epp"
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .otelExporterEndpoint | quote }}
- name: OTEL_TRACES_EXPORTER
  value: "otlp"
- name: OTEL_RESOURCE_ATTRIBUTES_NODE_NAME
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: spec.nodeName
- name: OTEL_RESOURCE_ATTRIBUTES_POD_NAME
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: metadata.name
- name: OTEL_RESOURCE_ATTRIBUTES
  value: "k8s.namespace.name=$(NAMESPACE),k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)"
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampling.sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .sampling.samplerArg | quote }}
{{- end }}
{{- end }}

{{/* The downward-API identity env. */}}
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

{{/* A probe with the default handler added when it has none. Call with (list <probe> <default handler dict>). */}}
{{- define "epp.probe" -}}
{{- $probe := deepCopy (index . 0 | default dict) -}}
{{- $handler := index . 1 -}}
{{- if not (or $probe.grpc $probe.httpGet $probe.tcpSocket $probe.exec) }}
{{- $probe = merge $probe $handler }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* Refuses port clashes among the ports of the pod or of the Service. Call with (dict "ports" <list of dicts {name, port, protocol, value}> "of" <"the EPP's pod" or "the EPP Service">) (value: the value path, for the message). */}}
{{- define "epp.checkPorts" -}}
{{- $byNumber := dict -}}
{{- $byName := dict -}}
{{- $of := .of -}}
{{- range .ports }}
{{- /* Ports of other protocols may share a number (53 TCP and 53 UDP). */ -}}
{{- $n := toString .port }}
{{- with .protocol }}{{ if ne . "TCP" }}{{ $n = printf "%s/%s" $n . }}{{ end }}{{ end }}
{{- if hasKey $byNumber $n }}
{{- fail (printf "%s and %s are both port %s: every port of %s must differ" (get $byNumber $n) .value $n $of) }}
{{- end }}
{{- $_ := set $byNumber $n .value }}
{{- if .name }}
{{- if hasKey $byName .name }}
{{- fail (printf "%s and %s both name a port %q: the port names of %s must differ" (get $byName .name) .value .name $of) }}
{{- end }}
{{- $_ := set $byName .name .value }}
{{- end }}
{{- end }}
{{- end }}

{{/* The duration in seconds of a Go duration string (e.g. "1m30s", "250ms"); call after the schema checked its form. */}}
{{- define "epp.seconds" -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $num := regexFind "^[0-9.]+" . | float64 }}
{{- $unit := regexReplaceAll "^[0-9.]+" . "" }}
{{- $scale := get (dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0) $unit }}
{{- $total = addf $total (mulf $num $scale) }}
{{- end }}
{{- $total }}
{{- end }}

{{/* The chart's EPP configuration, llm-d-router's default: queue, KV-cache and prefix-cache scorers on the model servers' metrics; with stateSync, also the scorer of in-flight requests (active-request-scorer), whose load the syncer shares. */}}
{{- define "epp.defaultConfig" -}}
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: prefix-cache-scorer
  {{- if .Values.router.epp.stateSync.enabled }}
  - type: active-request-scorer
  {{- end }}
  - type: metrics-data-source
  - type: core-metrics-extractor
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
        weight: 2
      - pluginRef: kv-cache-utilization-scorer
        weight: 2
      - pluginRef: prefix-cache-scorer
        weight: 3
      {{- if .Values.router.epp.stateSync.enabled }}
      - pluginRef: active-request-scorer
        weight: 2
      {{- end }}
{{- end }}

{{/* Metrics auth on (mode epp: llm-d-router's EPP checks every /metrics request's token, as upstream's default)? */}}
{{- define "epp.metricsAuth" -}}
{{- if and (not (include "epp.sidecar" .)) (ne (toString (dig "monitoring" "prometheus" "auth" "enabled" true .Values.router)) "false") }}true{{ end }}
{{- end }}

{{/* The ServiceMonitor is rendered: router.epp.serviceMonitor (when the cluster serves the API, or forced), or llm-d-router-standalone's router.monitoring.prometheus.enabled (always, as there). */}}
{{- define "epp.serviceMonitor" -}}
{{- $sm := .Values.router.epp.serviceMonitor -}}
{{- if or (dig "monitoring" "prometheus" "enabled" false .Values.router) (and $sm.enabled (or $sm.force (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor"))) }}true{{ end }}
{{- end }}

{{/* The ServiceAccount whose token the ServiceMonitor scrapes with (metrics auth on), allowed nothing but GET /metrics; and its token Secret. */}}
{{- define "epp.metricsReader" -}}
{{- printf "%s-metrics-reader" (include "epp.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "epp.metricsReaderSecret" -}}
{{- dig "monitoring" "prometheus" "auth" "secretName" "" .Values.router | default (include "epp.metricsReader" .) }}
{{- end }}

{{/* A cluster-wide name for this release's cluster-scoped RBAC: full name and namespace, so that releases of one name in two namespaces never share it. Call with (list $ <suffix>). */}}
{{- define "epp.clusterName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s-%s" (include "epp.fullname" $root) $root.Release.Namespace (index . 1) | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/* router.epp with the values of llm-d-router-standalone that mean the same folded in (extProcPort, grpcHealthPort, router.metricsPort, volumes, volumeMounts), as JSON. A port set both ways differently is refused. */}}
{{- define "epp.values" -}}
{{- $epp := deepCopy .Values.router.epp -}}
{{- $ports := $epp.ports -}}
{{- range $alias := list (list $epp "extProcPort" "extProc" 9002 "router.epp.extProcPort") (list $epp "grpcHealthPort" "grpcHealth" 9003 "router.epp.grpcHealthPort") (list $.Values.router "metricsPort" "metrics" 9090 "router.metricsPort") }}
{{- $in := index $alias 0 }}{{ $from := index $alias 1 }}{{ $to := index $alias 2 }}{{ $default := index $alias 3 }}{{ $path := index $alias 4 }}
{{- $v := index $in $from }}
{{- if not (kindIs "invalid" $v) }}
{{- $have := int (index $ports $to) }}
{{- if and (ne $have $default) (ne $have (int $v)) }}
{{- fail (printf "%s=%v and router.epp.ports.%s=%v: one port, two values (%s is llm-d-router-standalone's name of router.epp.ports.%s): set one" $path $v $to $have $path $to) }}
{{- end }}
{{- $_ := set $ports $to (int $v) }}
{{- end }}
{{- end }}
{{- $_ := set $epp "extraVolumes" (concat ($epp.extraVolumes | default list) ($epp.volumes | default list)) }}
{{- $_ := set $epp "extraVolumeMounts" (concat ($epp.extraVolumeMounts | default list) ($epp.volumeMounts | default list)) }}
{{- toJson $epp }}
{{- end }}

{{/* Values of llm-d-router-standalone that this chart cannot honor are refused, pointing to the table in the README (values that mean the same here are folded in by epp.values). */}}
{{- define "epp.checkUpstreamValues" -}}
{{- $r := .Values.router -}}
{{- $refuse := list -}}
{{- if dig "proxy" "enabled" false $r }}{{ $refuse = append $refuse "router.proxy.enabled=true: this chart deploys no proxy (put one in front of the EPP Service)" }}{{ end }}
{{- if dig "tokenizer" "enabled" false $r }}{{ $refuse = append $refuse "router.tokenizer.enabled=true: this chart runs no tokenizer sidecar" }}{{ end }}
{{- if dig "latencyPredictor" "enabled" false $r }}{{ $refuse = append $refuse "router.latencyPredictor.enabled=true: this chart runs no latency predictor" }}{{ end }}
{{- if $r.inferenceObjectives }}{{ $refuse = append $refuse "router.inferenceObjectives: this chart creates no InferenceObjectives" }}{{ end }}
{{- if dig "inferencePool" "create" false $r }}{{ $refuse = append $refuse "router.inferencePool.create=true: this chart creates no InferencePool (route for an existing one with router.inferencePool.name)" }}{{ end }}
{{- with dig "modelServers" "type" "vllm" $r }}{{ if ne . "vllm" }}{{ $refuse = append $refuse (printf "router.modelServers.type=%s: this chart's EPP configuration reads vLLM's metrics (give your own with router.epp.pluginsCustomConfig)" .) }}{{ end }}{{ end }}
{{- with dig "modelServers" "protocol" "http" $r }}{{ if ne . "http" }}{{ $refuse = append $refuse (printf "router.modelServers.protocol=%s: this chart supports http" .) }}{{ end }}{{ end }}
{{- if hasKey $r.modelServers "targetPortNumber" }}{{ $refuse = append $refuse "router.modelServers.targetPortNumber: use router.modelServers.targetPorts ([{number: <port>}])" }}{{ end }}
{{- if dig "parsers" list $r.epp }}{{ $refuse = append $refuse "router.epp.parsers: this chart's EPP configuration selects parsers automatically (name them in router.epp.pluginsCustomConfig)" }}{{ end }}
{{- $mds := dig "metricsDataSource" dict $r.epp }}
{{- if or (ne (dig "scheme" "http" $mds) "http") (ne (dig "path" "/metrics" $mds) "/metrics") }}{{ $refuse = append $refuse "router.epp.metricsDataSource other than http and /metrics: configure the metrics-data-source plugin in router.epp.pluginsCustomConfig" }}{{ end }}
{{- with dig "monitoring" "provider" "name" "" $r }}{{ if ne (lower .) "prometheusoperator" }}{{ $refuse = append $refuse (printf "router.monitoring.provider.name=%s: this chart renders a Prometheus Operator ServiceMonitor only" .) }}{{ end }}{{ end }}
{{- if $refuse }}
{{- fail (printf "%s; see \"Values of this chart and of llm-d-router-standalone\" in the chart's README (charts/epp/README.md)" (join "; " $refuse)) }}
{{- end }}
{{- end }}
