#!/usr/bin/env bash
# hack/fuzz.sh <package> <FuzzTarget> [go test flags...]: fuzz one target, failing on
# every failing input found, but not on Go's own shutdown race: with a duration
# -fuzztime, the fuzzing coordinator can end a run with a bare "context deadline
# exceeded" when a worker has not answered by the deadline (seen on loaded 2-core
# machines; no input is written). Such a run counts only when no new input appeared
# under testdata/fuzz/<FuzzTarget> and the whole corpus, replayed, still passes.
set -uo pipefail
pkg=$1 target=$2
shift 2
dir="$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target"
listing() { ls -1 "$dir" 2>/dev/null | LC_ALL=C sort; }
before=$(listing)
out=$(go test -run='^$' -fuzz="^${target}\$" "$@" "$pkg" 2>&1)
code=$?
printf '%s\n' "$out"
[ "$code" = 0 ] && exit 0
if [ "$(listing)" = "$before" ] && printf '%s\n' "$out" | grep -qx '[[:space:]]*context deadline exceeded'; then
  echo "fuzz: $target: Go's fuzzing coordinator missed its own -fuzztime deadline (no failing input was written): replaying the corpus"
  go test -count=1 -run="^${target}\$" "$pkg" && exit 0
fi
exit "$code"
