#!/usr/bin/env bash
# Deletes the cluster, the DOCKER-USER fence rule and the kind network if kind-up
# created them. Usage: kind-down.sh <kind> <cluster> <state-dir>
set -euo pipefail
kind=$1
cluster=$2
state=$3
if [ -x "$kind" ] && "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
  "$kind" delete cluster --name "$cluster"
fi
if [ -f "$state/created-network" ]; then
  docker network rm kind >/dev/null 2>&1 || true
  rm -f "$state/created-network"
fi
if [ -f "$state/fence-subnet" ]; then
  subnet=$(cat "$state/fence-subnet")
  while iptables -C DOCKER-USER -s "$subnet" ! -d "$subnet" -j DROP 2>/dev/null; do
    iptables -D DOCKER-USER -s "$subnet" ! -d "$subnet" -j DROP
  done
  rm -f "$state/fence-subnet"
  echo "kind-down: removed the DOCKER-USER rule for $subnet"
fi
if [ -f "$state/fence-bridge" ]; then
  bridge=$(cat "$state/fence-bridge")
  while iptables -C DOCKER-USER -i "$bridge" -o "$bridge" -j RETURN 2>/dev/null; do
    iptables -D DOCKER-USER -i "$bridge" -o "$bridge" -j RETURN
  done
  rm -f "$state/fence-bridge"
fi
rm -rf "${state:?}/cni"
rm -f "$state/kubeconfig"
