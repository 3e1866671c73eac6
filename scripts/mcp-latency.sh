#!/usr/bin/env bash
# Measures the latency the MCP gateway adds to a tools/call that a rule
# approves at submission: the official TypeScript SDK (e2e/mcp-ts, npm ci
# there first) calls the example upstream's add over Streamable HTTP
# directly and through each console given, the targets alternating call by
# call in one run (e2e/mcp-ts/latency.mjs). Each console serves its own
# fresh data folder with the mirrored add under the rule small-sums.
#
#   scripts/mcp-latency.sh CALLS NAME=CONSOLE_BINARY...
#
# e.g. against an older commit:
#   git worktree add --detach /tmp/mcp-start START && (cd /tmp/mcp-start && go build -o /tmp/mcp-lat/start ./cmd/console)
#   go build -o /tmp/mcp-lat/end ./cmd/console
#   scripts/mcp-latency.sh 200 start=/tmp/mcp-lat/start end=/tmp/mcp-lat/end
#
# PAUSE_MS=N waits N ms after each call (e2e/mcp-ts/latency.mjs).
# PPROF=1 also serves each console's profiler on a free loopback port
# (printed). Work files go to $OUT (default /tmp/mcp-latency).
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:?usage: scripts/mcp-latency.sh CALLS NAME=CONSOLE_BINARY...}
shift
[ $# -gt 0 ] || { echo "name at least one console binary" >&2; exit 2; }
OUT=${OUT:-/tmp/mcp-latency}
rm -rf "$OUT" && mkdir -p "$OUT"
go build -o "$OUT/mcp-demo" ./examples/mcpdemo/cmd/mcp-demo

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

up_port=$(free_port)
"$OUT/mcp-demo" --http "127.0.0.1:$up_port" > "$OUT/mcp-demo.log" 2>&1 &
pids+=($!)
direct="http://127.0.0.1:$up_port/mcp"

gateways=()
for spec in "$@"; do
  name=${spec%%=*}
  bin=${spec#*=}
  d="$OUT/$name"
  mkdir -p "$d"
  # Only the mirrored tools: the file reads the same for older binaries.
  { printf 'mcp:\n  demo:\n    url: %s\n    tools:\n      add:\n        auto_approve: allowed\n        rules:\n          - {id: small-sums, when: "args.a < 100 && args.b < 100", then: approve}\n' "$direct"
  } > "$d/tools.yaml"
  port=$(free_port)
  extra=()
  if [ -n "${PPROF:-}" ]; then
    pp=$(free_port)
    extra=(--pprof "127.0.0.1:$pp")
    echo "$name: profiler on http://127.0.0.1:$pp/debug/pprof/" >&2
  fi
  "$bin" serve --addr "127.0.0.1:$port" --data "$d" --tools "$d/tools.yaml" --log-level warn \
    --trust-first-definitions "${extra[@]}" > "$d.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do grep -q "listening on" "$d.log" && break; sleep 0.1; done
  grep -q "listening on" "$d.log" || { echo "$name did not start:" >&2; cat "$d.log" >&2; exit 1; }
  "$bin" token create --data "$d" --actor agent:latency --audience demo > "$OUT/token.$name"
  gateways+=("$name=http://127.0.0.1:$port/mcp/demo")
done

# The upstream's tools are pinned once each console has connected to it.
for g in "${gateways[@]}"; do
  name=${g%%=*}
  url=${g#*=}
  for _ in $(seq 1 300); do
    out=$(curl -s -X POST "$url" -H "Authorization: Bearer $(cat "$OUT/token.$name")" \
      -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}' -D - || true)
    sid=$(printf '%s' "$out" | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
    if [ -n "$sid" ] && curl -s -X POST "$url" -H "Authorization: Bearer $(cat "$OUT/token.$name")" \
      -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -H "Mcp-Session-Id: $sid" -H 'Mcp-Protocol-Version: 2025-11-25' \
      -d '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}' | grep -q '"name":"add"'; then
      break
    fi
    sleep 0.1
  done
done

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
(cd e2e/mcp-ts && node latency.mjs "$CALLS" "$OUT/token" "$direct" "${gateways[@]}")
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
