variable "kubeconfig" {
  description = "Path of the kubeconfig of the target cluster."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_context" {
  description = "Context of the kubeconfig to use; null for its current context."
  type        = string
  default     = null
}

variable "namespace" {
  description = "Namespace to deploy into."
  type        = string
  default     = "epp"
}

variable "create_namespace" {
  description = "Create the namespace (labelled to enforce the restricted pod security level)."
  type        = bool
  default     = true
}

variable "release_name" {
  description = "Helm release name."
  type        = string
  default     = "epp"
}

variable "replicas" {
  description = "Number of EPP replicas."
  type        = number
  default     = 3
}

variable "image_repository" {
  description = "Repository of the EPP image: llm-d-router's EPP with peer discovery (make image-llmd), or with peer_discovery_mode = \"sidecar\" your own EPP's."
  type        = string
  default     = "epp-peer-discovery/llm-d-router-epp"
}

variable "image_tag" {
  description = "Tag of the EPP image; null for the chart's appVersion."
  type        = string
  default     = null
}

variable "peer_discovery_enabled" {
  description = "Turn peer discovery on."
  type        = bool
  default     = true
}

variable "peer_discovery_mode" {
  description = "\"epp\", or \"sidecar\" for an EPP image of your own (set epp_args, image_repository, image_tag)."
  type        = string
  default     = "epp"
}

variable "state_sync_enabled" {
  description = "Share state between the replicas (llm-d-router's in-flight load) over the discovered peers; needs peer discovery in mode epp."
  type        = bool
  default     = false
}

variable "shared_prefix_index_enabled" {
  description = "Share the prefix-cache index between the replicas over the syncer's connections; needs state_sync_enabled."
  type        = bool
  default     = false
}

variable "tracing_enabled" {
  description = "OpenTelemetry tracing of llm-d-router's EPP: spans to tracing_otel_exporter_endpoint (off: --tracing=false, as upstream's chart)."
  type        = bool
  default     = false
}

variable "tracing_otel_exporter_endpoint" {
  description = "The OTLP gRPC collector the EPP sends its spans to, with tracing_enabled."
  type        = string
  default     = "http://localhost:4317"
}

variable "epp_args" {
  description = "Args of the EPP container in sidecar mode."
  type        = list(string)
  default     = []
}

variable "values" {
  description = "Extra chart values, merged over the module's."
  type        = any
  default     = {}
}

variable "wait" {
  description = "Wait for the Deployment to be ready."
  type        = bool
  default     = true
}
