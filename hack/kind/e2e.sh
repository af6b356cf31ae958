#!/usr/bin/env bash
# make e2e-kind: a Docker engine (docker-up), the kind cluster (kind-up), the images of
# epp and of llm-d-router's EPP with the plugin loaded into it, the end-to-end suite against the kind context, then kind-down and
# docker-down for what this run started, unless KEEP_CLUSTER=1.
set -euo pipefail
: "${KIND:?}" "${KIND_CLUSTER:?}" "${IMAGE:?}" "${LLMD_IMAGE:?}" "${E2E_TIMEOUT:?}" "${DOCKER_STATE:?}" "${KIND_STATE:?}" "${EPP_BIN:?}" "${LLMD_EPP:?}"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

running() { [ -f "$DOCKER_STATE/dockerd.pid" ] && kill -0 "$(cat "$DOCKER_STATE/dockerd.pid")" 2>/dev/null; }
docker_started=0
running || docker_started=1 # if docker-up starts one now, this run stops it
"$here/docker-up.sh" "$DOCKER_STATE" "$root/bin/epp-runc"
running || docker_started=0 # an engine that was already there is never stopped
DOCKER_HOST=$(cat "$DOCKER_STATE/host")
if [ -n "$DOCKER_HOST" ]; then export DOCKER_HOST; else unset DOCKER_HOST; fi

cluster_existed=0
"$KIND" get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER" && cluster_existed=1
cleanup() {
  code=$?
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    echo "e2e-kind: KEEP_CLUSTER=1: cluster $KIND_CLUSTER and dockerd kept (make kind-down docker-down removes them)" >&2
  else
    [ "$cluster_existed" = 1 ] || "$here/kind-down.sh" "$KIND" "$KIND_CLUSTER" "$KIND_STATE" || true
    [ "$docker_started" = 0 ] || "$here/docker-down.sh" "$DOCKER_STATE" || true
  fi
  exit $code
}
trap cleanup EXIT
"$here/kind-up.sh" "$KIND" "$KIND_CLUSTER" "${KIND_NODE_IMAGE:-}" "$KIND_STATE"
"$root/hack/image.sh" "$EPP_BIN" "$IMAGE"
"$root/hack/image.sh" "$LLMD_EPP" "$LLMD_IMAGE" Dockerfile.llmd
"$KIND" load docker-image --name "$KIND_CLUSTER" "$IMAGE" "$LLMD_IMAGE"
E2E_BACKEND=kind E2E_KUBECONFIG="$KIND_STATE/kubeconfig" E2E_KUBE_CONTEXT="kind-$KIND_CLUSTER" \
  go -C "$root/e2e" test -tags e2e -count=1 -v -timeout="$E2E_TIMEOUT" ./...
# State sync on the real EPP across the nodes (llmdrouter/e2ekind: it needs the
# llm-d-router module, built through the go.work that substitutes the pinned tree).
E2E_KUBECONFIG="$KIND_STATE/kubeconfig" E2E_KUBE_CONTEXT="kind-$KIND_CLUSTER" HELM="$root/bin/helm" CHART="$root/charts/epp" \
  IMAGE="$IMAGE" LLMD_IMAGE="$LLMD_IMAGE" GOWORK="${LLMD_WORK:?}" CGO_ENABLED=0 \
  go -C "$root/llmdrouter" test -tags e2ekind -count=1 -v -timeout=15m ./e2ekind
