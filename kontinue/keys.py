"""Every label, annotation, finalizer, condition, env var and event reason Kontinue owns or reads.

One module so a reviewer can see the whole vocabulary at once, and so a rename is one edit.
Keys of other projects (Kueue, Volcano, the job controller, GPU Feature Discovery) are listed
too, each next to the upstream source that defines it.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "kontinue.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "kontinue.dev/v1alpha1"

# --- opt-in (on a Kueue ClusterQueue or a Volcano Queue) -------------------------------------
ENABLED_LABEL: Final = "kontinue.dev/enabled"
POLICY_LABEL: Final = "kontinue.dev/policy"
DEFAULT_POLICY_NAME: Final = "default"

# --- opt-out (annotation on a Pod or its owner) ----------------------------------------------
CHECKPOINT_OPT_OUT_ANNOTATION: Final = "kontinue.dev/checkpoint"
WORKLOAD_CONTAINERS_ANNOTATION: Final = "kontinue.dev/workload-containers"
"""Comma-separated names of the pod's workload containers, whose save is judged
(kontinue/workload.py); set by the user on the pod or the Job's pod template."""

# --- reserved pod keys: only Kontinue may set them; the validating webhook rejects forgeries --
RESTORE_FROM_ANNOTATION: Final = "kontinue.dev/restore-from"
LINEAGE_ANNOTATION: Final = "kontinue.dev/lineage"
COLD_START_REASON_ANNOTATION: Final = "kontinue.dev/cold-start-reason"
CHECKPOINT_FINALIZER: Final = "kontinue.dev/checkpoint"
PLUMBED_LABEL: Final = "kontinue.dev/plumbed"
PLUMBED_VALUE: Final = "true"
"""Label on every pod the mutating webhook plumbs (webhook/plumbing.py), beside the lineage
annotation: the bridge's pod watch selects on it (queue_bridge/caches.py), so pods that are not
opted in cost the bridge nothing. Not reserved: a forged label only makes the bridge cache a pod
it then ignores (its decisions read the reserved lineage annotation). Pods plumbed before the
label existed are labelled by the bridge at start-up (queue_bridge/adoption.py)."""
SET_VERDICT_GATE: Final = "kontinue.dev/set-verdict"
"""Scheduling gate on a pod that waits for a multi-member set still saving (coupled): the bridge
removes it once the set is terminal, after writing the two annotations below."""
RESTORE_MEMBER_ANNOTATION: Final = "kontinue.dev/restore-member"
"""Written by the bridge before ungating: the awaited member's directory name if the set is
usable for the pod's identity, else a name that never exists (use the fallback)."""
RESTORE_WAIT_ANNOTATION: Final = "kontinue.dev/restore-wait-seconds"
RESERVED_POD_ANNOTATIONS: Final = frozenset(
    {
        RESTORE_FROM_ANNOTATION,
        LINEAGE_ANNOTATION,
        COLD_START_REASON_ANNOTATION,
        RESTORE_MEMBER_ANNOTATION,
        RESTORE_WAIT_ANNOTATION,
    }
)

# --- a move a user asked for (kubectl kontinue move/drain/defrag; kontinue/moving.py): on the pod
# it evicts, then copied by the bridge onto the Manual Checkpoint the webhook restores from ---
MOVE_ANNOTATION: Final = "kontinue.dev/move"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"  # k8s.io/api/core/v1 well_known_labels.go

# --- labels on our own Checkpoint objects, for selectors --------------------------------------
CHECKPOINT_LINEAGE_LABEL: Final = "kontinue.dev/lineage-hash"
"""Also on every pod the webhook plumbs: it lists a lineage's pods by it (webhook/freshness.py)."""
CHECKPOINT_OWNER_UID_LABEL: Final = "kontinue.dev/owner-uid"
TRACEPARENT_ANNOTATION: Final = "kontinue.dev/traceparent"
"""W3C traceparent of the eviction that made the Checkpoint (kontinue/tracing.py)."""
CREATED_AT_ANNOTATION: Final = "kontinue.dev/created-at"
"""When the bridge created the Checkpoint, to the microsecond (``metav1.MicroTime`` text): orders
two sets of one lineage whose trigger times fall in the same second (kontinue/restore_plan.py
``newest_first``)."""

