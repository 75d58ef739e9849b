#!/usr/bin/env bash
# Delete the kind cluster (the checkpoint directory /tmp/kontinue-checkpoints is kept).
# shellcheck source=kind/lib.sh
source "$(dirname "$0")/lib.sh"
need kind
kind delete cluster --name "${CLUSTER_NAME}"
