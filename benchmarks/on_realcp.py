"""What the benchmarks on a real kube-apiserver share (bench_consistent_list, bench_live_read):
the control plane of tests/realcp/controlplane.py with Kontinue's CRDs established, the sums of
the apiserver's own metrics, and a ``main`` that says plainly when the assets are missing."""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks import bench_webhook
from tests.realcp import controlplane


def start_with_crds() -> controlplane.ControlPlane:
    """A started control plane (from ``KUBEBUILDER_ASSETS``) with Kontinue's CRDs served."""
    plane = controlplane.start(controlplane.find_assets())
    try:
        crds = sorted((bench_webhook.ROOT / "manifests/crds").glob("kontinue.dev_*.yaml"))
        plane.kubectl("apply", "--server-side", *(f"-f={path}" for path in crds))
        plane.wait_established(["checkpoints.kontinue.dev", "checkpointpolicies.kontinue.dev"])
    except BaseException:
        plane.stop()
        raise
    return plane


def sample(metrics: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples for Checkpoints with ``labels`` in a /metrics text."""
    wanted = {"group": "kontinue.dev", "resource": "checkpoints", **labels}
    total = 0.0
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        have = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if all(have.get(k) == v for k, v in wanted.items()):
            total += float(value)
    return total


def main(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, None]],
) -> None:
    """Parse the options and ``run``; without the control plane's assets, say so and return."""
    args = parser.parse_args()
    try:
        controlplane.find_assets()
    except controlplane.AssetsMissing as exc:
        print(f"{parser.prog.rsplit('.', 1)[-1]} not run: {exc}")
        return
    asyncio.run(run(args))