# --- the workload contract (environment the webhook gives each opted-in container) -----------
ENV_CHECKPOINT_DIR: Final = "KONTINUE_CHECKPOINT_DIR"
ENV_RESTORE_FROM: Final = "KONTINUE_RESTORE_FROM"
ENV_POD_UID: Final = "KONTINUE_POD_UID"
ENV_MEMBER: Final = "KONTINUE_MEMBER"
"""The pod's member identity (kontinue/identity.py), also recorded in each save's manifest."""
MANIFEST_MEMBER_KEY: Final = "member"
SAVED_MARKER_KEY: Final = "kontinue"
SAVED_MARKER_VALUE: Final = "saved"
RESTORE_INIT_CONTAINER: Final = "kontinue-restore"
CHECKPOINT_VOLUME: Final = "kontinue-checkpoints"

# --- Checkpoint status conditions ------------------------------------------------------------
CONDITION_SAVED: Final = "Saved"
CONDITION_VERIFIED: Final = "Verified"

# --- Event reasons ---------------------------------------------------------------------------
EVENT_CHECKPOINT_STARTED: Final = "CheckpointStarted"
EVENT_CHECKPOINT_SUCCEEDED: Final = "CheckpointSucceeded"
EVENT_CHECKPOINT_FAILED: Final = "CheckpointFailed"
EVENT_RESTORED: Final = "Restored"
EVENT_COLD_START: Final = "ColdStart"
EVENT_NOT_PLUMBED: Final = "NotPlumbed"
EVENT_CHECKPOINT_VOLUME_MISSING: Final = "CheckpointVolumeMissing"
EVENT_UNSAFE_JOB: Final = "PreemptionCountsAgainstBackoff"
EVENT_UNSAFE_VCJOB: Final = "PreemptionEndsVolcanoJob"

# --- Kueue (kubernetes-sigs/kueue pkg/controller/constants/constants.go, apis/kueue/v1beta2) --
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_CLUSTER_QUEUE_LABEL: Final = "kueue.x-k8s.io/cluster-queue-name"
KUEUE_PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
KUEUE_CONDITION_EVICTED: Final = "Evicted"
KUEUE_CONDITION_PREEMPTED: Final = "Preempted"
KUEUE_CONDITION_ADMITTED: Final = "Admitted"
KUEUE_CONDITION_QUOTA_RESERVED: Final = "QuotaReserved"
KUEUE_CONDITION_REQUEUED: Final = "Requeued"
KUEUE_CONDITION_FINISHED: Final = "Finished"
KUEUE_ADMISSION_CHECK_CONTROLLER: Final = "kontinue.dev/restore"

# --- Volcano (volcano-sh/volcano pkg/apis, pkg/scheduler/cache/cache.go) ----------------------
VOLCANO_SCHEDULING_GROUP: Final = "scheduling.volcano.sh"
VOLCANO_BATCH_GROUP: Final = "batch.volcano.sh"
VOLCANO_PODGROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_NAME_ANNOTATION: Final = "volcano.sh/queue-name"
VOLCANO_JOB_NAME_LABEL: Final = "volcano.sh/job-name"
# A vcjob pod's task and its index within the task, label and annotation (volcano-sh/apis
# pkg/apis/batch/v1alpha1/labels.go TaskSpecKey, TaskIndex)
VOLCANO_TASK_SPEC_KEY: Final = "volcano.sh/task-spec"
VOLCANO_TASK_INDEX_KEY: Final = "volcano.sh/task-index"
VOLCANO_SCHEDULER_USER: Final = "system:serviceaccount:volcano-system:volcano-scheduler"

