#!/usr/bin/env bash
# Builds KWOK (a fake kubelet) from the Go module proxy into $1 and writes its stages
# configuration to $2: the node-initialize, node-heartbeat, pod-ready, pod-complete and
# pod-delete stages that the kwok module ships under kustomize/stage/ (standalone kwok
# ships none).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bin=$1
stages=$2
version=${KWOK_VERSION:-v0.8.0}
mod=sigs.k8s.io/kwok
if [ ! -x "$bin" ]; then
  echo "building kwok $version from the Go module proxy (1-2 minutes cold)" >&2
  gobin=$(mktemp -d)
  trap 'rm -rf "$gobin"' EXIT
  CGO_ENABLED=0 GOBIN="$gobin" heartbeat go install -trimpath -ldflags "-s -w" "$mod/cmd/kwok@$version"
  mkdir -p "$(dirname "$bin")"
  mv "$gobin/kwok" "$bin"
fi
dir=$(go mod download -json "$mod@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
s=$dir/kustomize/stage
{
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$s/$f"
  done
} > "$stages.tmp"
mv "$stages.tmp" "$stages"
