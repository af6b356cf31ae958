#!/usr/bin/env bash
# Makes sure a Docker engine answers. Where none does, installs Debian's docker.io if
# dockerd is missing and starts dockerd with its data, exec root and socket under
# <state> and the runc wrapper as the default runtime (privileged containers need it
# on machines whose capability bounding set lacks CAP_SYS_RESOURCE).
# Writes <state>/host: the DOCKER_HOST to use ("" = the default socket).
# Usage: docker-up.sh <state-dir> <runcwrap-binary>
set -euo pipefail
state=$1
wrap="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
[ -x "$wrap" ] || { echo "docker-up: runc wrapper $wrap is missing" >&2; exit 1; }
mkdir -p "$state"
state=$(cd "$state" && pwd)
sock="$state/docker.sock"
host="unix://$sock"

if [ -S "$sock" ] && DOCKER_HOST="$host" docker info >/dev/null 2>&1; then
  echo "$host" > "$state/host"
  echo "docker-up: dockerd started earlier answers at $host"
  exit 0
fi
if [ -z "${DOCKER_HOST:-}" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  : > "$state/host"
  echo "docker-up: a Docker engine already answers at the default socket; using it"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "docker-up: no Docker engine answers and starting one needs root (apt-get, dockerd): run as root, or start Docker yourself" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "docker-up: installing Debian's docker.io (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
command -v docker >/dev/null 2>&1 || { echo "docker-up: no docker client after installing docker.io" >&2; exit 1; }

rm -f "$sock" "$state/dockerd.pid"
echo "docker-up: starting dockerd (data in $state/data, log in $state/dockerd.log)"
setsid dockerd \
  --data-root "$state/data" \
  --exec-root "$state/exec" \
  --host "$host" \
  --pidfile "$state/dockerd.pid" \
  --add-runtime "epp-runc=$wrap" \
  --default-runtime epp-runc \
  >"$state/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 1 60); do
  if DOCKER_HOST="$host" docker info >/dev/null 2>&1; then
    echo "$host" > "$state/host"
    echo "docker-up: dockerd answers at $host (pid $(cat "$state/dockerd.pid"))"
    exit 0
  fi
  sleep 1
done
echo "docker-up: dockerd did not answer within 60s; last log lines:" >&2
tail -20 "$state/dockerd.log" >&2
exit 1
