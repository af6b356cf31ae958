#!/usr/bin/env bash
# Stops the dockerd that docker-up.sh started (by the PID it wrote), nothing else.
# Usage: docker-down.sh <state-dir>
set -euo pipefail
state=$1
pidfile="$state/dockerd.pid"
rm -f "$state/host"
if [ ! -f "$pidfile" ]; then
  echo "docker-down: no dockerd started by docker-up"
  exit 0
fi
pid=$(cat "$pidfile")
if kill -0 "$pid" 2>/dev/null; then
  kill "$pid"
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "docker-down: dockerd $pid did not stop in 30s; killing it" >&2
    kill -9 "$pid" || true
  fi
fi
rm -f "$pidfile"
echo "docker-down: dockerd $pid stopped"
