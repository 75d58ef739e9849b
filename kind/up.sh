#!/usr/bin/env bash
# Create the kind cluster, emulate GPUs, install the queue system(s) and Kontinue.
# Usage: kind/up.sh [kueue|volcano|both]      (default: kueue)
# Needs: docker, kind, kubectl. Set KONTINUE_KEEP=1 to reuse an existing cluster.
# shellcheck source=kind/lib.sh
source "$(dirname "$0")/lib.sh"
need docker kind kubectl

queue_system="${1:-kueue}"
case "${queue_system}" in
    kueue | volcano | both) ;;
    *) log "unknown queue system: ${queue_system} (kueue, volcano or both)"; exit 2 ;;
esac

mkdir -p /tmp/kontinue-checkpoints
if ! kind get clusters | grep -qx "${CLUSTER_NAME}"; then
    log "creating cluster ${CLUSTER_NAME}"
    kind create cluster --name "${CLUSTER_NAME}" --config "${KIND_DIR}/cluster.yaml" --wait 120s
fi

"${KIND_DIR}/gpus.sh"

if [[ ${queue_system} == kueue || ${queue_system} == both ]]; then
    log "installing Kueue ${KUEUE_VERSION}"
    kctl apply --server-side -f \
        "https://github.com/kubernetes-sigs/kueue/releases/download/${KUEUE_VERSION}/manifests.yaml"
    kctl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
fi
if [[ ${queue_system} == volcano || ${queue_system} == both ]]; then
    log "installing Volcano ${VOLCANO_VERSION}"
    kctl apply --server-side -f \
        "https://raw.githubusercontent.com/volcano-sh/volcano/${VOLCANO_VERSION}/installer/volcano-development.yaml"
    kctl -n volcano-system rollout status deployment/volcano-scheduler --timeout=300s
fi

log "building ${IMAGE}"
docker build -t "${IMAGE}" "${REPO_DIR}"
kind load docker-image --name "${CLUSTER_NAME}" "${IMAGE}"

log "installing Kontinue (overlay ${queue_system})"
kctl apply --server-side -k "${REPO_DIR}/manifests/overlays/${queue_system}"
kctl apply -f "${REPO_DIR}/manifests/examples/checkpointpolicy-kind.yaml"
kctl -n kontinue-system set image deployment --all "*=${IMAGE}"
kctl -n kontinue-system rollout status deployment --timeout=300s

# Ready means a pod CREATE really goes through the webhook, not just that the Deployment is up
# (Kueue's hack/testing/e2e-test.sh waits the same way).
log "waiting for the webhook to answer a dry-run pod create"
for _ in $(seq 1 60); do
    if kctl run kontinue-probe --image=busybox --restart=Never --dry-run=server -o name >/dev/null 2>&1; then
        log "Kontinue is ready"
        exit 0
    fi
    sleep 2
done
log "the webhook did not answer in time"
kctl -n kontinue-system logs -l app.kubernetes.io/name=kontinue --tail=50 || true
exit 1
