#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries (and etcd) of this wrapper module into
# $1 (default ../../bin/k8s). Usage: build.sh [outdir] [component...]
# Components: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
out=$(mkdir -p "${1:-$here/../../bin/k8s}" && cd "${1:-$here/../../bin/k8s}" && pwd)
shift || true
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
minor=${version#v1.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"

pkgs=()
for c in "${components[@]}"; do pkgs+=("./cmd/$c"); done
echo "building ${components[*]} (Kubernetes $version) into $out; a cold build takes about 8 minutes on 2 cores" >&2
start=$(date +%s)
cd "$here"
CGO_ENABLED=0 heartbeat go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"
echo "built in $(( $(date +%s) - start ))s" >&2
