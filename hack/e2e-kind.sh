#!/usr/bin/env bash
# Runs the end-to-end suite on kind: checks what it needs (failing at once with one
# line that names what is missing), creates the cluster if absent, loads the epp
# image, runs the suite against the kind context, and deletes the cluster unless
# KEEP_CLUSTER=1. Usage: e2e-kind.sh (the Makefile sets the variables below).
set -euo pipefail
: "${KIND:?}" "${KIND_CLUSTER:?}" "${IMAGE:?}" "${E2E_TIMEOUT:?}"
node_image=${KIND_NODE_IMAGE:-}

die() { echo "make e2e-kind: $*" >&2; exit 1; }
command -v docker >/dev/null 2>&1 || die "docker is missing: install Docker (Debian: apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "no Docker engine answers at ${DOCKER_HOST:-/var/run/docker.sock}: start a Docker engine (dockerd); without root or Docker, use make e2e-local"
[ -x "$KIND" ] || die "kind is missing at $KIND: run make kind (builds sigs.k8s.io/kind from the Go module proxy)"
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is missing: run make image"

created=0
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  if [ -n "$node_image" ]; then
    docker image inspect "$node_image" >/dev/null 2>&1 || docker pull "$node_image" >/dev/null 2>&1 ||
      die "kind node image $node_image is missing and cannot be pulled: build one with make kind-node-image or set KIND_NODE_IMAGE"
    "$KIND" create cluster --name "$KIND_CLUSTER" --image "$node_image" --wait 2m
  else
    "$KIND" create cluster --name "$KIND_CLUSTER" --wait 2m ||
      die "kind create cluster failed (no node image could be pulled?): set KIND_NODE_IMAGE to a local node image (make kind-node-image)"
  fi
  created=1
fi
cleanup() {
  if [ "$created" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    "$KIND" delete cluster --name "$KIND_CLUSTER" >/dev/null 2>&1 || true
  elif [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    echo "KEEP_CLUSTER=1: cluster $KIND_CLUSTER kept (kind delete cluster --name $KIND_CLUSTER)" >&2
  fi
  rm -f "$kubeconfig"
}
kubeconfig=$(mktemp)
trap cleanup EXIT
"$KIND" get kubeconfig --name "$KIND_CLUSTER" > "$kubeconfig"
"$KIND" load docker-image --name "$KIND_CLUSTER" "$IMAGE"
E2E_BACKEND=kind E2E_KUBECONFIG="$kubeconfig" E2E_KUBE_CONTEXT="kind-$KIND_CLUSTER" \
  go test -tags e2e -count=1 -v -timeout="$E2E_TIMEOUT" ./e2e/...
