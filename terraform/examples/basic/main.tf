# The EPP with peer discovery on, deployed by the module into a cluster reached
# through a kubeconfig:
#   terraform init && terraform apply -var kubeconfig=~/.kube/config
terraform {
  required_version = ">= 1.7.0"

  required_providers {
    helm = {
      source  = "hashicorp/helm"
      version = ">= 3.0.0, < 4.0.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.31.0, < 4.0.0"
    }
  }
}

provider "kubernetes" {
  config_path    = pathexpand(var.kubeconfig)
  config_context = var.kube_context
}

provider "helm" {
  kubernetes = {
    config_path    = pathexpand(var.kubeconfig)
    config_context = var.kube_context
  }
}

module "epp" {
  source = "../.."

  namespace                      = var.namespace
  create_namespace               = var.create_namespace
  namespace_labels               = { "pod-security.kubernetes.io/enforce" = "restricted" }
  release_name                   = var.release_name
  replicas                       = var.replicas
  image_repository               = var.image_repository
  image_tag                      = var.image_tag
  peer_discovery_enabled         = var.peer_discovery_enabled
  peer_discovery_mode            = var.peer_discovery_mode
  state_sync_enabled             = var.state_sync_enabled
  shared_prefix_index_enabled    = var.shared_prefix_index_enabled
  tracing_enabled                = var.tracing_enabled
  tracing_otel_exporter_endpoint = var.tracing_otel_exporter_endpoint
  epp_args                       = var.epp_args
  values                         = var.values
  wait                           = var.wait
}
