# epp-peer-discovery. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT        := $(CURDIR)
BIN         := $(ROOT)/bin
K8S_BIN     := $(BIN)/k8s
# The Kubernetes version of the control-plane binaries, from the wrapper module.
K8S_VERSION := $(shell awk '$$1=="k8s.io/kubernetes" {print $$2; exit}' hack/k8s/go.mod)
K8S_STAMP   := $(K8S_BIN)/.built-$(K8S_VERSION)
FUZZTIME    ?= 15s
GO_TEST_FLAGS ?=

# envtest finds etcd and kube-apiserver here unless the caller points elsewhere.
export KUBEBUILDER_ASSETS ?= $(K8S_BIN)

# Terraform: the machine's terraform, else OpenTofu built into bin/tofu. Providers
# come from a filesystem mirror built from the Go module proxy; nothing calls home.
TF_MIRROR  := $(BIN)/terraform-mirror
TF_RC      := $(BIN)/terraform.rc
TERRAFORM  ?= $(shell command -v terraform 2>/dev/null || echo $(BIN)/tofu)
export TERRAFORM
export CHECKPOINT_DISABLE := 1

##@ General
.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Try it
.PHONY: demo
demo: build k8s ## Show peer discovery working: 3 epp replicas on a real API server, scaled 3 -> 5 -> 2 and a pod replaced.
	go run ./hack/demo -epp $(BIN)/epp

##@ Build
.PHONY: build
build: ## Build bin/epp.
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/epp ./controller/cmd/epp

.PHONY: k8s
k8s: $(K8S_STAMP) ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler into bin/k8s (once; ~8 min cold).

$(K8S_STAMP): hack/k8s/go.mod hack/k8s/go.sum $(wildcard hack/k8s/cmd/*/*.go) hack/k8s/build.sh
	hack/k8s/build.sh $(K8S_BIN)
	rm -f $(K8S_BIN)/.built-* && touch $@

##@ Test
.PHONY: test
test: lint k8s test-unit test-fuzz test-integration test-manifests test-terraform ## Run every test tier (the README's test command).

.PHONY: test-unit
test-unit: ## Unit tests (no API server).
	go test $(GO_TEST_FLAGS) -count=1 $$(go list ./controller/... | grep -v /controller/integration)

.PHONY: test-fuzz
test-fuzz: ## Fuzz the peer-set computation and the peers-file parser, FUZZTIME each (default 15s).
	go test -run='^$$' -fuzz=FuzzCompute -fuzztime=$(FUZZTIME) ./controller/peerset
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./controller/peerfile

.PHONY: test-integration
test-integration: k8s ## Integration tests on a real kube-apiserver and etcd (envtest), and the bin/epp black-box test.
	go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./controller/integration/...

.PHONY: test-manifests
test-manifests: k8s ## Helm chart and kustomize: renders, schema, lint, parity, and acceptance + RBAC on a real API server.
	go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./charts/... ./kustomize/...

.PHONY: test-terraform
test-terraform: k8s terraform-providers terraform-bin ## Terraform module: fmt, validate, terraform test, validation messages, apply/destroy on a real API server.
	TF_CLI_CONFIG_FILE=$(TF_RC) go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./terraform/...

.PHONY: terraform-providers
terraform-providers: $(TF_RC) ## Build the helm and kubernetes Terraform providers into a filesystem mirror (bin/terraform-mirror).

$(TF_RC): hack/terraform-providers.sh
	hack/terraform-providers.sh $(TF_MIRROR) $(TF_RC)

.PHONY: terraform-bin
terraform-bin: ## Use the machine's terraform, or build OpenTofu into bin/tofu when there is none.
	@if [ "$(TERRAFORM)" = "$(BIN)/tofu" ] && [ ! -x $(BIN)/tofu ]; then hack/tofu.sh $(BIN)/tofu; fi
	@echo "terraform: $(TERRAFORM)"

.PHONY: tofu
tofu: ## Build OpenTofu into bin/tofu (for machines without terraform).
	hack/tofu.sh $(BIN)/tofu

##@ Quality
.PHONY: lint
lint: ## go vet and a gofmt check (terraform fmt is checked by test-terraform).
	go vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/k8s/') ); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: ## Benchmarks of the peer-set computation (figures in docs/PERFORMANCE.md).
	go test -run='^$$' -bench=. -benchmem -count=6 ./controller/peerset | tee $(BIN)/bench.txt

.PHONY: clean
clean: ## Remove bin/ except the Kubernetes binaries.
	find $(BIN) -mindepth 1 -maxdepth 1 ! -name k8s -exec rm -rf {} +
