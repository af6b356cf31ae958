output "namespace" {
  description = "Namespace of the EPP."
  value       = module.epp.namespace
}

output "release_name" {
  description = "Name of the Helm release."
  value       = module.epp.release_name
}

output "service_name" {
  description = "Name of the EPP Service."
  value       = module.epp.service_name
}

output "role_name" {
  description = "Name of the peer discovery Role, null when off."
  value       = module.epp.role_name
}
