locals {
  chart_path = coalesce(var.chart_path, "${path.module}/../charts/epp")

  # The values this module hands to the chart; null leaves the chart's default.
  chart_values = {
    router = merge(var.model_server_labels == null ? {} : { modelServers = { matchLabels = var.model_server_labels } }, {
      tracing = {
        enabled              = var.tracing_enabled
        otelExporterEndpoint = var.tracing_otel_exporter_endpoint
        sampling = {
          sampler    = var.tracing_sampler
          samplerArg = tostring(var.tracing_sampler_arg)
        }
      }
      epp = {
        replicas = var.replicas
        image = {
          repository = var.image_repository
          tag        = var.image_tag
        }
        command        = var.epp_command
        args           = var.epp_args
        leaderElection = var.leader_election
        # EnvVar objects without the null attributes of the variable's type.
        env = [for e in var.extra_env : merge(
          { name = e.name },
          e.value == null ? {} : { value = e.value },
          e.valueFrom == null ? {} : {
            valueFrom = { for src, ref in e.valueFrom : src => { for k, v in ref : k => v if v != null } if ref != null }
          },
        )]
        peerDiscovery = {
          enabled       = var.peer_discovery_enabled
          source        = var.peer_discovery_source
          serviceName   = var.peer_service_name
          portName      = var.peer_port_name
          port          = var.peer_port
          membership    = var.peer_membership
          mode          = var.peer_discovery_mode
          probeInterval = var.peer_probe_interval
          networkPolicy = { enabled = var.peer_network_policy }
        }
        stateSync = {
          enabled           = var.state_sync_enabled
          interval          = var.state_sync_interval
          tls               = { secretName = var.state_sync_tls_secret_name }
          sharedPrefixIndex = { enabled = var.shared_prefix_index_enabled }
          sharedScraping    = { enabled = var.shared_scraping_enabled }
        }
      }
    })
  }
}

resource "kubernetes_namespace_v1" "this" {
  count = var.create_namespace ? 1 : 0

  metadata {
    name   = var.namespace
    labels = var.namespace_labels
  }
}

resource "helm_release" "this" {
  name       = var.release_name
  namespace  = var.create_namespace ? kubernetes_namespace_v1.this[0].metadata[0].name : var.namespace
  chart      = var.chart_repository == null ? local.chart_path : "epp"
  repository = var.chart_repository
  version    = var.chart_version

  # Later documents win, key by key: the caller's values override the module's.
  values = [
    yamlencode(local.chart_values),
    yamlencode(var.values),
  ]

  wait            = var.wait
  timeout         = var.timeout
  atomic          = var.atomic
  cleanup_on_fail = true

  lifecycle {
    precondition {
      condition     = !var.state_sync_enabled || var.peer_discovery_enabled
      error_message = "state_sync_enabled needs peer_discovery_enabled = true: the syncer shares state with the discovered peers."
    }
    precondition {
      condition     = !var.shared_prefix_index_enabled || var.state_sync_enabled
      error_message = "shared_prefix_index_enabled needs state_sync_enabled = true: the index travels over the syncer's peer-sync connections."
    }
    precondition {
      condition     = !var.shared_scraping_enabled || var.state_sync_enabled
      error_message = "shared_scraping_enabled needs state_sync_enabled = true: the metrics travel over the syncer's peer-sync connections."
    }
    precondition {
      condition     = !var.tracing_enabled || !var.peer_discovery_enabled || var.peer_discovery_mode == "epp"
      error_message = "tracing_enabled needs peer_discovery_mode = \"epp\": it sets the flag and env of llm-d-router's EPP, and in sidecar mode the EPP container is yours (set its tracing in epp_args and extra_env)."
    }
    precondition {
      condition     = !var.state_sync_enabled || var.peer_discovery_mode == "epp"
      error_message = "state_sync_enabled needs peer_discovery_mode = \"epp\": the syncer is a plugin of llm-d-router's EPP."
    }
  }
}
