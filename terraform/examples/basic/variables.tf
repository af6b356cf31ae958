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
  description = "Repository of the epp image."
  type        = string
  default     = "epp-peer-discovery/epp"
}

variable "image_tag" {
  description = "Tag of the epp image; null for the chart's appVersion."
  type        = string
  default     = null
}

variable "peer_discovery_enabled" {
  description = "Turn peer discovery on."
  type        = bool
  default     = true
}

variable "wait" {
  description = "Wait for the Deployment to be ready."
  type        = bool
  default     = true
}
