"""A lost kubelet must not throw a good save away (issue 20, item 2), through the real bridge.

The Checkpoint was marked Failed at the deadline because its member's kubelet never reported
(the bridge released the finalizer so the cluster moved on). Minutes later the kubelet comes
back and writes the final status: exit 143 with the ``saved`` message, finished inside the grace
period. The bridge re-judges that member and the set becomes Succeeded — unless a newer set of
the lineage exists. The timeline is in docs/troubleshooting.md.
"""

from __future__ import annotations

import copy
import datetime

import pytest

from kontinue.kube import api, resources
from kontinue.models import base, checkpoint
from tests.integration.bridge.conftest import NS, Cluster, Obj, checkpoint_body, eventually


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _failed_for_want_of_a_report(cluster: Cluster, job: Obj, pod: Obj, name: str) -> None:
    body = checkpoint_body(
        job,
        name,
        time=_stamp(datetime.datetime.now(datetime.UTC)),
        members=[
            checkpoint.Member(pod_name=pod["metadata"]["name"], pod_uid=pod["metadata"]["uid"])
        ],
    )
    await cluster.admin.create(resources.CHECKPOINTS, base.to_dict(body))
    reason = "still Terminating 30s after its grace period ended: no final container status"
    await cluster.admin.patch(
        resources.CHECKPOINTS,
        name,
        {
            "status": {
                "phase": "Failed",
                "message": f"1/1 members failed: {reason}",
                "members": [
                    {"podName": pod["metadata"]["name"], "state": "Failed", "reason": reason}
                ],
            }
        },
        content_type=api.MERGE_PATCH,
        namespace=NS,
        subresource="status",
    )


@pytest.mark.parametrize("superseded", [False, True], ids=["alone", "superseded"])
async def test_a_save_reported_after_the_deadline_upgrades_the_set(
    cluster: Cluster, superseded: bool
) -> None:
    await cluster.queues()
    job = await cluster.job()
    (pod,) = await cluster.pods(job, n=1)
    deleting = await cluster.admin.delete(
        resources.PODS, pod["metadata"]["name"], namespace=NS, grace_period_seconds=30
    )
    await _failed_for_want_of_a_report(cluster, job, deleting, "lost")
    if superseded:
        await cluster.put_checkpoint(job, "newer", minute=59)
    # A pod of the lineage already running, restored from the unreported set (offered to it
    # verified, docs/api.md): the upgrade must not change what it restored from.
    (running,) = await cluster.pods(job, n=1)
    running = await cluster.restoring_from(running, "lost")
    await cluster.start_bridge()
    # The kubelet is back: the trainer saved 5 s into its 30 s grace period.
    now = datetime.datetime.now(datetime.UTC)
    current = await cluster.admin.get(resources.PODS, pod["metadata"]["name"], namespace=NS)
    final = copy.deepcopy(current)
    final["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 143,
                        "reason": "Error",
                        "message": '{"kontinue": "saved", "step": 33}',
                        "startedAt": _stamp(now - datetime.timedelta(minutes=5)),
                        "finishedAt": _stamp(now + datetime.timedelta(seconds=5)),
                    }
                },
            }
        ],
    }
    kubelet = cluster.emulated.client("system:node:node-1")
    await kubelet.replace(resources.PODS, final, subresource="status")

    if superseded:
        await cluster.bridges[0].controller.queue.join()
        assert (await cluster.get_checkpoint("lost")).status.phase is checkpoint.Phase.FAILED
        return

    async def upgraded() -> bool:
        return (await cluster.get_checkpoint("lost")).status.phase is checkpoint.Phase.SUCCEEDED

    await eventually(upgraded, what="the set upgraded by the late report")
    cp = await cluster.get_checkpoint("lost")
    (member,) = cp.status.members
    assert member.state is checkpoint.MemberState.SAVED
    assert member.step == 33
    assert "arrived after the bridge's deadline" in (member.reason or "")
    await cluster.bridges[0].controller.queue.join()
    after = await cluster.admin.get(resources.PODS, running["metadata"]["name"], namespace=NS)
    assert after["metadata"]["annotations"] == running["metadata"]["annotations"]
    assert after["spec"] == running["spec"]
