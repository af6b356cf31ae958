# Plan-level tests of what the module hands to the chart. The providers are mocked:
# no cluster is contacted (the provider binaries are still needed by terraform init).
mock_provider "helm" {}
mock_provider "kubernetes" {}

variables {
  namespace = "team-a"
}

run "peer_discovery_is_off_by_default" {
  command = plan

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery.enabled == false
    error_message = "peerDiscovery.enabled must be false by default"
  }
  assert {
    condition     = helm_release.this.name == "epp" && helm_release.this.namespace == "team-a"
    error_message = "release epp must go to team-a"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.replicas == 3
    error_message = "replicas must default to 3"
  }
  assert {
    condition     = length(kubernetes_namespace_v1.this) == 0
    error_message = "no namespace is created unless create_namespace is true"
  }
}

run "peer_discovery_on" {
  command = plan

  variables {
    peer_discovery_enabled = true
  }

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery == {
      enabled       = true
      source        = "endpointslice"
      serviceName   = null
      portName      = "peer-sync"
      port          = 9005
      membership    = "ready"
      mode          = "epp"
      probeInterval = ""
      networkPolicy = { enabled = false }
    }
    error_message = "peer discovery on must hand enabled=true with the default port to the chart"
  }
}

run "custom_service_and_port" {
  command = plan

  variables {
    peer_discovery_enabled = true
    peer_service_name      = "epp-peers"
    peer_port_name         = "state-sync"
    peer_port              = 7000
    peer_membership        = "alive"
    release_name           = "router"
  }

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery == {
      enabled       = true
      source        = "endpointslice"
      serviceName   = "epp-peers"
      portName      = "state-sync"
      port          = 7000
      membership    = "alive"
      mode          = "epp"
      probeInterval = ""
      networkPolicy = { enabled = false }
    }
    error_message = "custom service, port name and port must reach the chart"
  }
}

run "extra_env_and_values" {
  command = plan

  variables {
    extra_env = [
      { name = "MODE", value = "fast" },
      { name = "HF_TOKEN", valueFrom = { secretKeyRef = { name = "hf", key = "token" } } },
    ]
    values = { router = { epp = { flags = { zap-log-level = "debug" } } } }
  }

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.epp.env == [
      { name = "MODE", value = "fast" },
      { name = "HF_TOKEN", valueFrom = { secretKeyRef = { name = "hf", key = "token" } } },
    ]
    error_message = "extra_env must reach the chart as EnvVar objects without null fields"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[1]).router.epp.flags["zap-log-level"] == "debug"
    error_message = "values must be passed through after the module's own"
  }
}

run "create_namespace" {
  command = plan

  variables {
    create_namespace = true
    namespace_labels = { "pod-security.kubernetes.io/enforce" = "restricted" }
  }

  assert {
    condition     = kubernetes_namespace_v1.this[0].metadata[0].name == "team-a"
    error_message = "create_namespace must create the namespace"
  }
}

run "dns_source_leader_election_and_model_servers" {
  command = plan

  variables {
    peer_discovery_enabled = true
    peer_discovery_source  = "dns"
    leader_election        = true
    model_server_labels    = { app = "vllm" }
  }

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery.source == "dns"
    error_message = "peer_discovery_source must reach the chart"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.leaderElection == true
    error_message = "leader_election must reach the chart"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.modelServers.matchLabels == { app = "vllm" }
    error_message = "model_server_labels must reach the chart as router.modelServers.matchLabels"
  }
}

run "model_servers_default_to_the_chart" {
  command = plan

  assert {
    condition     = !contains(keys(yamldecode(helm_release.this.values[0]).router), "modelServers")
    error_message = "without model_server_labels the chart's default must stay"
  }
  assert {
    condition     = helm_release.this.atomic == false && helm_release.this.repository == null
    error_message = "atomic off and a local chart by default"
  }
}

run "chart_from_a_repository_atomic" {
  command = plan

  variables {
    chart_repository = "oci://registry.example.com/charts"
    chart_version    = "0.1.0"
    atomic           = true
  }

  assert {
    condition     = helm_release.this.chart == "epp" && helm_release.this.repository == "oci://registry.example.com/charts" && helm_release.this.version == "0.1.0"
    error_message = "chart_repository and chart_version must name the chart"
  }
  assert {
    condition     = helm_release.this.atomic == true
    error_message = "atomic must reach the release"
  }
}

run "accepts_a_compound_probe_interval" {
  command = plan
  variables {
    peer_probe_interval = "1m30s"
  }
}

