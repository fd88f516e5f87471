#!/usr/bin/env bash
# Creates a kind cluster (one control plane, three workers), builds the node and operator
# images, loads them into it, installs the chart with its dev Redis and applies the Mesh, then
# waits until the Mesh is Ready. Needs docker, kind, kubectl and helm.
#
#   e2e/kind/up.sh
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need docker kind kubectl helm

if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "kind cluster $CLUSTER exists; reusing it"
else
    log "creating kind cluster $CLUSTER"
    kind create cluster --name "$CLUSTER" --config "$KIND_DIR/cluster.yaml" --wait 120s
fi

log "building zlink-node:$TAG and zlink-operator:$TAG (a release build: several minutes the first time)"
docker build -f "$REPO_ROOT/node/Dockerfile" -t "zlink-node:$TAG" "$REPO_ROOT"
docker build -f "$REPO_ROOT/operator/Dockerfile" -t "zlink-operator:$TAG" "$REPO_ROOT"
kind load docker-image --name "$CLUSTER" "zlink-node:$TAG" "zlink-operator:$TAG"

log "installing the chart (operator + dev Redis) in namespace $NS"
helm --kube-context "kind-$CLUSTER" upgrade --install "$RELEASE" "$REPO_ROOT/charts/zlink" \
    --namespace "$NS" --create-namespace \
    --set image.tag="$TAG" --set devRedis.enabled=true \
    --wait --timeout 5m
helm --kube-context "kind-$CLUSTER" test "$RELEASE" --namespace "$NS" --timeout 2m

log "applying Mesh $MESH"
sed "s/@TAG@/$TAG/g" "$KIND_DIR/mesh.yaml" | k -n "$NS" apply -f -
wait_mesh_ready "$(mesh_version)"
k -n "$NS" get pods -o wide
