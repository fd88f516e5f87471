#!/usr/bin/env bash
# Rolls the Mesh to the next application version (the same image under a higher version, as a
# rollback would be): the operator surges a new pod, relocates one old pod's objects to it,
# waits until that pod is safe and deletes it, one pod at a time.
#
#   e2e/kind/bump.sh
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kubectl

from="$(mesh_version)"
to=$((from + 1))
log "bumping Mesh $MESH from version $from to $to"
k -n "$NS" patch mesh "$MESH" --type merge -p "{\"spec\":{\"applicationVersion\":$to}}"
wait_mesh_ready "$to"
k -n "$NS" get events --field-selector "involvedObject.name=$MESH" --sort-by=.lastTimestamp | tail -n 20
