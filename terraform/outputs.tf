output "namespace" {
  description = "Namespace of the EPP."
  value       = helm_release.this.namespace
}

output "release_name" {
  description = "Name of the Helm release."
  value       = helm_release.this.name
}

output "service_name" {
  description = "Name of the EPP Service (its EndpointSlices are the peer source unless peer_service_name is set)."
  value       = local.fullname
}

output "role_name" {
  description = "Name of the peer discovery Role (endpointslices get/list/watch); null when peer discovery is off."
  value       = var.peer_discovery_enabled ? "${local.fullname}-peer-discovery" : null
}
