#!/usr/bin/env bash
# Drains the worker that runs the most node pods (kubectl drain evicts them through the
# PodDisruptionBudget; each evicted pod relocates its objects on SIGTERM and the operator
# replaces it), waits until the Mesh is Ready again, then uncordons the worker.
#
#   e2e/kind/drain.sh
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kubectl

node="$(k -n "$NS" get pods -l "zlink.io/mesh=$MESH" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
    sort | uniq -c | sort -rn | awk 'NR == 1 {print $2}')"
[[ -n "$node" ]] || die "no node pod of Mesh $MESH is scheduled"
log "draining $node"
k drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout="${TIMEOUT}s"
wait_mesh_ready "$(mesh_version)"
log "uncordoning $node"
k uncordon "$node"
