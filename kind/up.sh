#!/usr/bin/env bash
# Create the kind cluster, emulate GPUs, install the queue system(s) and Kontinue.
# Usage: kind/up.sh [kueue|volcano|both]      (default: kueue)
# Needs: docker (with its daemon), kind, kubectl 1.31+ (wait --for=create), and the project's
# venv for the GPU emulation (make .venv/.installed; PYTHON= to use another interpreter).
# An existing cluster named $KONTINUE_CLUSTER (default kontinue) is reused, not recreated.
# What this script relies on is proven without Docker by tests/realcp (docs/testing.md).
# shellcheck source=kind/lib.sh
source "$(dirname "$0")/lib.sh"
need docker kind kubectl
[[ -x ${PYTHON} ]] || { log "no ${PYTHON}: run make .venv/.installed (or set PYTHON)"; exit 1; }

queue_system="${1:-kueue}"
case "${queue_system}" in
    kueue | volcano | both) ;;
    *) log "unknown queue system: ${queue_system} (kueue, volcano or both)"; exit 2 ;;
esac

# The shared checkpoint directory (kind/cluster.yaml mounts it on every node): the image runs
# as uid 65532 (Dockerfile), which must be able to write it.
mkdir -p /tmp/kontinue-checkpoints
chmod 0777 /tmp/kontinue-checkpoints
if ! kind get clusters | grep -qx "${CLUSTER_NAME}"; then
    log "creating cluster ${CLUSTER_NAME}"
    kind create cluster --name "${CLUSTER_NAME}" --config "${KIND_DIR}/cluster.yaml" --wait 120s
fi

"${KIND_DIR}/gpus.sh"

if [[ ${queue_system} == kueue || ${queue_system} == both ]]; then
    log "installing Kueue ${KUEUE_VERSION}"
    kctl apply --server-side -f \
        "https://github.com/kubernetes-sigs/kueue/releases/download/${KUEUE_VERSION}/manifests.yaml"
    kctl -n kueue-system wait --for=create deployment/kueue-controller-manager --timeout=120s
    kctl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
fi
if [[ ${queue_system} == volcano || ${queue_system} == both ]]; then
    log "installing Volcano ${VOLCANO_VERSION}"
    kctl apply --server-side -f \
        "https://raw.githubusercontent.com/volcano-sh/volcano/${VOLCANO_VERSION}/installer/volcano-development.yaml"
    kctl -n volcano-system wait --for=create deployment/volcano-scheduler --timeout=120s
    kctl -n volcano-system rollout status deployment/volcano-scheduler --timeout=300s
fi

log "building ${IMAGE}"
docker build -t "${IMAGE}" "${REPO_DIR}"
kind load docker-image --name "${CLUSTER_NAME}" "${IMAGE}"

log "installing Kontinue (overlay ${queue_system}, image ${IMAGE})"
# One kustomize images entry moves the Deployments' image and KONTINUE_IMAGE together.
overlay_dir="$(mktemp -d)"
trap 'rm -rf "${overlay_dir}"' EXIT
cat >"${overlay_dir}/kustomization.yaml" <<EOF
resources:
  - $(realpath --relative-to="${overlay_dir}" "${REPO_DIR}/manifests/overlays/${queue_system}")
images:
  - name: ghcr.io/kontinue/kontinue
    newName: ${IMAGE%:*}
    newTag: ${IMAGE##*:}
EOF
kctl apply --server-side -k "${overlay_dir}"
kctl -n kontinue-system wait --for=create deployment/kontinue-webhook deployment/kontinue-bridge \
    --timeout=60s
kctl -n kontinue-system rollout status deployment --timeout=300s

log "waiting for the webhook's endpoints"
ready=""
for _ in $(seq 1 60); do
    ready="$(kctl -n kontinue-system get endpointslices \
        -l kubernetes.io/service-name=kontinue-webhook \
        -o jsonpath='{.items[*].endpoints[?(@.conditions.ready==true)].addresses[0]}')"
    [[ -n ${ready} ]] && break
    sleep 2
done
[[ -n ${ready} ]] || { log "the webhook has no ready endpoints"; exit 1; }

# Ready means a pod CREATE really goes through the webhook, not just that the Deployment is up
# (Kueue's hack/testing/e2e-test.sh waits the same way).
log "waiting for the webhook to answer a dry-run pod create"
for _ in $(seq 1 60); do
    if kctl run kontinue-probe --image=busybox --restart=Never --dry-run=server -o name >/dev/null 2>&1; then
        # The CheckpointPolicy webhook fails closed: apply policies only once it answers.
        kctl apply --server-side -f "${REPO_DIR}/manifests/examples/checkpointpolicy-kind.yaml"
        log "Kontinue is ready"
        exit 0
    fi
    sleep 2
done
log "the webhook did not answer in time"
kctl -n kontinue-system logs -l app.kubernetes.io/name=kontinue --tail=50 || true
exit 1
