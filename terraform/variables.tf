variable "namespace" {
  description = "Namespace to deploy the EPP into."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.namespace)) && length(var.namespace) <= 63
    error_message = "namespace must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "create_namespace" {
  description = "Create the namespace (and delete it on destroy). When false, the namespace must exist."
  type        = bool
  default     = false
}

variable "namespace_labels" {
  description = "Labels of the namespace when create_namespace is true, e.g. pod-security.kubernetes.io/enforce = restricted."
  type        = map(string)
  default     = {}
}

variable "release_name" {
  description = "Helm release name. Object names follow the chart: a release name containing \"epp\" is used as is, otherwise \"<release>-epp\"."
  type        = string
  default     = "epp"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", var.release_name)) && length(var.release_name) <= 53
    error_message = "release_name must be a DNS-1123 label of at most 53 characters (Helm's limit)."
  }
}

variable "chart_path" {
  description = "Path of the epp chart. Defaults to the chart next to this module (charts/epp). Ignored when chart_repository is set."
  type        = string
  default     = null
}

variable "chart_repository" {
  description = "Helm repository (https:// or oci://) to take the epp chart from, instead of a local path."
  type        = string
  default     = null

  validation {
    condition     = var.chart_repository == null || can(regex("^(https?|oci)://", coalesce(var.chart_repository, "x")))
    error_message = "chart_repository must be an http(s):// or oci:// URL."
  }
}

variable "chart_version" {
  description = "Version of the chart in chart_repository (null: the newest)."
  type        = string
  default     = null
}

variable "atomic" {
  description = "Roll the release back when an install or upgrade fails (Helm's --atomic)."
  type        = bool
  default     = false
}

variable "replicas" {
  description = "Number of EPP replicas."
  type        = number
  default     = 3

  validation {
    condition     = var.replicas >= 1 && floor(var.replicas) == var.replicas
    error_message = "replicas must be a whole number >= 1."
  }
}

variable "image_repository" {
  description = "Repository of the EPP image: llm-d-router's EPP with peer discovery (make image-llmd), or with peer_discovery_mode = \"sidecar\" your own EPP's."
  type        = string
  default     = "epp-peer-discovery/llm-d-router-epp"

  validation {
    condition     = length(var.image_repository) > 0
    error_message = "image_repository must not be empty."
  }
}

variable "image_tag" {
  description = "Tag of the EPP image. Null uses the chart's appVersion."
  type        = string
  default     = null

  validation {
    condition     = var.image_tag == null || can(regex("^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", var.image_tag))
    error_message = "image_tag must be a valid image tag: letters, digits, '_', '.', '-', at most 128 characters."
  }
}

variable "peer_discovery_enabled" {
  description = "Turn peer discovery on: every replica knows the others. Mode epp adds the peer-discovery plugin to the EPP's configuration; source endpointslice adds a namespaced Role limited to endpointslices get/list/watch."
  type        = bool
  default     = false
}

variable "peer_discovery_source" {
  description = "\"endpointslice\": the EPP Service's EndpointSlices (a namespaced Role). \"dns\": the SRV records of a headless peer Service the chart creates (no RBAC; every peer is ready, DNS caching delays changes)."
  type        = string
  default     = "endpointslice"

  validation {
    condition     = contains(["endpointslice", "dns"], var.peer_discovery_source)
    error_message = "peer_discovery_source must be \"endpointslice\" or \"dns\"."
  }
}

variable "model_server_labels" {
  description = "Labels of the model server pods the EPP routes to (its --endpoint-selector). Null: the chart's default."
  type        = map(string)
  default     = null
}

variable "leader_election" {
  description = "Run llm-d-router's leader election (one ready replica, the others standbys) and grant its leases. With it on, set peer_membership = \"alive\" for the standbys to be peers."
  type        = bool
  default     = false
}

variable "peer_service_name" {
  description = "Service whose EndpointSlices list the peers. Null: the chart's own Service."
  type        = string
  default     = null

  validation {
    condition     = var.peer_service_name == null || can(regex("^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", coalesce(var.peer_service_name, "x")))
    error_message = "peer_service_name must be a Service name (DNS-1035 label: lowercase letters, digits and '-', starting with a letter)."
  }
}

variable "peer_port_name" {
  description = "Name of the Service port whose number is each peer's port."
  type        = string
  default     = "peer-sync"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$", var.peer_port_name)) && can(regex("[a-z]", var.peer_port_name))
    error_message = "peer_port_name must be a port name: 1 to 15 lowercase letters, digits and '-', with at least one letter."
  }
}

