#!/usr/bin/env bash
# Builds a kind node image for Kubernetes v1.37.2 with no registry: every binary comes
# from the Go module proxy, the base from Debian's packages. Idempotent: each step is
# skipped when its result exists, and the image is rebuilt only when its inputs change.
# Usage: node-image.sh <node-image-tag>   (run by `make kind-node-image`; needs DOCKER_HOST)
#
# Steps (docs/DECISIONS.md says why each is needed):
#  1. binaries: kubelet, kubeadm, kube-proxy, kubectl and the control plane (hack/k8s),
#     crictl, coredns, pause, the runc wrapper;
#  2. a Debian bookworm rootfs (debootstrap, from the mirror this machine's apt uses),
#     imported as a docker image;
#  3. the node base: that rootfs plus the files and systemd steps of kind's own base
#     image, containerd 1.6 and CNI settings that work here;
#  4. component images FROM scratch tagged as kubeadm v1.37.2 expects;
#  5. the node: the base with the component images preloaded into its containerd and
#     kubeadm, kubelet, kubectl, crictl added, committed with kind's entrypoint.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/hack/lib.sh"
tag=$1
bin="$root/bin"
k8s="$bin/k8s"
nodebin="$bin/kind-node"
cache="$root/.cache/kind"
k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$root/hack/k8s/go.mod")
kind_version=${KIND_VERSION:-v0.33.0}
suite=bookworm
base_image="epp-peer-discovery/kind-base:$suite"
node_base="epp-peer-discovery/kind-node-base:$k8s_version"
mkdir -p "$nodebin" "$cache"

inputs_hash=$( (cat "$0" "$here"/node/*; echo "$k8s_version $kind_version") | sha256sum | cut -c1-16)
if docker image inspect -f '{{index .Config.Labels "epp.inputs"}}' "$tag" 2>/dev/null | grep -qx "$inputs_hash"; then
  echo "node-image: $tag is up to date"
  exit 0
fi
step() { echo "node-image: $*"; }
# dbuild ARGS...: docker build, quiet unless it fails (the legacy builder is chatty).
dbuild() {
  local out
  if ! out=$(docker build "$@" 2>&1); then
    echo "$out" >&2
    return 1
  fi
}

# 1. Binaries.
missing=()
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm kube-proxy; do
  [ -x "$k8s/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "building ${missing[*]}"
  "$root/hack/k8s/build.sh" "$k8s" "${missing[@]}"
fi
goinstall() { # name module@version
  [ -x "$nodebin/$1" ] && return 0
  step "building $1 from $2 (the Go module proxy)"
  CGO_ENABLED=0 GOBIN="$nodebin" heartbeat go install -trimpath -ldflags "-s -w" "$2"
}
goinstall crictl sigs.k8s.io/cri-tools/cmd/crictl@v1.36.0
goinstall coredns github.com/coredns/coredns@v1.14.6
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$nodebin/pause" ./hack/kind/pause)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$nodebin/epp-runc" ./hack/kind/runcwrap)

# 2. Debian rootfs.
if ! docker image inspect "$base_image" >/dev/null 2>&1; then
  mirror=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    mirror=$(awk -v s="$suite" '/^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==s) {print u; exit}}' "$f")
    [ -n "$mirror" ] && break
  done
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk -v s="$suite" '$1=="deb" && $3==s {print $2; exit}' /etc/apt/sources.list)
  fi
  [ -n "$mirror" ] || { echo "node-image: no Debian $suite mirror in this machine's apt sources" >&2; exit 1; }
  if ! command -v debootstrap >/dev/null 2>&1; then
    step "installing debootstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
  fi
  rootfs="$cache/rootfs-$suite"
  rm -rf "$rootfs"
  step "debootstrap $suite from $mirror (about 1.5 minutes)"
  heartbeat debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,ca-certificates,procps,socat,ebtables,runc,containerd,containernetworking-plugins,jq \
    "$suite" "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  step "importing the rootfs as $base_image"
  tar -C "$rootfs" --numeric-owner -c . | docker import - "$base_image" >/dev/null
  rm -rf "$rootfs"
fi

# 3. Node base.
kind_dir=$(cd "$root" && go mod download -json "sigs.k8s.io/kind@$kind_version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp -r "$kind_dir/images/base/files" "$ctx/kind-files"
chmod -R u+w "$ctx/kind-files"
cp "$here"/node/* "$ctx/"
cp "$nodebin/epp-runc" "$ctx/epp-runc"
step "building $node_base"
dbuild --build-arg "BASE=$base_image" -t "$node_base" "$ctx"

# 4. Component images, tagged as kubeadm expects.
build_component() { # tag binary-path dest-dir entrypoint base
  local c
  c=$(mktemp -d)
  cp "$2" "$c/"
  {
    echo "FROM ${5:-scratch}"
    echo "COPY $(basename "$2") $3/$(basename "$2")"
    echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    [ -n "$4" ] && echo "ENTRYPOINT [\"$4\"]"
  } > "$c/Dockerfile"
  dbuild -t "$1" "$c"
  rm -rf "$c"
}
images=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  build_component "registry.k8s.io/$c:$k8s_version" "$k8s/$c" /usr/local/bin ""
  images+=("registry.k8s.io/$c:$k8s_version")
done
build_component "registry.k8s.io/kube-proxy:$k8s_version" "$k8s/kube-proxy" /usr/local/bin "" "$base_image"
build_component "registry.k8s.io/etcd:3.7.0-0" "$k8s/etcd" /usr/local/bin ""
build_component "registry.k8s.io/coredns/coredns:v1.14.6" "$nodebin/coredns" "" "/coredns"
build_component "registry.k8s.io/pause:3.10.2" "$nodebin/pause" "" "/pause"
images+=("registry.k8s.io/kube-proxy:$k8s_version" "registry.k8s.io/etcd:3.7.0-0" "registry.k8s.io/coredns/coredns:v1.14.6" "registry.k8s.io/pause:3.10.2")
step "component images: ${images[*]}"

# 5. The node: preload the images into its containerd, add the node binaries, commit.
build=epp-kind-node-build
docker rm -f "$build" >/dev/null 2>&1 || true
docker run -d --privileged --name "$build" --entrypoint /usr/bin/containerd "$node_base" >/dev/null
trap 'rm -rf "$ctx"; docker rm -f "$build" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 30); do
  docker exec "$build" ctr version >/dev/null 2>&1 && break
  sleep 1
done
step "preloading the images into the node's containerd"
docker save "${images[@]}" | docker exec -i "$build" ctr -n k8s.io images import \
  --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
# The registry.k8s.io tags now live in the node's containerd; remove them from the
# engine so that they never shadow the published images there.
docker rmi "${images[@]}" >/dev/null
for b in kubeadm kubelet kubectl; do docker cp "$k8s/$b" "$build:/usr/bin/$b"; done
docker cp "$nodebin/crictl" "$build:/usr/local/bin/crictl"
docker exec "$build" sh -c "echo $k8s_version > /kind/version"
docker cp "$here/node/default-storage.yaml" "$build:/kind/manifests/default-storage.yaml"
docker stop -t 5 "$build" >/dev/null
docker commit \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change 'CMD []' \
  --change "LABEL epp.inputs=$inputs_hash" \
  "$build" "$tag" >/dev/null
echo "node-image: built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
