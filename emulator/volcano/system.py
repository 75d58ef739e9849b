"""Volcano as one switch of the emulated cluster: ``Cluster(..., queue_system="volcano")``.

Installs Volcano's upstream CRDs (volcano-sh/volcano ``config/crd/volcano/bases``, copied as
data in tests/fixtures) and starts the emulated scheduler and vc-controller. Queues and
priority classes are the caller's to create.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from emulator.apiserver import server
from emulator.kueue import controller as kueue_controller
from emulator.volcano import controller, scheduler

CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "upstream" / "volcano" / "crds"


@dataclasses.dataclass
class Volcano:
    scheduler: scheduler.VolcanoScheduler
    controller: controller.VolcanoJobController

    async def stop(self) -> None:
        await self.controller.stop()
        await self.scheduler.stop()


async def start(api: server.ApiServer, *, period: float = 0.5) -> Volcano:
    kueue_controller.install_crds(api, CRDS)
    running = Volcano(
        scheduler.VolcanoScheduler(api, period=period), controller.VolcanoJobController(api)
    )
    await running.scheduler.start()
    await running.controller.start()
    return running
