"""The bridge on a real kube-apiserver v1.36.2, as its ServiceAccount under the rendered RBAC.

Seen on a real cluster: a bridge whose watches could never sync (a Volcano watch the RBAC did not
grant) took the Lease at start and kept renewing it, so the healthy standby never led. Here the
``kueue`` overlay grants no Volcano reads; a replica told to watch Volcano anyway gets 403s, never
syncs, never turns ready and never takes the Lease, while a correctly configured replica leads.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator

import pytest

from tests.realcp import controlplane, processes
from tests.realcp.install import Variant


@pytest.fixture
def installed(crds: controlplane.ControlPlane) -> Iterator[processes.Installed]:
    """The kueue overlay in a fresh namespace, without webhook configurations (not needed)."""
    done = processes.install(crds, Variant("kueue", namespace=f"kontinue-{secrets.token_hex(3)}"))
    done.uninstall_webhooks()
    try:
        yield done
    finally:
        for program in done.programs.values():
            program.stop()
        crds.kubectl("delete", "namespace", done.namespace, "--wait=false")


def _holder(installed: processes.Installed) -> str | None:
    done = installed.plane.kubectl(
        "get", "lease", "kontinue-bridge", "-n", installed.namespace, "-o", "json", check=False
    )
    if done.returncode != 0:
        return None
    holder: str | None = json.loads(done.stdout)["spec"].get("holderIdentity")
    return holder


def test_a_replica_that_cannot_sync_never_takes_the_lease(
    installed: processes.Installed,
) -> None:
    blind = processes.start_bridge(
        installed, identity="blind", KONTINUE_QUEUE_SYSTEMS="kueue,volcano"
    )
    installed.programs["blind"] = blind
    time.sleep(6)  # more than one lease round (renew 5 s)
    assert blind.popen.poll() is None, blind.tail()
    assert not processes.bridge_ready(blind)
    assert _holder(installed) is None
    assert "forbidden" in blind.log.read_text().lower()  # the 403 on Volcano's PodGroups/Queues

    healthy = processes.start_bridge(installed, identity="healthy")
    installed.programs["healthy"] = healthy
    deadline = time.monotonic() + 30
    while _holder(installed) != "healthy":
        assert time.monotonic() < deadline, healthy.tail()
        assert healthy.popen.poll() is None, healthy.tail()
        time.sleep(0.3)
    assert processes.bridge_ready(healthy)
    assert healthy.stop() == 0, healthy.tail()
    assert blind.stop() == 0, blind.tail()
    assert _holder(installed) in ("", None)  # released on SIGTERM
