"""Hypothesis strategies: recorded AdmissionReviews, bent a few places at a time.

Seeds are the real kube-apiserver v1.36.2 reviews in ``tests/fixtures`` (``webhook/admission``,
``admission``, ``cluster``; every file is a real review, provenance in tests/fixtures/README.md),
plus the shapes the recordings lack but the webhook serves: the recorded pod and Job as an
opted-in Kueue queue labels them, a JobSet of two replicated Jobs of the recorded Job's spec, a
pod after our own mutation, a Checkpoint, a CheckpointPolicy and a ClusterQueue review built the
way the bridge and an admin write them.

An input is a seed with 0-4 *mutations*, each at a random place in the document: replace the
value with arbitrary JSON or an interesting value (``"²"``, a NUL, a lone surrogate, a huge
number, a path that escapes), delete it, add a key Kontinue reads (reserved annotations, the
finalizer, ``KONTINUE_*`` env, queue labels), or multiply a list. Sometimes the encoded bytes are
then truncated or have one byte flipped. Shrinking works on every draw, so a failure reduces to
the fewest mutations that still break a property.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
from typing import Any

from hypothesis import strategies as st

from kontinue import keys
from tests.unit.webhook import support
from webhook import plumbing, state

Obj = dict[str, Any]
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"


def _recorded() -> list[Obj]:
    seen: dict[str, Obj] = {}
    for folder in ("webhook/admission", "admission", "cluster"):
        for path in sorted((FIXTURES / folder).glob("*.json")):
            seen.setdefault(path.name, json.loads(path.read_text()))
    return list(seen.values())


def _crd_review(obj: Obj, *, kind: str, resource: str, namespace: str | None) -> Obj:
    return support.request_for(
        obj,
        group=keys.GROUP,
        version="v1alpha1",
        kind=kind,
        resource=resource,
        namespace=namespace,
    )


def _built() -> list[Obj]:
    pod = support.kueue_pod()
    pod_lineage = support.lineage_of(pod)
    job = support.recorded_object("01-")
    job["metadata"].setdefault("labels", {})[keys.KUEUE_QUEUE_NAME_LABEL] = "team-a"
    checkpoint = support.make_checkpoint(
        "cp-1", lineage=pod_lineage, members=[("p0", "u0", 0), ("p1", "u1", 1)]
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    policy = {
        "apiVersion": keys.API_VERSION,
        "kind": "CheckpointPolicy",
        "metadata": {"name": "gpu"},
        "spec": support.HOSTPATH_POLICY,
    }
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {
            "name": "cq-new",
            "labels": {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: "gpu"},
        },
        "spec": {},
    }
    indexed = copy.deepcopy(pod)
    indexed["metadata"]["annotations"] = {keys.JOB_COMPLETION_INDEX_ANNOTATION: "1"}
    jobset = {
        "apiVersion": f"{keys.JOBSET_GROUP}/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team-a"}},
        "spec": {
            "replicatedJobs": [
                {"name": name, "replicas": 1, "template": {"spec": copy.deepcopy(job["spec"])}}
                for name in ("driver", "workers")
            ]
        },
    }
    return [
        support.request_for(pod),
        support.request_for(indexed),
        support.request_for(plumbed_pod(), username="alice"),
        support.request_for(job, group="batch", kind="Job", resource="jobs"),
        support.request_for(
            jobset, group=keys.JOBSET_GROUP, version="v1alpha2", kind="JobSet", resource="jobsets"
        ),
        _crd_review(checkpoint, kind="Checkpoint", resource="checkpoints", namespace="default"),
        _crd_review(policy, kind="CheckpointPolicy", resource="checkpointpolicies", namespace=None),
        support.request_for(
            queue,
            group=keys.KUEUE_GROUP,
            version="v1beta2",
            kind="ClusterQueue",
            resource="clusterqueues",
            namespace=None,
        ),
    ]


def plumbed_pod() -> Obj:
    """The recorded opted-in pod as our mutation leaves it (restoring from ``cp-1``)."""
    from webhook import admission, settings

    pod = support.kueue_pod()
    request = support.parsed(support.request_for(pod))
    verdict = admission.mutate(request, state=rich_state(), config=settings.Settings(image="x"))
    return support.apply_patch(pod, verdict.patch)


def rich_state() -> state.Snapshot:
    """Opted-in queues, a named policy and a good Checkpoint of the recorded pod's lineage."""
    pod = support.kueue_pod()
    pod_lineage = support.lineage_of(pod)
    return state.Snapshot.of(
        cluster_queues=[support.opted_in_cq("cq-gpu"), support.opted_in_cq("cq-p", policy="gpu")],
        local_queues=[support.local_queue("default", "team-a", "cq-gpu")],
        policies=[support.checkpoint_policy("gpu", support.HOSTPATH_POLICY)],
        checkpoints=[
            support.make_checkpoint(
                "cp-1", lineage=pod_lineage, members=[("p0", "u0", 0), ("p1", "u1", 1)]
            ),
            support.make_checkpoint("cp-0", lineage=pod_lineage, phase="Failed", minutes_ago=60),
        ],
    )


