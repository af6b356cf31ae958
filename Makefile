# epp-peer-discovery. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT        := $(CURDIR)
BIN         := $(ROOT)/bin
K8S_BIN     := $(BIN)/k8s
# The Kubernetes version of the control-plane binaries, from the wrapper module.
# The one place of the Kubernetes version the tests run (envtest, the local cluster,
# the kind node image, Helm's default): the k8s.io/kubernetes requirement there.
K8S_VERSION := $(shell awk '$$1=="k8s.io/kubernetes" {print $$2; exit}' hack/k8s/go.mod)
K8S_MINOR   := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_STAMP   := $(K8S_BIN)/.built-$(K8S_VERSION)
# What the tests run; the kind node image also needs kubelet, kubeadm and kube-proxy.
K8S_COMPONENTS := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
FUZZTIME    ?= 15s
# No minimization of new inputs: when -fuzztime ends while a worker minimizes one,
# the fuzzer fails with "context deadline exceeded" (seen on FuzzState in CI). A
# failing input is still written to testdata/fuzz, as found.
FUZZFLAGS   ?= -fuzztime=$(FUZZTIME) -fuzzminimizetime=0
# Long Go builds print a line every 30 s instead of staying silent.
HEARTBEAT   := . $(ROOT)/hack/lib.sh && heartbeat
GO_TEST_FLAGS ?=

# One build configuration for every build, test and lint (static, trimmed paths), so
# that a package compiled for one of them is reused by the others from the build
# cache instead of being compiled again per flag set (the upstream EPP's dependencies
# are the bulk of a cold run).
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(shell go env GOFLAGS) -trimpath)

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
demo: e2e-demo-tools ## Show it working: the chart with peer discovery on a local control plane, scaled 3 -> 5 -> 2 and a pod deleted.
	cd e2e && go run ./demo

##@ Build
.PHONY: build
build: ## Build bin/epp.
	@echo "building bin/epp"
	@$(HEARTBEAT) env CGO_ENABLED=0 go build -trimpath -o $(BIN)/epp ./controller/cmd/epp

.PHONY: k8s
k8s: $(K8S_STAMP) ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler into bin/k8s (once; ~8 min cold).

$(K8S_STAMP): hack/k8s/go.mod hack/k8s/go.sum $(foreach c,$(K8S_COMPONENTS),hack/k8s/cmd/$(c)/main.go) hack/k8s/build.sh
	hack/k8s/build.sh $(K8S_BIN) $(K8S_COMPONENTS)
	rm -f $(K8S_BIN)/.built-* && touch $@

##@ llm-d-router's EPP
# llmdrouter/ builds against upstream llm-d-router at the version its go.mod requires:
# the module proxy's copy where it is served, else the pinned tree of
# ../shared/upstream, substituted through bin/llmdrouter.work (never a committed
# replace). hack/llmdrouter.sh says more.
LLMD_WORK     := $(BIN)/llmdrouter.work
LLMD_EPP      := $(BIN)/epp-llmd
LLMD_IMAGE    ?= epp-peer-discovery/llm-d-router-epp:$(shell awk '$$1=="appVersion:" {gsub(/"/,"",$$2); print $$2}' charts/epp/Chart.yaml)
LLMD_GO       := GOWORK=$(LLMD_WORK) CGO_ENABLED=0 go

.PHONY: llmdrouter-work
llmdrouter-work: ## Write bin/llmdrouter.work, which builds llmdrouter/ with upstream llm-d-router (the proxy's, else the pinned tree).
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && hack/llmdrouter.sh work $(LLMD_WORK) "$$tree"

.PHONY: build-llmd
build-llmd: llmdrouter-work ## Build bin/epp-llmd: llm-d-router's EPP with peer discovery (llmdrouter/cmd/epp; a few minutes cold).
	@echo "building bin/epp-llmd (llmdrouter/cmd/epp)"
	@cd llmdrouter && $(HEARTBEAT) env $(LLMD_GO) build -trimpath -o $(LLMD_EPP) ./cmd/epp

