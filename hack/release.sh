#!/usr/bin/env bash
# One version for everything a release ships: the chart (version, appVersion), the
# kustomize images and version label, the root module's version that llmdrouter/
# requires, and the two Go module tags, vX.Y.Z (the root module) and
# llmdrouter/vX.Y.Z (the nested module), on one commit.
#
#   hack/release.sh set <x.y.z>     write the version everywhere it appears (make set-version)
#   hack/release.sh check <x.y.z>   fail, naming the file, where a place says another version
#   hack/release.sh tag <x.y.z>     check, then create both tags on HEAD (make release): local,
#                                   annotated tags only, never pushed; refuses a working tree
#                                   with changes or a tag that exists on another commit
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
ROOT_MODULE=$(awk '$1=="module" {print $2; exit}' go.mod)
NESTED=llmdrouter
CHART=charts/epp/Chart.yaml
HELM_PLUGIN=charts/epp-post-render/plugin.yaml
KUSTOMIZATIONS=(kustomize/base/kustomization.yaml kustomize/components/peer-discovery-sidecar/kustomization.yaml kustomize/overlays/sidecar/kustomization.yaml)

die() { echo "release: $*" >&2; exit 1; }

valid() {
  local v=$1
  [ -n "$v" ] || die "no version: make set-version VERSION=x.y.z, make release VERSION=x.y.z"
  case "$v" in
    v*) die "VERSION=$v: give it without the v (x.y.z); the tags add it" ;;
  esac
  [[ "$v" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
    die "VERSION=$v is not a semantic version x.y.z (or x.y.z-pre)"
  # Go: a module tagged v2 or later needs /vN at the end of its path.
  [ "${BASH_REMATCH[1]}" -lt 2 ] ||
    die "VERSION=$v: major version ${BASH_REMATCH[1]} needs the module paths to end in /v${BASH_REMATCH[1]} (Go's semantic import versioning)"
}

set_version() {
  local v=$1
  (cd "$NESTED" && GOWORK=off go mod edit -require="$ROOT_MODULE@v$v")
  sed -i -E 's/^(version: ).*/\1'"$v"'/; s/^(appVersion: ).*/\1"'"$v"'"/' "$CHART"
  sed -i -E 's/^(version: )[^ ]*/\1'"$v"'/' "$HELM_PLUGIN"
  sed -i -E 's/(newTag: )"[^"]*"/\1"'"$v"'"/; s/(app.kubernetes.io\/version: )"[^"]*"/\1"'"$v"'"/' "${KUSTOMIZATIONS[@]}"
}

# check lists every place whose version is not v, and fails if there is one.
check() {
  local v=$1 bad=() got f
  got=$(awk '$1=="version:" {print $2; exit}' "$CHART")
  [ "$got" = "$v" ] || bad+=("$CHART version is ${got:-missing}")
  got=$(awk '$1=="appVersion:" {gsub(/"/,"",$2); print $2; exit}' "$CHART")
  [ "$got" = "$v" ] || bad+=("$CHART appVersion is ${got:-missing}")
  got=$(awk '$1=="version:" {print $2; exit}' "$HELM_PLUGIN")
  [ "$got" = "$v" ] || bad+=("$HELM_PLUGIN version is ${got:-missing}")
  local key
  for f in "${KUSTOMIZATIONS[@]}"; do
    while read -r key got; do
      [ "$got" = "$v" ] || bad+=("$f $key is ${got:-empty}")
    done < <(sed -n -E 's/.*(newTag|app\.kubernetes\.io\/version): "([^"]*)".*/\1 \2/p' "$f")
  done
  got=$(awk -v m="$ROOT_MODULE" '$1==m && NF>=2 {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$NESTED/go.mod")
  [ "$got" = "v$v" ] || bad+=("$NESTED/go.mod requires $ROOT_MODULE ${got:-at no version}")
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'release: not everything says %s:\n' "$v" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "  (make set-version VERSION=$v writes them all; commit that, then make release VERSION=$v)" >&2
    exit 1
  fi
}

tag() {
  local v=$1 head t at
  git rev-parse --git-dir >/dev/null 2>&1 || die "$ROOT is not a git repository"
  if [ -n "$(git status --porcelain)" ]; then
    git status --short >&2
    die "the working tree has changes (above): a tag names a commit, so commit or stash them first"
  fi
  check "$v"
  head=$(git rev-parse HEAD)
  local tags=("v$v" "$NESTED/v$v") create=()
  for t in "${tags[@]}"; do
    if at=$(git rev-parse -q --verify "refs/tags/$t^{commit}"); then
      [ "$at" = "$head" ] || die "tag $t exists on $at, not on HEAD ($head): both modules are tagged on one commit (delete it with git tag -d $t if it was never pushed)"
    else
      create+=("$t")
    fi
  done
  if [ ${#create[@]} -eq 0 ]; then
    echo "release: v$v and $NESTED/v$v already tag HEAD ($head)"
    return 0
  fi
  for t in "${create[@]}"; do
    git tag -a "$t" -m "epp-peer-discovery $t" "$head"
  done
  echo "release: tagged $head as ${tags[*]} (local tags; publish them with: git push origin ${tags[*]})"
}

case "${1:-}" in
  set) valid "${2:-}"; set_version "$2" ;;
  check) valid "${2:-}"; check "$2" ;;
  tag) valid "${2:-}"; tag "$2" ;;
  *) echo "usage: $0 set|check|tag <x.y.z>" >&2; exit 2 ;;
esac