variable "peer_port" {
  description = "Number of the peer port (container and Service)."
  type        = number
  default     = 9005

  validation {
    condition     = var.peer_port >= 1 && var.peer_port <= 65535 && floor(var.peer_port) == var.peer_port
    error_message = "peer_port must be a whole number between 1 and 65535."
  }
}

variable "peer_discovery_mode" {
  description = "\"epp\": the EPP container runs llm-d-router's EPP, whose peer-discovery plugin finds the peers. \"sidecar\": the EPP container runs your image, command and args (image_repository, image_tag, epp_command, epp_args) unchanged, and epp runs beside it as a native sidecar (Kubernetes 1.29+) that writes the peers to the file named by the env EPP_PEERS_FILE."
  type        = string
  default     = "epp"

  validation {
    condition     = contains(["epp", "sidecar"], var.peer_discovery_mode)
    error_message = "peer_discovery_mode must be \"epp\" or \"sidecar\"."
  }
}

variable "epp_command" {
  description = "Command of the EPP container; empty keeps the image's entrypoint."
  type        = list(string)
  default     = []
}

variable "epp_args" {
  description = "Args of the EPP container: with peer_discovery_mode = \"sidecar\" your EPP's own (empty keeps the image's); in mode epp, appended after the chart's flags."
  type        = list(string)
  default     = []
}

variable "peer_membership" {
  description = "Which endpoints are peers: \"ready\" (ready and not terminating) or \"alive\" (also not-ready ones, e.g. the standbys of an EPP run with leader election)."
  type        = string
  default     = "ready"

  validation {
    condition     = contains(["ready", "alive"], var.peer_membership)
    error_message = "peer_membership must be \"ready\" or \"alive\"."
  }
}

variable "peer_probe_interval" {
  description = "Probe every peer's peer-sync port (a TCP connect, about this often, jittered) and report reachability per peer in /debug/peers, e.g. \"5s\", at least 100ms; \"\" is off. Probing never changes who is a peer."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^(([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)?$", var.peer_probe_interval))
    error_message = "peer_probe_interval must be a duration such as \"5s\" or \"500ms\", or \"\" for off (\"0\" is not off: the EPP's plugin refuses it)."
  }

  # One rule everywhere (controller/reachability.MinInterval): the epp binary, the
  # EPP plugin, the chart's schema and template refuse less.
  validation {
    condition = !can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$", var.peer_probe_interval)) || sum(concat([0], [
      for m in regexall("([0-9]+(?:\\.[0-9]+)?)(ns|us|µs|ms|s|m|h)", var.peer_probe_interval) :
      tonumber(m[0]) * lookup({ ns = 1e-9, us = 1e-6, "µs" = 1e-6, ms = 0.001, s = 1, m = 60, h = 3600 }, m[1])
    ])) >= 0.1
    error_message = "peer_probe_interval must be at least 100ms (or \"\" for off)."
  }
}

variable "peer_network_policy" {
  description = "Create a NetworkPolicy that admits the peer-sync port only from this release's pods (every other port stays open to all). Enforced only where the cluster's network plugin enforces NetworkPolicy."
  type        = bool
  default     = false
}

variable "state_sync_enabled" {
  description = "Share state between the replicas (needs peer_discovery_enabled, mode epp): the EPP configuration gets the peer-syncer plugin (dataLayer.crossReplicaSyncerPluginRef), so that every replica's load-aware scoring sees the in-flight requests of all of them; the plugin listens on the peer-sync port."
  type        = bool
  default     = false
}

variable "state_sync_interval" {
  description = "How often each replica pushes its values to every peer: dataLayer.crossReplicaSyncInterval, at least 10ms. A silent peer's values stop counting after 3 intervals."
  type        = string
  default     = "200ms"

  validation {
    condition = can(regex("^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$", var.state_sync_interval)) && sum(concat([0], [
      for m in regexall("([0-9]+(?:\\.[0-9]+)?)(ns|us|µs|ms|s|m|h)", var.state_sync_interval) :
      tonumber(m[0]) * lookup({ ns = 1e-9, us = 1e-6, "µs" = 1e-6, ms = 0.001, s = 1, m = 60, h = 3600 }, m[1])
    ])) >= 0.01
    error_message = "state_sync_interval must be a duration of at least 10ms, such as \"200ms\"."
  }
}

variable "state_sync_tls_secret_name" {
  description = "Name of a Secret (type kubernetes.io/tls, with ca.crt) for mutual TLS between the replicas on the peer-sync port; the certificate needs the server auth and client auth usages. \"\": plain TCP, admitted only from the discovered peers' addresses."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", var.state_sync_tls_secret_name))
    error_message = "state_sync_tls_secret_name must be a Secret name (DNS-1123 subdomain) or \"\"."
  }
}