.PHONY: image-llmd
image-llmd: build-llmd ## Build the image of bin/epp-llmd FROM scratch (/app/epp, as upstream's image) with docker.
	hack/image.sh $(LLMD_EPP) $(LLMD_IMAGE) Dockerfile.llmd

.PHONY: llmdrouter-tidy
llmdrouter-tidy: ## go mod tidy llmdrouter/ against the upstream tree, keeping go.sum right for users (with upstream's proxy lines).
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && hack/llmdrouter.sh tidy "$$tree"

.PHONY: verify-llmdrouter-tidy
verify-llmdrouter-tidy: ## Fail when llmdrouter/go.mod or go.sum is not what make llmdrouter-tidy writes.
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && hack/llmdrouter.sh verify-tidy "$$tree"

.PHONY: test-llmdrouter
test-llmdrouter: k8s build-llmd ## llmdrouter/: the plugins, the wiring, the real EPP binary as three replicas on envtest, a fresh module that imports it.
	cd llmdrouter && EPP_LLMD_BIN=$(LLMD_EPP) $(LLMD_GO) test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./...

.PHONY: test-upstream-patch
test-upstream-patch: k8s ## Apply llmdrouter/patches to a copy of the pinned upstream tree and run upstream's cmd/epp/runner tests with it.
	hack/llmdrouter.sh patch-test $(BIN)/upstream-patched

##@ Test
.PHONY: test
test: lint k8s test-unit test-fuzz test-integration test-llmdrouter test-upstream-patch bench-live-smoke bench-sync-smoke bench-routing-smoke bench-capacity-smoke test-manifests test-terraform e2e-local e2e-scale ## Run every test tier (the README's test command).

.PHONY: test-unit
test-unit: ## Unit tests (no API server).
	go test $(GO_TEST_FLAGS) -count=1 $$(go list ./controller/... | grep -v '/controller/integration\|/controller/faults')

.PHONY: test-fuzz
test-fuzz: llmdrouter-work ## Fuzz the peer-set computation, its incremental State against it, the peers-file parser, the peer-sync wire (messages, values, broadcasts) the shared prefix index's placements and exchanges, and the fleet metrics' shares, FUZZTIME each (default 15s).
	hack/fuzz.sh ./controller/peerset FuzzCompute $(FUZZFLAGS)
	hack/fuzz.sh ./controller/peerset FuzzState $(FUZZFLAGS)
	hack/fuzz.sh ./controller/peerfile FuzzParse $(FUZZFLAGS)
	hack/fuzz.sh ./controller/peersync/internal/wire FuzzParseState $(FUZZFLAGS)
	hack/fuzz.sh ./controller/peersync/internal/wire FuzzDecodeValue $(FUZZFLAGS)
	hack/fuzz.sh ./controller/peersync/internal/wire FuzzParseBroadcast $(FUZZFLAGS)
	cd llmdrouter && GOWORK=$(LLMD_WORK) ../hack/fuzz.sh ./sharedprefix FuzzParsePlacement $(FUZZFLAGS)
	cd llmdrouter && GOWORK=$(LLMD_WORK) ../hack/fuzz.sh ./sharedprefix FuzzExchangeMessage $(FUZZFLAGS)
	cd llmdrouter && GOWORK=$(LLMD_WORK) ../hack/fuzz.sh ./fleetmetrics FuzzDecodeShare $(FUZZFLAGS)

.PHONY: test-integration
test-integration: k8s ## Integration tests on a real kube-apiserver and etcd (envtest): the wiring, a host manager, bin/epp black-box, and faults (refused, reset, black-holed, TLS, 5xx, Role removed, API server restart, 50 replicas against a stopped server).
	go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./controller/integration/... ./controller/faults/... ./internal/...

.PHONY: test-manifests
test-manifests: k8s build $(BIN)/helm $(BIN)/helm4 helm-plugin ## Helm chart and kustomize: renders, schema, lint, parity (with each other, and the EPP container with upstream's chart's), acceptance + RBAC on a real API server, and upstream's chart through epp post-render (Helm 3 and the Helm 4 plugin).
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && cd charts && UPSTREAM_TREE="$$tree" EPP_BIN=$(BIN)/epp \
	  HELM3_BIN=$(BIN)/helm HELM4_BIN=$(BIN)/helm4 HELM_PLUGIN_DIR=$(HELM_PLUGIN) go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./...
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && cd kustomize && UPSTREAM_TREE="$$tree" go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./...

