#!/usr/bin/env bash
# Creates the kind cluster of the e2e suite (if absent) behind a network fence: a
# DOCKER-USER rule that drops forwarded packets from the kind network to anywhere
# outside it, installed before the cluster starts (until kube-proxy has synced, packets
# to ClusterIPs would otherwise leave the machine). KIND_NODES=3 (the default): one
# control plane and two workers, each with its own pod CIDR (the one the controller
# manager gave the Node, written into the node's bridge CNI config) and routes to the
# other nodes' pod CIDRs, so that pods on different nodes reach each other;
# KIND_NODES=1: a single node, faster. Then waits for the nodes, kube-proxy and the
# default ServiceAccount. Usage: kind-up.sh <kind> <cluster> <node-image> <state-dir>
# (node-image "" = kind's own default image, which must be pullable).
set -euo pipefail
kind=$1
cluster=$2
image=$3
state=$4
nodes=${KIND_NODES:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$state"
die() { echo "kind-up: $*" >&2; exit 1; }
case $nodes in 1 | 3) ;; *) die "KIND_NODES=$nodes: want 3 (one control plane, two workers) or 1" ;; esac
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
# Between nodes, pod traffic is bridged on the kind network with a pod IP as its
# destination (outside the subnet): let what enters and leaves by the kind bridge
# itself through, ahead of the drop. Nothing routed off the machine leaves by it.
bridge=br-$(docker network inspect kind -f '{{.Id}}' | cut -c1-12)
bridge=$(docker network inspect kind -f '{{index .Options "com.docker.network.bridge.name"}}' | grep . || echo "$bridge")
keep=(DOCKER-USER -i "$bridge" -o "$bridge" -j RETURN)
while iptables -C "${keep[@]}" 2>/dev/null; do iptables -D "${keep[@]}"; done # first, above the drop
iptables -I "${keep[@]}" || die "cannot add the DOCKER-USER rule for traffic within the kind network"
echo "$bridge" > "$state/fence-bridge"
echo "kind-up: traffic from the kind network $subnet to anywhere outside it is dropped (DOCKER-USER)"

# The cluster's config: every node's /etc/cni/net.d is a folder of $state/cni (empty
# until the node has its pod CIDR) with 3 nodes; the node image's own single-node
# bridge config otherwise.
write_config() {
  local config=$state/kind-config-$nodes.yaml
  {
    echo "# Written by hack/kind/kind-up.sh (KIND_NODES=$nodes)."
    echo "kind: Cluster"
    echo "apiVersion: kind.x-k8s.io/v1alpha4"
    echo "networking:"
    echo "  # No kindnetd offline: the nodes carry a bridge CNI config."
    echo "  disableDefaultCNI: true"
    echo "  podSubnet: 10.244.0.0/16"
    echo "kubeadmConfigPatches:"
    echo "  - |"
    echo "    kind: KubeletConfiguration"
    echo "    failCgroupV1: false # the host is cgroup v1"
    echo "nodes:"
    local roles=(control-plane) names=("$cluster-control-plane") i
    if [ "$nodes" = 3 ]; then roles+=(worker worker); names+=("$cluster-worker" "$cluster-worker2"); fi
    for i in "${!roles[@]}"; do
      echo "  - role: ${roles[$i]}"
      if [ "$nodes" = 3 ]; then
        rm -rf "${state:?}/cni/${names[$i]}" && mkdir -p "$state/cni/${names[$i]}"
        echo "    extraMounts:"
        echo "      - {hostPath: $state/cni/${names[$i]}, containerPath: /etc/cni/net.d}"
      fi
    done
  } > "$config"
  echo "$config"
}

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
  config=$(write_config)
  if [ "$nodes" = 1 ]; then
    "$kind" create cluster --name "$cluster" --config "$config" --image "$image" --wait 3m
  else
    # Not --wait: the nodes stay NotReady (so nothing is scheduled on them) until
    # their CNI config is written below.
    "$kind" create cluster --name "$cluster" --config "$config" --image "$image"
  fi
fi
ctx="kind-$cluster"
kubeconfig="$state/kubeconfig"
"$kind" get kubeconfig --name "$cluster" > "$kubeconfig"
kubectl() { "$here/../../bin/k8s/kubectl" --kubeconfig "$kubeconfig" --context "$ctx" "$@"; }

count=$(kubectl get nodes --no-headers | wc -l)
if [ "$count" -gt 1 ]; then
  # Each node: its pod CIDR into its bridge config, and a route to every other
  # node's pod CIDR through that node's address on the kind network.
  for _ in $(seq 1 60); do
    kubectl get nodes -o jsonpath='{range .items[*]}{.spec.podCIDR}{"\n"}{end}' | grep -q '^$' || break
    sleep 1
  done
  mapfile -t table < <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
  for row in "${table[@]}"; do
    read -r name cidr ip <<< "$row"
    [ -n "$cidr" ] && [ -n "$ip" ] || die "node $name has no pod CIDR or address yet: $row"
    [ -d "$state/cni/$name" ] || die "node $name has no CNI folder $state/cni/$name (a cluster created elsewhere? make kind-down first)"
    docker exec "$name" sysctl -qw net.ipv4.ip_forward=1
    for other in "${table[@]}"; do
      read -r oname ocidr oip <<< "$other"
      [ "$oname" = "$name" ] || docker exec "$name" ip route replace "$ocidr" via "$oip"
    done
    # Pod to pod without masquerading, as real CNIs route it (peer sync admits only
    # the peers' own addresses); what leaves the pod network is masqueraded by the
    # node (as kindnetd does), not by the bridge plugin, which would hide a pod
    # behind its node's address for any destination outside the node's own /24.
    sed -e "s#10.244.0.0/24#$cidr#" -e 's#"ipMasq": true#"ipMasq": false#' "$here/node/10-bridge.conflist" > "$state/cni/$name/.10-bridge.conflist"
    docker exec "$name" sh -c 'iptables -t nat -C POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE 2>/dev/null ||
      iptables -t nat -A POSTROUTING -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE'
    mv "$state/cni/$name/.10-bridge.conflist" "$state/cni/$name/10-bridge.conflist"
    echo "kind-up: node $name: pods in $cidr, address $ip"
  done
  kubectl wait --for=condition=Ready nodes --all --timeout=3m >/dev/null || die "the nodes did not become Ready"
  # Pods on every node, the control plane included, so that 3 replicas spread over 3.
  kubectl taint nodes --all node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
fi
kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=3m >/dev/null ||
  die "kube-proxy did not become ready"
for _ in $(seq 1 120); do
  kubectl get serviceaccount default >/dev/null 2>&1 && break
  sleep 1
done
kubectl get serviceaccount default >/dev/null 2>&1 || die "no default ServiceAccount after 2 minutes"
echo "kind-up: cluster $cluster ready: $count node(s) (context $ctx, kubeconfig $kubeconfig)"
