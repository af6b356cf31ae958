#!/usr/bin/env bash
# Creates the single-node kind cluster of the e2e suite (if absent) behind a network
# fence: a DOCKER-USER rule that drops forwarded packets from the kind network to
# anywhere outside it, installed before the cluster starts (until kube-proxy has synced,
# packets to ClusterIPs would otherwise leave the machine). Then waits for kube-proxy and
# the default ServiceAccount. Usage: kind-up.sh <kind> <cluster> <node-image> <state-dir>
# (node-image "" = kind's own default image, which must be pullable).
set -euo pipefail
kind=$1
cluster=$2
image=$3
state=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$state"
die() { echo "kind-up: $*" >&2; exit 1; }
command -v iptables >/dev/null 2>&1 || die "iptables is missing: it is needed to fence the kind network (apt-get install iptables)"

if ! docker network inspect kind >/dev/null 2>&1; then
  docker network create -d bridge -o com.docker.network.bridge.enable_ip_masquerade=true kind >/dev/null
  touch "$state/created-network"
fi
subnet=$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Subnet}}{{"\n"}}{{end}}' | grep -v : | head -1)
[ -n "$subnet" ] || die "the kind docker network has no IPv4 subnet"
rule=(DOCKER-USER -s "$subnet" ! -d "$subnet" -j DROP)
iptables -C "${rule[@]}" 2>/dev/null || iptables -I "${rule[@]}" || die "cannot add the DOCKER-USER rule that keeps kind traffic on this machine (root needed)"
echo "$subnet" > "$state/fence-subnet"
echo "kind-up: traffic from the kind network $subnet to anywhere outside it is dropped (DOCKER-USER)"

if ! "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
  if [ -z "$image" ]; then
    # kind's own node image where it is here or can be pulled, else the offline one.
    default=$(sed -n 's/^const Image = "\([^@"]*\).*/\1/p' "$(cd "$here/../.." && go mod download -json "sigs.k8s.io/kind@${KIND_VERSION:-v0.33.0}" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')/pkg/apis/config/defaults/image.go")
    if docker image inspect "$default" >/dev/null 2>&1 || timeout 60 docker pull "$default" >/dev/null 2>&1; then
      image=$default
    else
      echo "kind-up: kind's node image $default cannot be pulled here; using the offline node image"
      image=${OFFLINE_NODE_IMAGE:?}
    fi
  fi
  if [ "$image" = "${OFFLINE_NODE_IMAGE:-}" ]; then
    "$here/node-image.sh" "$image" # builds it when missing or out of date
  fi
  docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image" >/dev/null 2>&1 ||
    die "node image $image is missing and cannot be pulled: build the offline one with make kind-node-image"
  "$kind" create cluster --name "$cluster" --config "$here/kind-config.yaml" --image "$image" --wait 3m
fi
ctx="kind-$cluster"
kubeconfig="$state/kubeconfig"
"$kind" get kubeconfig --name "$cluster" > "$kubeconfig"
kubectl() { "$here/../../bin/k8s/kubectl" --kubeconfig "$kubeconfig" --context "$ctx" "$@"; }
kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=3m >/dev/null ||
  die "kube-proxy did not become ready"
for _ in $(seq 1 120); do
  kubectl get serviceaccount default >/dev/null 2>&1 && break
  sleep 1
done
kubectl get serviceaccount default >/dev/null 2>&1 || die "no default ServiceAccount after 2 minutes"
echo "kind-up: cluster $cluster ready (context $ctx, kubeconfig $kubeconfig)"
