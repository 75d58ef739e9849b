#!/usr/bin/env bash
# Shared helpers for the kind scripts. Sourced, not run.
# shellcheck disable=SC2034  # variables are used by the scripts that source this file

set -euo pipefail

KIND_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "${KIND_DIR}/.." && pwd)"
CLUSTER_NAME="${KONTINUE_CLUSTER:-kontinue}"
IMAGE="${KONTINUE_IMAGE:-ghcr.io/kontinue/kontinue:dev}"
KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
VOLCANO_VERSION="${VOLCANO_VERSION:-v1.15.1}"
PYTHON="${PYTHON:-${REPO_DIR}/.venv/bin/python}"

log() { printf '>> %s\n' "$*" >&2; }

need() {
    local tool
    for tool in "$@"; do
        command -v "${tool}" >/dev/null || { log "missing tool: ${tool}"; exit 1; }
    done
}

kctl() { kubectl --context "kind-${CLUSTER_NAME}" "$@"; }
