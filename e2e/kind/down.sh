#!/usr/bin/env bash
# Deletes the kind cluster.
#
#   e2e/kind/down.sh
set -euo pipefail
# shellcheck source=e2e/kind/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need kind
kind delete cluster --name "$CLUSTER"