# --- Kubernetes core (k8s.io/api/core/v1/types.go, pkg/apis/batch) ----------------------------
POD_CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
DISRUPTION_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
DISRUPTION_EVICTION_BY_API: Final = "EvictionByEvictionAPI"
DISRUPTION_DELETION_BY_TAINT_MANAGER: Final = "DeletionByTaintManager"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOB_TRACKING_FINALIZER: Final = "batch.kubernetes.io/job-tracking"
JOB_COMPLETION_INDEX_ANNOTATION: Final = "batch.kubernetes.io/job-completion-index"
# Also a label since Kubernetes 1.28 (PodIndexLabel): pkg/controller/job/indexed_job_utils.go
JOB_COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"

# --- GPU Feature Discovery node labels (NVIDIA/k8s-device-plugin gpu-feature-discovery) -------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
CUDA_DRIVER_MAJOR_LABEL: Final = "nvidia.com/cuda.driver-version.major"

# --- JobSet (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go): set on child Jobs and
# their pods; a pod's controller is the child Job, its lineage is the JobSet these name ----------
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"
# Both a label and an annotation on child Jobs and pods (pkg/controllers/jobset_controller.go
# labelAndAnnotateObject): the pod's replicated Job and that Job's index within it.
JOBSET_REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"

# --- checkpoint directory format (kontinue/checkpoint_format.py) ------------------------------
CHECKPOINT_MANIFEST_FILE: Final = "MANIFEST.json"
ENV_WAIT_FOR: Final = "KONTINUE_WAIT_FOR"

# --- queue lookups on pods the webhook does (kueue pkg/controller/constants, volcano pg controller)
KUEUE_LOCAL_QUEUE_LABEL: Final = "kueue.x-k8s.io/local-queue-name"
VOLCANO_POD_QUEUE_ANNOTATION: Final = "scheduling.volcano.sh/queue-name"

# --- where a process finds its termination-message file when no container runtime mounts one at
# /dev/termination-log (the emulator's kubelet, local runs of the reference workload) -----------
ENV_TERMINATION_LOG: Final = "KONTINUE_TERMINATION_LOG"

# --- the restore init-container's environment (webhook/plumbing.py sets, kontinue/restore/
# program.py reads; KONTINUE_RESTORE_FROM is the link it makes when KONTINUE_RESTORE_SOURCE is
# present) ---------------------------------------------------------------------------------------
ENV_RESTORE_SOURCE: Final = "KONTINUE_RESTORE_SOURCE"
ENV_RESTORE_CHECKPOINT: Final = "KONTINUE_RESTORE_CHECKPOINT"
ENV_WAIT_CHECKPOINT: Final = "KONTINUE_WAIT_CHECKPOINT"
ENV_WAIT_SECONDS: Final = "KONTINUE_WAIT_SECONDS"
# Behind the set-verdict gate, KONTINUE_WAIT_FOR and KONTINUE_WAIT_SECONDS expand these (downward
# API from the two annotations above, read when the init-container starts, i.e. after ungating).
ENV_VERDICT_MEMBER: Final = "KONTINUE_VERDICT_MEMBER"
ENV_VERDICT_WAIT: Final = "KONTINUE_VERDICT_WAIT"
ENV_VERIFY_SECONDS: Final = "KONTINUE_VERIFY_SECONDS"
ENV_RESTORE_MEMBER: Final = "KONTINUE_RESTORE_MEMBER"
"""The member identity whose state the pod restores: its own, or rank 0's under consistency
``shared`` (kontinue/restore_plan.py ``Plan.identity``); the restore program compares a
manifest's ``member`` with it (else with ``KONTINUE_MEMBER``)."""

# --- the queue bridge's mark on a pod whose failed restore it counted (queue_bridge/reconciling):
# the value is the Checkpoint named by kontinue.dev/restore-from, so each failure counts once ---
RESTORE_FAILURE_COUNTED_ANNOTATION: Final = "kontinue.dev/restore-failure-counted"

# --- Event reasons the queue bridge adds (queue_bridge/handlers/) ----------------------------
EVENT_CHECKPOINT_EXPIRED: Final = "CheckpointExpired"
EVENT_RESTORE_FAILED: Final = "RestoreFailed"