SEEDS: list[Obj] = [*_recorded(), *_built()]
STATES: list[state.Snapshot] = [state.Snapshot(), rich_state()]

RESERVED_KEYS = [
    *sorted(keys.RESERVED_POD_ANNOTATIONS),
    keys.JOB_COMPLETION_INDEX_ANNOTATION,
    keys.KUEUE_CLUSTER_QUEUE_LABEL,
    keys.KUEUE_QUEUE_NAME_LABEL,
    keys.ENABLED_LABEL,
    keys.POLICY_LABEL,
    keys.CHECKPOINT_OPT_OUT_ANNOTATION,
    "finalizers",
    "ownerReferences",
    "spec",
    "metadata",
    "annotations",
    "labels",
    "env",
    "initContainers",
    "containers",
    "volumes",
    "volumeMounts",
    "lineage",
    "namespace",
]

INTERESTING: list[Any] = [
    "²",
    "٣",
    "-1",
    "007",
    "1e3",
    "",
    " ",
    "\x00",
    "\ud800",
    "true",
    "/etc/x",
    "../../..",
    "/kontinue/checkpoints/default/job-train-a-0/../../other",
    keys.CHECKPOINT_FINALIZER,
    keys.ENV_RESTORE_FROM,
    plumbing.ENV_RESTORE_SOURCE,
    "cp-1",
    "cq-gpu",
    "default",
    "evil",
    2**63,
    -(2**63) - 1,
    10**400,
    1.5,
    -0.0,
    True,
    None,
    [],
    {},
    [None] * 50,
    {"name": keys.ENV_RESTORE_FROM, "value": "/etc/x"},
    {"apiVersion": "batch/v1", "kind": "Job", "name": "x", "uid": "u", "controller": True},
]

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(INTERESTING)
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(RESERVED_KEYS), inner, max_size=4)
    ),
    max_leaves=8,
)


def _places(doc: Any, found: list[tuple[Any, Any]], depth: int = 0) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) in ``doc``: where a mutation may land."""
    if depth > 12:
        return found
    if isinstance(doc, dict):
        for key, value in doc.items():
            found.append((doc, key))
            _places(value, found, depth + 1)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found.append((doc, i))
            _places(value, found, depth + 1)
    return found


@st.composite
def _mutate(draw: st.DrawFn, doc: Obj) -> None:
    places = _places(doc, [])
    parent, key = places[draw(st.integers(0, len(places) - 1))]
    action = draw(st.sampled_from(["replace", "replace", "delete", "add", "grow", "interesting"]))
    if action == "delete":
        del parent[key]
    elif action == "replace":
        parent[key] = copy.deepcopy(draw(json_values))
    elif action == "interesting":
        parent[key] = copy.deepcopy(draw(st.sampled_from(INTERESTING)))
    elif action == "grow":
        target = parent[key]
        if isinstance(target, list) and target:
            factor = draw(st.sampled_from([2, 10, 1500]))
            # at most ~1 MiB more: bigger bodies are the HTTP layer's (413, test_limits.py)
            size = len(json.dumps(target)) + 1
            parent[key] = target * max(1, min(factor, 3000 // len(target), 2**20 // size))
        else:
            parent[key] = [copy.deepcopy(target)] * draw(st.integers(1, 3))
    else:
        target = parent[key] if isinstance(parent[key], dict | list) else parent
        value = copy.deepcopy(draw(json_values | st.sampled_from(INTERESTING)))
        if isinstance(target, dict):
            target[draw(st.sampled_from(RESERVED_KEYS) | st.text(max_size=6))] = value
        else:
            target.append(value)


@dataclasses.dataclass(frozen=True)
class Case:
    """One fuzz input: what is sent, where, against which cluster state."""

    body: bytes
    path: str
    state_index: int
    seed_index: int
    mutations: int

    @property
    def state(self) -> state.Snapshot:
        return STATES[self.state_index]

    def describe(self) -> str:
        text = self.body[:300].decode("utf-8", "replace")
        return (
            f"seed {self.seed_index}, {self.mutations} mutations, {self.path}, "
            f"state {self.state_index}, {len(self.body)} bytes: {text}..."
        )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    seed_index = draw(st.integers(0, len(SEEDS) - 1))
    doc = copy.deepcopy(SEEDS[seed_index])
    mutations = draw(st.integers(0, 4))
    for _ in range(mutations):
        if not isinstance(doc, dict) or not doc:
            break
        draw(_mutate(doc))
    try:
        body = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    except (ValueError, OverflowError):  # pragma: no cover - json.dumps handles all drawn values
        body = b"{}"
    damage = draw(st.sampled_from(["none"] * 8 + ["truncate", "flip"]))
    if damage == "truncate" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif damage == "flip" and body:
        at = draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ draw(st.integers(1, 255))]) + body[at + 1 :]
    return Case(
        body=body,
        path=draw(st.sampled_from(["/mutate", "/validate"])),
        state_index=draw(st.integers(0, len(STATES) - 1)),
        seed_index=seed_index,
        mutations=mutations,
    )
