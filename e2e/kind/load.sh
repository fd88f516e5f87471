#!/usr/bin/env bash
# Runs the load generator as a Job inside the cluster (zlink-node load: numbered messages to
# many counter IDs, then a check of every ID for gaps and duplicates) and prints its report.
# The Job fails when any message was lost or applied twice.
#
#   e2e/kind/load.sh [DURATION_MS]      (default 60000; run bump.sh or drain.sh meanwhile)
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kubectl

duration="${1:-60000}"
[[ "$duration" =~ ^[0-9]+$ ]] || die "DURATION_MS must be a number of milliseconds, not '$duration'"

k -n "$NS" delete job zlink-load --ignore-not-found --wait
sed -e "s/@TAG@/$TAG/g" -e "s/@DURATION_MS@/$duration/g" "$KIND_DIR/load-job.yaml" | k -n "$NS" apply -f -
log "load running for $((duration / 1000)) s"
if k -n "$NS" wait --for=condition=complete job/zlink-load --timeout="$((duration / 1000 + TIMEOUT))s"; then
    k -n "$NS" logs job/zlink-load
    log "load: no message lost or duplicated"
else
    k -n "$NS" logs job/zlink-load >&2 || true
    die "the load Job did not complete (lost or duplicated messages, or a timeout): see its log above"
fi