.PHONY: test-terraform
test-terraform: k8s terraform-providers terraform-bin ## Terraform module: fmt, validate, terraform test, validation messages, apply/destroy on a real API server (the EPP container beside upstream's chart's).
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && cd terraform && UPSTREAM_TREE="$$tree" TF_CLI_CONFIG_FILE=$(TF_RC) go test $(GO_TEST_FLAGS) -count=1 -timeout=20m ./...

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

##@ End to end
HELM_VERSION := $(shell awk '$$1=="helm.sh/helm/v3" {print $$2; exit}' e2e/go.mod)
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(K8S_MINOR) \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(K8S_MINOR)
E2E_TIMEOUT ?= 40m

$(BIN)/helm: e2e/go.mod
	@echo "building helm $(HELM_VERSION) (the e2e/go.mod tool) into bin/helm"
	@$(HEARTBEAT) env CGO_ENABLED=0 go -C e2e build -trimpath -ldflags "$(HELM_LDFLAGS)" -o $@ helm.sh/helm/v3/cmd/helm

# Helm 4, for the upstream-chart route's tests (the post-renderer as a plugin),
# pinned as the tool of hack/tools/helm4. Its version is an -ldflags variable as in
# Helm 3; its default Kubernetes version (.Capabilities.KubeVersion) is not: Helm 4
# derives it from the k8s.io/client-go version in the binary's build info
# (internal/version.K8sIOClientGoModVersion), v0.37 -> v1.37, so it follows go.mod.
HELM4_VERSION = $(call tool_version,helm.sh/helm/v4,helm4)
HELM4_LDFLAGS = -s -w -X helm.sh/helm/v4/internal/version.version=$(HELM4_VERSION)

$(BIN)/helm4: hack/tools/helm4/go.mod
	@echo "building helm $(HELM4_VERSION) (hack/tools/helm4) into bin/helm4"
	@$(HEARTBEAT) env CGO_ENABLED=0 go -C hack/tools/helm4 build -trimpath -ldflags "$(HELM4_LDFLAGS)" -o $@ helm.sh/helm/v4/cmd/helm

.PHONY: helm4
helm4: $(BIN)/helm4 ## Build Helm 4 (hack/tools/helm4) into bin/helm4.

HELM_PLUGIN := $(BIN)/helm-plugin/epp-post-render

.PHONY: helm-plugin
helm-plugin: build ## Build the Helm 4 post-renderer plugin epp-post-render (plugin.yaml and bin/epp) into bin/helm-plugin/epp-post-render; install it with `helm plugin install <that folder>`.
	@mkdir -p $(HELM_PLUGIN)
	cp charts/epp-post-render/plugin.yaml $(HELM_PLUGIN)/plugin.yaml
	cp $(BIN)/epp $(HELM_PLUGIN)/epp

$(BIN)/kwok $(BIN)/kwok-stages.yaml: hack/kwok.sh
	hack/kwok.sh $(BIN)/kwok $(BIN)/kwok-stages.yaml

.PHONY: e2e-tools
e2e-tools: build build-llmd k8s $(BIN)/helm $(BIN)/helm4 helm-plugin $(BIN)/kwok terraform-providers terraform-bin ## Build what the end-to-end suite runs: bin/epp, bin/epp-llmd, the control plane, kubectl, helm (3 and 4, with the plugin), kwok, Terraform providers.

.PHONY: e2e-demo-tools
e2e-demo-tools: build build-llmd k8s $(BIN)/helm $(BIN)/kwok

.PHONY: e2e-local
e2e-local: e2e-tools ## End to end on a local control plane (no Docker): llm-d-router's EPP by Helm, kustomize, Terraform and upstream's chart with epp post-render (Helm 3, and Helm 4's plugin); peer discovery on, off and in a sidecar.
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && cd e2e && UPSTREAM_TREE="$$tree" TF_CLI_CONFIG_FILE=$(TF_RC) E2E_BACKEND=local go test -tags e2e -count=1 -v -timeout=$(E2E_TIMEOUT) ./...

