#!/usr/bin/env bash
# Measures the whole loop (cmd/loadgen) against 1, 2 and 3 console replicas
# on one PostgreSQL server, behind loadgen's round-robin, with the server's
# commit floor measured in each run. PostgreSQL runs with its defaults
# (fsync and synchronous_commit on), from the system's binaries, as the
# postgres user in a temporary folder on a free port of 127.0.0.1.
#
#   scripts/replicas-bench.sh [FLOWS] [RUNS]
#
# Writes each run's JSON report to $OUT (default /tmp/replicas-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${1:-600}
RUNS=${2:-1}
OUT=${OUT:-/tmp/replicas-bench}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
mkdir -p "$OUT"
go build -o "$OUT/console" ./cmd/console
go build -o "$OUT/loadgen" ./cmd/loadgen

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PGDIR=$(mktemp -d /tmp/replicas-bench-pg-XXXX)
[ "$(id -u)" = 0 ] && chown postgres "$PGDIR"
PGPORT=$(free_port)
as_pg "$BIN/initdb" -D "$PGDIR/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
as_pg "$BIN/pg_ctl" start -w -D "$PGDIR/data" -l "$PGDIR/log" \
  -o "-c listen_addresses=127.0.0.1 -c port=$PGPORT -c unix_socket_directories='' -c max_connections=200" >/dev/null
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  as_pg "$BIN/pg_ctl" stop -m fast -D "$PGDIR/data" >/dev/null || true
  rm -rf "$PGDIR"
}
trap cleanup EXIT

for run in $(seq 1 "$RUNS"); do
  for n in 1 2 3; do
    db="bench_${run}_${n}"
    as_pg "$BIN/psql" -q -h 127.0.0.1 -p "$PGPORT" -U postgres -c "CREATE DATABASE $db" postgres
    url="postgres://postgres@127.0.0.1:$PGPORT/$db?sslmode=disable"
    parts=()
    dirs=()
    for i in $(seq 1 "$n"); do
      d="$OUT/r${run}-${n}-$i"; rm -rf "$d"; mkdir -p "$d"; dirs+=("$d")
      "$OUT/console" keys init --data "$d" >/dev/null
      "$OUT/console" keys jwks --data "$d" > "$d.jwks"
      parts+=("$d.jwks")
    done
    "$OUT/console" keys trust "${parts[@]}" > "$OUT/trust-${run}-${n}.json"
    urls=()
    pids=()
    for d in "${dirs[@]}"; do
      port=$(free_port)
      "$OUT/console" serve --addr "127.0.0.1:$port" --data "$d" --db "$url" --trusted-keys "$OUT/trust-${run}-${n}.json" \
        --tools examples/tools.yaml --log-level warn > "$d.log" 2>&1 &
      pids+=($!)
      urls+=("http://127.0.0.1:$port")
    done
    for u in "${urls[@]}"; do
      for _ in $(seq 1 100); do curl -sf "$u/healthz" >/dev/null && break; sleep 0.1; done
    done
    echo "== run $run, $n replica(s): ${urls[*]}"
    "$OUT/loadgen" --db "$url" --url "$(IFS=,; echo "${urls[*]}")" --flows "$FLOWS" --pending 1000 --sockets 50 --agents 8 \
      --json "$OUT/run${run}-${n}.json"
    for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
    pids=()
  done
done
