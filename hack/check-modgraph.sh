#!/usr/bin/env bash
# The root module is the library and the binary that Go EPPs import: its module graph
# (what `go mod graph` shows, and so what an importer's graph takes in) must not hold
# Helm, kustomize, terratest, Terraform or cloud SDK modules. Those belong to the
# nested test modules (charts/, kustomize/, terraform/, e2e/) and hack/tools.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^(helm\.sh/|sigs\.k8s\.io/kustomize/|github\.com/gruntwork-io/|github\.com/hashicorp/(terraform|hcl|go-plugin|go-getter)|github\.com/opentofu/|github\.com/aws/|github\.com/Azure/azure-sdk|cloud\.google\.com/go|google\.golang\.org/api|github\.com/golangci/)'
# golang.org/x/oauth2 (through client-go) requires the metadata client of Google's
# cloud, a single small package that nothing here imports: the one allowed exception.
allowed='^cloud\.google\.com/go/compute/metadata@'
graph=$(GOFLAGS=-mod=readonly go mod graph)
bad=$(echo "$graph" | tr ' ' '\n' | sort -u | grep -E "$forbidden" | grep -Ev "$allowed" || true)
if [ -n "$bad" ]; then
  echo "the root module's graph holds modules that importers must not get:"
  echo "$bad" | sed 's/^/  /'
  echo "required through:"
  echo "$graph" | grep -E " ($(echo "$bad" | sed 's/[.]/\\./g' | paste -sd'|'))$" | sed 's/^/  /'
  exit 1
fi
echo "module graph: $(echo "$graph" | tr ' ' '\n' | sort -u | wc -l) module versions, none of Helm, kustomize, terratest, Terraform or a cloud SDK"
