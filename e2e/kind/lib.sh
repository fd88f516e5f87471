#!/usr/bin/env bash
# Shared by the e2e/kind scripts (sourced, not run). Everything is named here, once.
#
#   ZLINK_KIND_CLUSTER   kind cluster name (default zlink)
#   ZLINK_KIND_NS        namespace of the operator and the Mesh (default zlink)
#   ZLINK_KIND_TAG       image tag built and loaded into the cluster (default kind)
#   ZLINK_KIND_TIMEOUT   seconds to wait for the Mesh or a Job (default 600)

CLUSTER="${ZLINK_KIND_CLUSTER:-zlink}"
NS="${ZLINK_KIND_NS:-zlink}"
TAG="${ZLINK_KIND_TAG:-kind}"
TIMEOUT="${ZLINK_KIND_TIMEOUT:-600}"
KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$KIND_DIR/../.." && pwd)"
MESH=game
RELEASE=zlink
export CLUSTER NS TAG TIMEOUT KIND_DIR REPO_ROOT MESH RELEASE

log() {
    printf '==> %s\n' "$*" >&2
}

die() {
    printf 'e2e/kind: error: %s\n' "$*" >&2
    exit 1
}

need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (see e2e/kind/README.md)"
    done
}

# kubectl against the kind cluster only, so a user's current context is never touched.
k() {
    kubectl --context "kind-$CLUSTER" "$@"
}

# Waits until the Mesh is Ready at application version $1 (prints the pods meanwhile).
wait_mesh_ready() {
    local version="$1" deadline=$((SECONDS + TIMEOUT)) ready current
    while ((SECONDS < deadline)); do
        ready="$(k -n "$NS" get mesh "$MESH" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)"
        current="$(k -n "$NS" get mesh "$MESH" -o jsonpath='{.status.currentVersion}' 2>/dev/null || true)"
        if [[ "$ready" == "True" && "$current" == "$version" ]]; then
            log "Mesh $MESH is Ready at version $version"
            return 0
        fi
        k -n "$NS" get mesh "$MESH" --no-headers 2>/dev/null | sed 's/^/    /' >&2 || true
        sleep 5
    done
    k -n "$NS" describe mesh "$MESH" >&2 || true
    die "Mesh $MESH not Ready at version $version within ${TIMEOUT} s"
}

# The Mesh's application version now.
mesh_version() {
    k -n "$NS" get mesh "$MESH" -o jsonpath='{.spec.applicationVersion}'
}
