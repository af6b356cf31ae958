#!/usr/bin/env bash
# Builds an image FROM scratch from a static binary with docker.
# Usage: image.sh <binary> <tag> [<Dockerfile in hack/image>, default Dockerfile]
set -euo pipefail
bin=$1
tag=$2
dockerfile=${3:-Dockerfile}
if ! command -v docker >/dev/null 2>&1; then
  echo "make image: docker is missing: install Docker (Debian: apt-get install docker.io)" >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "make image: no Docker engine answers at ${DOCKER_HOST:-/var/run/docker.sock}: start a Docker engine (dockerd); without root or Docker, use make e2e-local" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/epp"
cp "$(dirname "$0")/image/$dockerfile" "$ctx/Dockerfile"
out=$(docker build -t "$tag" "$ctx" 2>&1) || { echo "$out" >&2; exit 1; }
echo "built image $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
