"""Kueue as one switch of the emulated cluster: ``Cluster(..., queue_system="kueue")``.

Installs Kueue's upstream CRDs (kubernetes-sigs/kueue ``config/components/crd/bases``, copied
as data in tests/fixtures) and starts :class:`emulator.kueue.controller.Kueue` with its Job
webhook. Queues, flavors and priority classes are the caller's to create, as on a real cluster.
"""

from __future__ import annotations

from pathlib import Path

from emulator.apiserver import server
from emulator.kueue import controller

_FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
CRDS = (_FIXTURES / "upstream" / "kueue" / "crds", _FIXTURES / "kueue-emulation")


async def start(api: server.ApiServer) -> controller.Kueue:
    for directory in CRDS:
        controller.install_crds(api, directory)
    kueue = controller.Kueue(api)
    await kueue.start()
    return kueue
