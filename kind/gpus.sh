#!/usr/bin/env bash
# Emulate GPUs on every kind worker: nvidia.com/gpu capacity plus GPU Feature Discovery labels.
# The values come from `python -m emulator.gpus` (the same profile the emulated cluster uses).
# Idempotent: re-run it after a node restarts (the kubelet zeroes extended resources then).
# Usage: kind/gpus.sh [--profile h100|a100] [--count N]
# shellcheck source=kind/lib.sh
source "$(dirname "$0")/lib.sh"
need kubectl

profile_args=("$@")
labels="$("${PYTHON}" -m emulator.gpus label-args "${profile_args[@]}")"
patch="$("${PYTHON}" -m emulator.gpus status-patch "${profile_args[@]}")"

mapfile -t workers < <(kctl get nodes -l kontinue.dev/gpu-pool=demo -o name)
[[ ${#workers[@]} -gt 0 ]] || { log "no worker labelled kontinue.dev/gpu-pool=demo"; exit 1; }
for node in "${workers[@]}"; do
    log "GPUs on ${node}"
    kctl patch "${node}" --subresource=status --type=json -p "${patch}"
    # shellcheck disable=SC2086  # label-args is a space-separated list of key=value words
    kctl label "${node}" --overwrite ${labels}
done
