"""The emulated Kueue's JobSet integration (emulator/kueue/jobsets.py): the Workload it builds,
and the start and stop patches (kueue pkg/controller/jobs/jobset/jobset_controller.go)."""

from __future__ import annotations

import hashlib
from typing import Any

from emulator.kueue import jobsets, podsets
from kontinue import keys

Obj = dict[str, Any]


def _jobset(**spec: Any) -> Obj:
    template = {
        "metadata": {"labels": {"app": "train"}},
        "spec": {"priorityClassName": "low", "containers": [{"name": "trainer"}]},
    }
    job = {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "template": template}
    return {
        "apiVersion": jobsets.API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": "js",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {keys.KUEUE_QUEUE_NAME_LABEL: "team"},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "driver", "replicas": 1, "template": {"spec": job}},
                {"name": "workers", "replicas": 3, "template": {"spec": job}},
            ],
            **spec,
        },
    }


def test_one_pod_set_per_replicated_job_owned_by_the_jobset() -> None:
    wl = jobsets.for_jobset(_jobset(), priority_value=100, priority_class_ref=None)
    assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [
        ("driver", 2),
        ("workers", 6),
    ]
    assert wl["spec"]["queueName"] == "team"
    (owner,) = wl["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("JobSet", "u-1", True)
    assert jobsets.is_jobset_ref(owner)
    digest = hashlib.sha1(b"JobSet\njobset.x-k8s.io\njs\nu-1").hexdigest()[:5]
    assert wl["metadata"]["name"] == f"jobset-js-{digest}"


def test_start_merges_each_pod_sets_info_and_stop_restores_the_templates() -> None:
    js = _jobset()
    wl = jobsets.for_jobset(js, priority_value=0, priority_class_ref=None)
    infos = {
        name: podsets.Info(labels={podsets.POD_SET_LABEL: name}, node_selector={"pool": "gpu"})
        for name in ("driver", "workers")
    }
    started = jobsets.start_patch(js, infos)["spec"]
    assert started["suspend"] is False
    for replicated in started["replicatedJobs"]:
        template = replicated["template"]["spec"]["template"]
        assert template["metadata"]["labels"] == {
            "app": "train",
            podsets.POD_SET_LABEL: replicated["name"],
        }
        assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    running = {**js, "spec": {**js["spec"], **started}}
    stopped = jobsets.stop_patch(running, wl)["spec"]
    assert stopped["suspend"] is True
    assert stopped["replicatedJobs"] == js["spec"]["replicatedJobs"]


def test_active_while_a_replicated_job_has_an_active_child_and_finished_by_condition() -> None:
    js = _jobset()
    assert not jobsets.is_active(js)
    js["status"] = {"replicatedJobsStatus": [{"name": "driver", "active": 1}]}
    assert jobsets.is_active(js)
    assert jobsets.finished(js) is None
    js["status"]["conditions"] = [{"type": "Completed", "status": "True"}]
    assert jobsets.finished(js) == {"type": "Completed", "status": "True"}