run "rejects_a_probe_interval_below_100ms" {
  command = plan
  variables {
    peer_probe_interval = "50ms"
  }
  expect_failures = [var.peer_probe_interval]
}

run "rejects_a_probe_interval_of_zero" {
  command = plan
  variables {
    peer_probe_interval = "0"
  }
  expect_failures = [var.peer_probe_interval]
}

run "rejects_a_probe_interval_of_zero_seconds" {
  command = plan
  variables {
    peer_probe_interval = "0s"
  }
  expect_failures = [var.peer_probe_interval]
}

run "rejects_an_unknown_source" {
  command = plan
  variables {
    peer_discovery_source = "gossip"
  }
  expect_failures = [var.peer_discovery_source]
}

run "rejects_a_bad_namespace" {
  command = plan
  variables {
    namespace = "Team_A"
  }
  expect_failures = [var.namespace]
}

run "rejects_zero_replicas" {
  command = plan
  variables {
    replicas = 0
  }
  expect_failures = [var.replicas]
}

run "rejects_port_70000" {
  command = plan
  variables {
    peer_port = 70000
  }
  expect_failures = [var.peer_port]
}

run "rejects_an_unknown_membership" {
  command = plan
  variables {
    peer_membership = "leader"
  }
  expect_failures = [var.peer_membership]
}

run "rejects_a_bad_port_name" {
  command = plan
  variables {
    peer_port_name = "Peer_Sync"
  }
  expect_failures = [var.peer_port_name]
}

run "rejects_a_bad_service_name" {
  command = plan
  variables {
    peer_service_name = "9epp"
  }
  expect_failures = [var.peer_service_name]
}

run "rejects_env_with_value_and_valueFrom" {
  command = plan
  variables {
    extra_env = [{ name = "X", value = "1", valueFrom = { fieldRef = { fieldPath = "metadata.name" } } }]
  }
  expect_failures = [var.extra_env]
}

run "rejects_env_with_two_sources" {
  command = plan
  variables {
    extra_env = [{ name = "X", valueFrom = { fieldRef = { fieldPath = "metadata.name" }, secretKeyRef = { name = "s", key = "k" } } }]
  }
  expect_failures = [var.extra_env]
}

run "sidecar_mode" {
  command = plan

  variables {
    peer_discovery_enabled = true
    peer_discovery_mode    = "sidecar"
    image_repository       = "example.com/my-epp"
    image_tag              = "1.0"
    epp_args               = ["--config=/etc/epp.yaml"]
  }

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery.mode == "sidecar"
    error_message = "peer_discovery_mode must reach the chart"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.args == ["--config=/etc/epp.yaml"] && yamldecode(helm_release.this.values[0]).router.epp.image.repository == "example.com/my-epp"
    error_message = "the EPP's image and args must reach the chart"
  }
}

run "probing_and_network_policy" {
  command = plan

  variables {
    peer_discovery_enabled = true
    peer_probe_interval    = "5s"
    peer_network_policy    = true
  }

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery.probeInterval == "5s"
    error_message = "peer_probe_interval must reach the chart"
  }
  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.peerDiscovery.networkPolicy.enabled == true
    error_message = "peer_network_policy must reach the chart"
  }
}

run "rejects_a_probe_interval_without_a_unit" {
  command = plan
  variables {
    peer_probe_interval = "5"
  }
  expect_failures = [var.peer_probe_interval]
}

run "rejects_an_unknown_mode" {
  command = plan
  variables {
    peer_discovery_mode = "daemon"
  }
  expect_failures = [var.peer_discovery_mode]
}

# The outputs come from the release (its metadata: name, namespace and the values it
# got), so they are checked after an apply; the mocked provider returns the metadata
# Helm would, here written out.
run "outputs_follow_the_release" {
  command = apply

  variables {
    peer_discovery_enabled = true
    release_name           = "router"
  }
  override_resource {
    target = helm_release.this
    values = {
      metadata = {
        name        = "router"
        namespace   = "team-a"
        app_version = "0.1.0"
        values      = "{\"router\":{\"epp\":{\"peerDiscovery\":{\"enabled\":true}}}}"
      }
    }
  }

  assert {
    condition     = output.service_name == "router-epp" && output.role_name == "router-epp-peer-discovery" && output.release_name == "router" && output.namespace == "team-a"
    error_message = "release router must give Service router-epp and Role router-epp-peer-discovery"
  }
}

