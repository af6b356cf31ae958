#!/usr/bin/env bash
# Builds OpenTofu (a drop-in `terraform` CLI) from the Go module proxy into $1, for
# machines without terraform. OpenTofu's go.mod has a replace directive, so
# `go install` refuses it; build inside a writable copy of the downloaded module.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
out=$1
version=${TOFU_VERSION:-v1.10.10}
mod=github.com/opentofu/opentofu
echo "building OpenTofu $version from the Go module proxy into $out (about 3.5 minutes cold)" >&2
start=$(date +%s)
src=$(go mod download -json "$mod@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || { echo "tofu.sh: go mod download $mod@$version gave no folder" >&2; exit 1; }
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
mkdir -p "$(dirname "$out")"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
(cd "$work" && CGO_ENABLED=0 heartbeat go build -trimpath \
  -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
  -o "$out_abs" ./cmd/tofu)
echo "built $("$out_abs" version | head -1) in $(( $(date +%s) - start ))s" >&2