.PHONY: e2e-scale
e2e-scale: e2e-demo-tools ## 1,000 KWOK pods behind the Service plus 3 real replicas on the local control plane: created, then a rolling restart; every replica must list exactly the others (a few minutes).
	cd e2e && go test -tags e2escale -count=1 -v -timeout=30m ./scale

IMAGE        ?= epp-peer-discovery/epp:$(shell awk '$$1=="appVersion:" {gsub(/"/,"",$$2); print $$2}' charts/epp/Chart.yaml)
KIND_VERSION ?= v0.33.0
KIND         := $(BIN)/kind
KIND_CLUSTER ?= epp-e2e
# Empty: kind's own node image where it is here or can be pulled, else the offline one.
KIND_NODE_IMAGE ?=
# 3: one control plane and two workers (the reachability checks need them); 1: faster.
KIND_NODES ?= 3
OFFLINE_NODE_IMAGE := epp-peer-discovery/kind-node:$(K8S_VERSION)
DOCKER_STATE := $(ROOT)/.cache/docker
KIND_STATE   := $(ROOT)/.cache/kind
export KIND_VERSION KIND_NODE_IMAGE KIND_NODES OFFLINE_NODE_IMAGE
# The engine docker-up started (recursively expanded, so a recipe sees it once written).
DOCKER_HOST ?= $(shell cat $(DOCKER_STATE)/host 2>/dev/null)
export DOCKER_HOST

