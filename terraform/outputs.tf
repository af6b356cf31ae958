# Outputs are read from the release Helm installed (its name, namespace and the
# values it was given, the module's merged with var.values), so they stay right when
# var.values overrides what the module's variables set.
locals {
  release = helm_release.this.metadata
  epp     = try(jsondecode(local.release.values).router.epp, {})

  # The chart's naming rule (templates/_helpers.tpl, "epp.name" and "epp.fullname").
  chart_name = coalesce(try(local.epp.nameOverride, null), "epp")
  fullname = trimsuffix(substr(
    coalesce(try(local.epp.fullnameOverride, null),
    strcontains(local.release.name, local.chart_name) ? local.release.name : "${local.release.name}-${local.chart_name}"),
  0, 63), "-")
  peer_discovery = try(local.epp.peerDiscovery.enabled, false)
}

output "namespace" {
  description = "Namespace of the EPP."
  value       = local.release.namespace
}

output "release_name" {
  description = "Name of the Helm release."
  value       = local.release.name
}

output "service_name" {
  description = "Name of the EPP Service (its EndpointSlices are the peer source unless peer_service_name is set)."
  value       = local.fullname
}

output "role_name" {
  description = "Name of the peer discovery Role (endpointslices get/list/watch); null when peer discovery is off."
  value       = local.peer_discovery ? trimsuffix(substr("${local.fullname}-peer-discovery", 0, 63), "-") : null
}

output "app_version" {
  description = "The chart's appVersion: the epp image tag unless image_tag is set."
  value       = local.release.app_version
}
