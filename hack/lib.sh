# Shared by the hack/ scripts. Source it: . "$(dirname "$0")/lib.sh"

# heartbeat CMD...: runs CMD and, while it runs, prints a line every 30 s so that a
# long build shows progress instead of silence. Returns CMD's exit code.
heartbeat() {
  local start pid elapsed
  start=$(date +%s)
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    elapsed=$(( $(date +%s) - start ))
    if [ $(( elapsed % 30 )) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "  ... still building ($((elapsed / 60))m$((elapsed % 60))s)" >&2
    fi
  done
  wait "$pid"
}
