#!/usr/bin/env bash
# Runs CALLS calls (default 1,000,000) proposed and expired 100 days ago
# through console audit prune, in runs of at most 13,000 entries, each
# archived in an evidence pack that both verifiers check, then compacts
# the database. It prints how long each step took, the load average, the
# heap of the first prune run and of every tenth, and the space freed
# (TestAuditPruneTenThousandCalls, which make test runs with 10,000), on
# SQLite and on PostgreSQL (a throwaway cluster, or $COUNTERSIGN_TEST_POSTGRES),
# or on the one ENGINE named.
#
#   scripts/retention-bench.sh [CALLS] [sqlite|postgres]
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:-1000000}
RUN='^TestAuditPruneTenThousandCalls$'
if [ -n "${2:-}" ]; then
	RUN="$RUN/^$2\$"
fi
COUNTERSIGN_TEST_ALL=1 COUNTERSIGN_RETENTION_CALLS=$CALLS \
	go test -count=1 -v -timeout 12h -run "$RUN" ./cmd/console/ |
	grep --line-buffered -E 'load average|calls proposed|database file|removed entries|archives verified|compacted|vacuumed|^\s*(---|ok|FAIL)'