run "outputs_follow_values_that_override_the_variables" {
  command = apply
  # A new release, not an update of the one above (a mock keeps computed values on update).
  plan_options {
    replace = [helm_release.this]
  }

  variables {
    peer_discovery_enabled = true
    values                 = { router = { epp = { peerDiscovery = { enabled = false }, fullnameOverride = "gateway" } } }
  }
  override_resource {
    target = helm_release.this
    values = {
      metadata = {
        name        = "epp"
        namespace   = "team-a"
        app_version = "0.1.0"
        values      = "{\"router\":{\"epp\":{\"fullnameOverride\":\"gateway\",\"peerDiscovery\":{\"enabled\":false}}}}"
      }
    }
  }

  assert {
    condition     = output.role_name == null && output.service_name == "gateway"
    error_message = "values that turn peer discovery off and rename the objects must show in the outputs"
  }
}

run "state_sync_on" {
  command = plan

  variables {
    peer_discovery_enabled     = true
    state_sync_enabled         = true
    state_sync_interval        = "100ms"
    state_sync_tls_secret_name = "epp-peer-sync-tls"
  }

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.epp.stateSync == {
      enabled           = true
      interval          = "100ms"
      tls               = { secretName = "epp-peer-sync-tls" }
      sharedPrefixIndex = { enabled = false }
      sharedScraping    = { enabled = false }
    }
    error_message = "state sync on must hand enabled=true, the interval and the TLS Secret to the chart"
  }
}

run "state_sync_is_off_by_default" {
  command = plan

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.stateSync.enabled == false
    error_message = "stateSync.enabled must be false by default"
  }
}

run "tracing_is_off_by_default" {
  command = plan

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.tracing == {
      enabled              = false
      otelExporterEndpoint = "http://localhost:4317"
      sampling             = { sampler = "parentbased_traceidratio", samplerArg = "0.1" }
    }
    error_message = "tracing must be off by default, with upstream's endpoint and sampler"
  }
}

run "tracing_on" {
  command = plan

  variables {
    tracing_enabled                = true
    tracing_otel_exporter_endpoint = "http://otel-collector.monitoring:4317"
    tracing_sampler_arg            = 0.25
  }

  assert {
    condition = yamldecode(helm_release.this.values[0]).router.tracing == {
      enabled              = true
      otelExporterEndpoint = "http://otel-collector.monitoring:4317"
      sampling             = { sampler = "parentbased_traceidratio", samplerArg = "0.25" }
    }
    error_message = "tracing on must hand enabled=true, the endpoint and the sampler's share to the chart"
  }
}

run "rejects_a_tracing_endpoint_without_a_scheme" {
  command = plan

  variables {
    tracing_otel_exporter_endpoint = "otel-collector:4317"
  }

  expect_failures = [var.tracing_otel_exporter_endpoint]
}

run "rejects_a_sampler_share_above_1" {
  command = plan

  variables {
    tracing_sampler_arg = 10
  }

  expect_failures = [var.tracing_sampler_arg]
}

run "rejects_a_sampler_the_epp_does_not_implement" {
  command = plan

  variables {
    tracing_sampler = "always_on"
  }

  expect_failures = [var.tracing_sampler]
}

run "shared_prefix_index_on" {
  command = plan

  variables {
    peer_discovery_enabled      = true
    state_sync_enabled          = true
    shared_prefix_index_enabled = true
  }

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.stateSync.sharedPrefixIndex == { enabled = true }
    error_message = "shared_prefix_index_enabled must hand stateSync.sharedPrefixIndex.enabled=true to the chart"
  }
}

run "shared_prefix_index_is_off_by_default" {
  command = plan

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.stateSync.sharedPrefixIndex.enabled == false
    error_message = "stateSync.sharedPrefixIndex.enabled must be false by default"
  }
}

run "rejects_the_shared_prefix_index_without_state_sync" {
  command = plan

  variables {
    peer_discovery_enabled      = true
    shared_prefix_index_enabled = true
  }

  expect_failures = [helm_release.this]
}

run "shared_scraping_on" {
  command = plan

  variables {
    peer_discovery_enabled  = true
    state_sync_enabled      = true
    shared_scraping_enabled = true
  }

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.stateSync.sharedScraping == { enabled = true }
    error_message = "shared_scraping_enabled must hand stateSync.sharedScraping.enabled=true to the chart"
  }
}

run "shared_scraping_is_off_by_default" {
  command = plan

  assert {
    condition     = yamldecode(helm_release.this.values[0]).router.epp.stateSync.sharedScraping.enabled == false
    error_message = "stateSync.sharedScraping.enabled must be false by default"
  }
}

run "rejects_shared_scraping_without_state_sync" {
  command = plan

  variables {
    peer_discovery_enabled  = true
    shared_scraping_enabled = true
  }

  expect_failures = [helm_release.this]
}
