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
    condition     = output.role_name == null
    error_message = "role_name must be null with peer discovery off"
  }
  assert {
    condition     = output.service_name == "epp" && helm_release.this.name == "epp" && helm_release.this.namespace == "team-a"
    error_message = "release epp in team-a must give Service epp"
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
      enabled     = true
      serviceName = null
      portName    = "peer-sync"
      port        = 9005
      membership  = "ready"
    }
    error_message = "peer discovery on must hand enabled=true with the default port to the chart"
  }
  assert {
    condition     = output.role_name == "epp-peer-discovery"
    error_message = "role_name must be epp-peer-discovery"
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
      enabled     = true
      serviceName = "epp-peers"
      portName    = "state-sync"
      port        = 7000
      membership  = "alive"
    }
    error_message = "custom service, port name and port must reach the chart"
  }
  assert {
    condition     = output.service_name == "router-epp" && output.role_name == "router-epp-peer-discovery"
    error_message = "release router must give Service router-epp and Role router-epp-peer-discovery"
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