$(BIN)/epp-runc: $(wildcard hack/kind/runcwrap/*.go)
	CGO_ENABLED=0 go build -trimpath -o $@ ./hack/kind/runcwrap

.PHONY: docker-up
docker-up: $(BIN)/epp-runc ## Make sure a Docker engine answers: else install docker.io (apt) and start dockerd under .cache/docker (root).
	hack/kind/docker-up.sh $(DOCKER_STATE) $(BIN)/epp-runc

.PHONY: docker-down
docker-down: ## Stop the dockerd that docker-up started (by PID), nothing else.
	hack/kind/docker-down.sh $(DOCKER_STATE)

.PHONY: kind-node-image
kind-node-image: docker-up ## Build the offline kind node image (the Kubernetes version of hack/k8s/go.mod) from the Go module proxy and Debian.
	hack/kind/node-image.sh $(OFFLINE_NODE_IMAGE)

.PHONY: image
image: build ## Build the epp image FROM scratch (no base image pull) with docker.
	hack/image.sh $(BIN)/epp $(IMAGE)

$(KIND):
	@echo "building kind $(KIND_VERSION) from the Go module proxy into bin/kind"
	@$(HEARTBEAT) env GOBIN=$(BIN) CGO_ENABLED=0 go install sigs.k8s.io/kind@$(KIND_VERSION)

.PHONY: kind
kind: $(KIND) ## Build kind from the Go module proxy into bin/kind.

.PHONY: kind-up
kind-up: docker-up kind k8s ## Create the kind cluster KIND_CLUSTER (KIND_NODES=3 nodes, or 1) behind a DOCKER-USER fence; wait for the nodes and kube-proxy.
	hack/kind/kind-up.sh $(KIND) $(KIND_CLUSTER) "$(KIND_NODE_IMAGE)" $(KIND_STATE)

.PHONY: kind-down
kind-down: ## Delete the kind cluster and remove the DOCKER-USER fence.
	hack/kind/kind-down.sh $(KIND) $(KIND_CLUSTER) $(KIND_STATE)

.PHONY: e2e-kind
e2e-kind: e2e-tools kind $(BIN)/epp-runc ## End to end on kind: docker-up, kind-up, the images (epp, llm-d-router's EPP), the suite, then kind-down/docker-down (KEEP_CLUSTER=1 keeps them).
	@tree=$$(hack/llmdrouter.sh upstream $(BIN)/upstream) && UPSTREAM_TREE="$$tree" \
	  KIND=$(KIND) KIND_CLUSTER=$(KIND_CLUSTER) IMAGE=$(IMAGE) LLMD_IMAGE=$(LLMD_IMAGE) E2E_TIMEOUT=$(E2E_TIMEOUT) TF_CLI_CONFIG_FILE=$(TF_RC) \
	  DOCKER_STATE=$(DOCKER_STATE) KIND_STATE=$(KIND_STATE) EPP_BIN=$(BIN)/epp LLMD_EPP=$(LLMD_EPP) LLMD_WORK=$(LLMD_WORK) hack/kind/e2e.sh

##@ Quality
# Go modules of the repository: the library (root), the llm-d-router module and the
# nested test modules.
GO_MODULES := . llmdrouter e2e charts kustomize terraform
# Tools, each pinned as the `tool` of a module of its own under hack/tools (so that
# their dependencies never mix), built into bin/ on demand.
tool_version = $(shell awk '$$1=="$(1)" {print $$2; exit}' hack/tools/$(2)/go.mod)
GOLANGCI_VERSION := $(call tool_version,github.com/golangci/golangci-lint/v2,golangci-lint)

$(BIN)/golangci-lint: hack/tools/golangci-lint/go.mod
	@echo "building golangci-lint $(GOLANGCI_VERSION) (hack/tools/golangci-lint) into bin/"
	@$(HEARTBEAT) env CGO_ENABLED=0 go -C hack/tools/golangci-lint build -trimpath -ldflags "-X main.version=$(GOLANGCI_VERSION)" -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(BIN)/helm-docs: hack/tools/helm-docs/go.mod
	@echo "building helm-docs (hack/tools/helm-docs) into bin/"
	@$(HEARTBEAT) env CGO_ENABLED=0 go -C hack/tools/helm-docs build -trimpath -o $@ github.com/norwoodj/helm-docs/cmd/helm-docs

$(BIN)/terraform-docs: hack/tools/terraform-docs/go.mod
	@echo "building terraform-docs (hack/tools/terraform-docs) into bin/"
	@$(HEARTBEAT) env CGO_ENABLED=0 go -C hack/tools/terraform-docs build -trimpath -o $@ github.com/terraform-docs/terraform-docs

.PHONY: docs
docs: $(BIN)/helm-docs $(BIN)/terraform-docs ## Generate charts/epp/README.md (helm-docs, from values.yaml's comments; its table of known differences from upstream's chart from e2e/testsupport/upstreamparity) and terraform/README.md's inputs and outputs (terraform-docs).
	go -C e2e run ./cmd/known-differences $(ROOT)/charts/epp/README.md.gotmpl
	$(BIN)/helm-docs --chart-search-root charts --skip-version-footer --sort-values-order file --log-level warning
	$(BIN)/terraform-docs markdown table --output-file README.md --output-mode inject --sort-by required terraform

.PHONY: verify-docs
verify-docs: $(BIN)/helm-docs $(BIN)/terraform-docs ## Fail when the generated chart or Terraform README is stale (and regenerate it).
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	  cp charts/epp/README.md $$tmp/chart.md 2>/dev/null || touch $$tmp/chart.md; cp charts/epp/README.md.gotmpl $$tmp/chart.gotmpl; cp terraform/README.md $$tmp/tf.md; \
	  $(MAKE) --no-print-directory docs >/dev/null; \
	  stale=0; for f in charts/epp/README.md:chart.md charts/epp/README.md.gotmpl:chart.gotmpl terraform/README.md:tf.md; do \
	    if ! cmp -s "$${f%%:*}" "$$tmp/$${f##*:}"; then echo "stale generated docs: $${f%%:*} (now regenerated: review and commit it)"; stale=1; fi; \
	  done; exit $$stale

.PHONY: docs-reference
docs-reference: ## Write docs/REFERENCE.md's generated tables (the epp flags, the sources' settings, the peer-syncer's and shared prefix index's parameters, the metrics) from the code (hack/docgen).
	go run ./hack/docgen -write docs/REFERENCE.md

.PHONY: verify-reference
verify-reference: ## Fail when docs/REFERENCE.md's generated tables differ from the code (run make docs-reference).
	@go run ./hack/docgen docs/REFERENCE.md

.PHONY: verify-quotes
verify-quotes: ## Fail when README.md or docs/SHARING-STATE.md quotes the routing or capacity bench's headline otherwise than docs/PERFORMANCE.md, where make bench-routing and make bench-capacity wrote it (hack/docquote).
	@go run ./hack/docquote -source docs/PERFORMANCE.md -marker routing-headline README.md docs/SHARING-STATE.md
	@go run ./hack/docquote -source docs/PERFORMANCE.md -marker capacity-headline README.md

.PHONY: verify-generated
verify-generated: ## Fail when a section a benchmark generated (docs/PERFORMANCE.md) is not what it wrote (its stamp's hash: a hand edit) or has no stamp; name, without failing, the sections whose measured code (llmdrouter/, controller/peersync) changed since the commit they measured (hack/docstamp).
	@go run ./hack/docstamp README.md docs/*.md

.PHONY: verify-architecture
verify-architecture: ## Fail when a Go package of controller/, internal/, llmdrouter/ or hack/ is not in docs/ARCHITECTURE.md's package table, or the table names one that does not exist (hack/docpkgs, and its test).
	@go test -count=1 ./hack/docpkgs
	@go run ./hack/docpkgs -doc docs/ARCHITECTURE.md controller internal llmdrouter hack

.PHONY: verify-links
verify-links: ## Fail when a link of README.md, docs/*.md or another README (a file, or a heading's #anchor) does not resolve (hack/doclinks).
	@go run ./hack/doclinks README.md docs/*.md charts/epp/README.md terraform/README.md llmdrouter/patches/README.md

.PHONY: set-version
set-version: ## Set the release version everywhere it appears (VERSION=x.y.z): the chart's version and appVersion, kustomize's images and version label, the root module version llmdrouter/ requires.
	@[ -n "$(VERSION)" ] || { echo "usage: make set-version VERSION=x.y.z"; exit 2; }
	hack/release.sh set $(VERSION)
	$(MAKE) docs

.PHONY: release
release: ## Tag a release (VERSION=x.y.z, after set-version is committed): vX.Y.Z (root module) and llmdrouter/vX.Y.Z on HEAD; local tags, never pushed. Refuses a tree with changes or a version set-version has not written.
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=x.y.z"; exit 2; }
	hack/release.sh tag $(VERSION)

.PHONY: lint
lint: $(BIN)/golangci-lint llmdrouter-work verify-modgraph verify-docs verify-reference verify-quotes verify-generated verify-links verify-architecture verify-llmdrouter-tidy ## golangci-lint (.golangci.yml: vet, staticcheck, gofmt, ...) on every Go module, the module-graph check, the generated docs (chart, Terraform, docs/REFERENCE.md, the routing bench's headline where it is quoted, the benches' sections against their stamps), the docs' links, docs/ARCHITECTURE.md's package table against the tree and llmdrouter/'s tidy go.mod (terraform fmt is checked by test-terraform).
	@for m in $(GO_MODULES); do echo "golangci-lint: $$m"; vars="GOWORK=off"; [ $$m = llmdrouter ] && vars="GOWORK=$(LLMD_WORK) CGO_ENABLED=0"; \
	  (cd $$m && env $$vars $(BIN)/golangci-lint run --config $(ROOT)/.golangci.yml ./...) || exit 1; done

.PHONY: fmt
fmt: $(BIN)/golangci-lint llmdrouter-work ## Format the Go code of every module (gofmt, goimports) as make lint expects.
	@for m in $(GO_MODULES); do vars="GOWORK=off"; [ $$m = llmdrouter ] && vars="GOWORK=$(LLMD_WORK) CGO_ENABLED=0"; \
	  (cd $$m && env $$vars $(BIN)/golangci-lint fmt --config $(ROOT)/.golangci.yml ./...) || exit 1; done

.PHONY: verify-modgraph
verify-modgraph: ## Fail when the root module's graph holds Helm, kustomize, terratest, Terraform or cloud SDK modules.
	hack/check-modgraph.sh

.PHONY: bench
bench: ## Micro-benchmarks: the peer-set computation, the /debug/peers rendering, and peer-sync's Get (steady and first after a change), receive and push beside a mutex-and-map reference (figures in docs/PERFORMANCE.md).
	go test -run='^$$' -bench=. -benchmem -count=6 ./controller/peerset ./controller/debugpeers | tee $(BIN)/bench.txt
	go test -run='^$$' -bench='BenchmarkGet$$|BenchmarkGetAfterChange|BenchmarkReceive|BenchmarkTick' -benchmem -count=3 ./controller/peersync | tee -a $(BIN)/bench.txt

.PHONY: bench-live
bench-live: build build-llmd k8s ## epp, a plain client-go informer and llm-d-router's EPP with the plugin, side by side on one real API server at 3/100/1,000/10,000 peers; writes the tables to docs/PERFORMANCE.md (~15 min).
	cd llmdrouter && $(LLMD_GO) build -o $(BIN)/benchlive-reference ./bench/live/reference
	cd llmdrouter && $(LLMD_GO) run ./bench/live --epp=$(BIN)/epp --reference=$(BIN)/benchlive-reference --llmd=$(LLMD_EPP) --write=$(ROOT)/docs/PERFORMANCE.md

.PHONY: bench-live-smoke
bench-live-smoke: build build-llmd k8s ## A short bench-live (3 and 100 peers, one run) that fails when epp or llm-d-router's EPP makes API reads per change or takes a second to show one.
	cd llmdrouter && $(LLMD_GO) build -o $(BIN)/benchlive-reference ./bench/live/reference
	cd llmdrouter && $(LLMD_GO) run ./bench/live --smoke --epp=$(BIN)/epp --reference=$(BIN)/benchlive-reference --llmd=$(LLMD_EPP)

.PHONY: bench-sync
bench-sync: k8s llmdrouter-work ## peer-syncer beside upstream's LocalSyncer: 3/10/30 replica processes × 100/1,000 endpoints on a real API server (CPU, bytes per push, visibility); writes docs/PERFORMANCE.md (~6 min).
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/syncbench ./bench/sync
	$(BIN)/syncbench run --write=$(ROOT)/docs/PERFORMANCE.md

.PHONY: bench-sync-smoke
bench-sync-smoke: k8s llmdrouter-work ## A short bench-sync (3 replicas, 100 endpoints, both syncers) that fails when peer-syncer does not share state.
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/syncbench ./bench/sync
	$(BIN)/syncbench run --smoke --replicas=3 --endpoints=100 --window=3s --warmup=1s

# Extra flags of routingbench run (e.g. BENCH_ROUTING_FLAGS="--seeds=1 --scale=0.5")
# and routingbench capacity (e.g. BENCH_CAPACITY_FLAGS="--rates=20,40,60").
BENCH_ROUTING_FLAGS ?=
BENCH_CAPACITY_FLAGS ?=

.PHONY: bench-routing
bench-routing: k8s build-llmd ## Routing quality: llm-d-router's EPP as 1 replica against 3 and 8 (LocalSyncer, peer-syncer, the shared prefix index on both profiles) on 8 simulated vLLM servers, 2 workloads × 2 sizes × 5 seeds (2 for the controls), 3 replicas through faults and a rolling restart, then the section under load (make bench-routing-load, about 23 min); writes docs/PERFORMANCE.md (and its headline into README.md and docs/SHARING-STATE.md) and docs/routing-bench.svg (its last run 50m43s before the section under load; three rolling restarts a configuration; BENCH_ROUTING_FLAGS=--quick for iteration).
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/routingbench ./bench/routing
	$(BIN)/routingbench run --epp=$(LLMD_EPP) --write=$(ROOT)/docs/PERFORMANCE.md --quote=$(ROOT)/README.md,$(ROOT)/docs/SHARING-STATE.md --plot=$(ROOT)/docs/routing-bench.svg $(BENCH_ROUTING_FLAGS)

.PHONY: bench-routing-load
bench-routing-load: k8s build-llmd ## The routing bench's section under load alone: shared scraping against every replica scraping for itself at 3 and 8 replicas, on the multi-turn workload that exceeds the caches at 1.25 times its rate (the servers near saturation) for 3 times as long, 10 seeds, each configuration on a fleet of its own in turns; writes its section of docs/PERFORMANCE.md (its last run 22m48s; make bench-routing runs it too).
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/routingbench ./bench/routing
	$(BIN)/routingbench run --load-only --epp=$(LLMD_EPP) --write=$(ROOT)/docs/PERFORMANCE.md $(BENCH_ROUTING_FLAGS)

.PHONY: bench-capacity
bench-capacity: k8s build-llmd ## Capacity: llm-d-router's EPP at 1, 3 and 8 replicas (one replica, with and without the shared prefix index; LocalSyncer, peer-syncer, the shared prefix index on both profiles, with shared scraping, and on both profiles as one replica of N at the full rate, its N-1 peers emulated, each on a clock of its own) under open-loop load at 5 rates, model servers that answer at once, each configuration in rounds beside a one-replica reference, in 3 passes of fresh processes; the marginal CPU per request (the slope of CPU against rate, every replica's), requests per core, scaling efficiency paired by round with the spread between passes, the cost of a request at each rate, scrapes per server; then the scrape load (8 replicas scraping 32 servers' vLLM pages every second against 8 sharing the scrapes, idle CPU paired by window); writes docs/PERFORMANCE.md (and its headline into README.md) and docs/capacity-bench.svg (its last run 54 min; not in make test).
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/routingbench ./bench/routing
	$(BIN)/routingbench capacity --epp=$(LLMD_EPP) --write=$(ROOT)/docs/PERFORMANCE.md --quote=$(ROOT)/README.md --plot=$(ROOT)/docs/capacity-bench.svg $(BENCH_CAPACITY_FLAGS)

.PHONY: bench-capacity-smoke
bench-capacity-smoke: k8s build-llmd ## A short bench-capacity (one replica, and one of 3 whose 2 peers are emulated on either profile; 2 rates, 2 passes of 2 rounds of 1 s windows; a scrape load of 3 replicas on 4 servers; ~1.5 min) that fails when a request is not answered, the replica did not merge 2 of its peers' placements for each of its own (or its peers did not push the in-flight load it pushes), or shared scraping reads a server more often than one replica would.
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/routingbench ./bench/routing
	$(BIN)/routingbench capacity --epp=$(LLMD_EPP) --configs=single,shared-index-loaded,shared-index-loaded-state-sync --replicas=3 --rates=100,200 --rounds=2 --passes=2 --window=1s \
		--scrape-servers=4 --scrape-replicas=3 --scrape-refresh=200ms --scrape-windows=2 --scrape-window=1s

.PHONY: bench-routing-smoke
bench-routing-smoke: k8s build-llmd ## A short bench-routing (multi-turn that fits, 1 replica, 3 with LocalSyncer and 3 with the shared prefix index on both profiles, one seed; then 3 replicas sharing the index, scraping for themselves and sharing scrapes, on the loaded workload at its base rate; ~2 min) that fails when a request is not routed and answered, the servers' token counts differ from the generator's, one replica's hit rate is not above halfway from prefix-blind routing's to the ceiling, a placement of the shared index was not merged by every peer, or the shared index on either profile does not beat LocalSyncer's hit rate by 0.07.
	cd llmdrouter && $(LLMD_GO) build -trimpath -o $(BIN)/routingbench ./bench/routing
	$(BIN)/routingbench run --smoke --epp=$(LLMD_EPP) --configs=single,local,shared-index-default,shared-index --replicas=3 --workloads=multi-turn --sizes=fits --seeds=1 --restart= --faults= \
		--load-replicas=3 --load-seeds=1 --load-factor=1 --load-length=1

.PHONY: clean
clean: ## Remove bin/ except the Kubernetes binaries.
	find $(BIN) -mindepth 1 -maxdepth 1 ! -name k8s -exec rm -rf {} +