variable "shared_prefix_index_enabled" {
  description = "Share the approximate prefix-cache index between the replicas over the syncer's peer-sync connections (needs state_sync_enabled): the EPP configuration gets the plugin shared-prefix (shared-prefix-cache-producer on peer-syncer), and its prefix-cache-scorer reads it instead of the approx-prefix-cache-producer the EPP would create for each replica alone. The chart's router.epp.stateSync.sharedPrefixIndex.enabled."
  type        = bool
  default     = false
}

variable "shared_scraping_enabled" {
  description = "Scrape each model server once for the fleet of replicas rather than once per replica (needs state_sync_enabled): each server is scraped by one replica, which shares what the extractors read with the others over the syncer's peer-sync connections. The EPP configuration gets the plugin fleet-metrics (fleet-metrics-data-source on peer-syncer) in place of metrics-data-source. The chart's router.epp.stateSync.sharedScraping.enabled."
  type        = bool
  default     = false
}

variable "tracing_enabled" {
  description = "OpenTelemetry tracing of llm-d-router's EPP (the chart's router.tracing.enabled, as upstream's chart): false renders --tracing=false, so no spans are recorded (the EPP's own default prints every sampled request's spans on stdout); true renders --tracing=true and the OTLP exporter's env (endpoint, sampler, service name and the pod's namespace, node and name as resource attributes). Needs peer_discovery_mode = \"epp\"."
  type        = bool
  default     = false
}

variable "tracing_otel_exporter_endpoint" {
  description = "Where the EPP sends its spans with tracing_enabled (OTLP over gRPC; http:// is plain text): OTEL_EXPORTER_OTLP_ENDPOINT."
  type        = string
  default     = "http://localhost:4317"

  validation {
    condition     = can(regex("^https?://[^/\\s]+", var.tracing_otel_exporter_endpoint))
    error_message = "tracing_otel_exporter_endpoint must be an http:// or https:// URL of an OTLP gRPC collector, such as \"http://otel-collector.monitoring:4317\"."
  }
}

variable "tracing_sampler" {
  description = "OTEL_TRACES_SAMPLER with tracing_enabled. llm-d-router's EPP implements parentbased_traceidratio only (a request with a sampled trace context is always recorded; another name falls back to it with a logged error)."
  type        = string
  default     = "parentbased_traceidratio"

  validation {
    condition     = var.tracing_sampler == "parentbased_traceidratio"
    error_message = "tracing_sampler must be \"parentbased_traceidratio\", the only sampler llm-d-router's EPP implements."
  }
}

variable "tracing_sampler_arg" {
  description = "OTEL_TRACES_SAMPLER_ARG with tracing_enabled: the share of requests without a sampled trace context that are recorded, from 0 to 1."
  type        = number
  default     = 0.1

  validation {
    condition     = var.tracing_sampler_arg >= 0 && var.tracing_sampler_arg <= 1
    error_message = "tracing_sampler_arg must be a share between 0 and 1, such as 0.1."
  }
}

variable "extra_env" {
  description = "Extra environment variables of the epp container, shaped like Kubernetes EnvVar objects: {name, value} or {name, valueFrom}."
  type = list(object({
    name  = string
    value = optional(string)
    valueFrom = optional(object({
      fieldRef         = optional(object({ fieldPath = string, apiVersion = optional(string) }))
      resourceFieldRef = optional(object({ resource = string, containerName = optional(string), divisor = optional(string) }))
      configMapKeyRef  = optional(object({ name = string, key = string, optional = optional(bool) }))
      secretKeyRef     = optional(object({ name = string, key = string, optional = optional(bool) }))
    }))
  }))
  default = []

  validation {
    condition     = alltrue([for e in var.extra_env : (e.value == null) != (e.valueFrom == null)])
    error_message = "each extra_env entry needs exactly one of value and valueFrom."
  }

  validation {
    condition     = alltrue([for e in var.extra_env : e.valueFrom == null || length([for k, v in coalesce(e.valueFrom, {}) : k if v != null]) == 1])
    error_message = "each extra_env valueFrom needs exactly one of fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef."
  }
}

variable "values" {
  description = "Extra chart values, merged over the ones this module sets (e.g. { router = { epp = { flags = { zap-log-level = \"debug\" } } } })."
  type        = any
  default     = {}
}

variable "wait" {
  description = "Wait until the Deployment is ready before the apply completes."
  type        = bool
  default     = true
}

variable "timeout" {
  description = "Seconds to wait for the release."
  type        = number
  default     = 300

  validation {
    condition     = var.timeout >= 1
    error_message = "timeout must be at least 1 second."
  }
}
