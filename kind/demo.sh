#!/usr/bin/env bash
# The scavenger-queue demo on kind: 8 scavenger Jobs fill the 8 emulated GPUs, then one
# 4-GPU priority Job preempts half of them. Watch the Checkpoints, then the restores.
# The objects come from `python -m emulator.demo.manifests` (the same ones `make demo` uses).
# Usage: kind/demo.sh [--baseline]        (run kind/up.sh kueue first)
# shellcheck source=kind/lib.sh
source "$(dirname "$0")/lib.sh"
need kubectl

setup_args=()
if [[ ${1:-} == --baseline ]]; then
    setup_args+=(--not-opted-in)
fi

log "queues, policy and eight scavenger Jobs"
"${PYTHON}" -m emulator.demo.manifests "${setup_args[@]}" | kctl apply --server-side -f -
log "waiting for the scavengers to run"
kctl wait --for=condition=Ready pod -l demo.kontinue.dev/role=scavenger --timeout=300s

log "a 4-GPU priority Job arrives"
"${PYTHON}" -m emulator.demo.manifests --priority urgent --gpus 4 | kctl apply -f -
kctl wait --for=condition=Complete job/urgent --timeout=600s

log "checkpoints taken and restores made"
kctl get checkpoints -o wide
kctl get pods -l demo.kontinue.dev/role=scavenger \
    -o custom-columns='POD:.metadata.name,NODE:.spec.nodeName,RESTORE-FROM:.metadata.annotations.kontinue\.dev/restore-from'
