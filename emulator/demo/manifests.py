"""The demo scenario as YAML for a real cluster: what ``kind/demo.sh`` applies.

The same objects ``scenario.run`` creates on the emulated cluster — priority classes, the
ResourceFlavor / ClusterQueue / LocalQueue, the CheckpointPolicy (hostPath on the directory
every kind worker mounts, see kind/cluster.yaml) and the eight scavenger Jobs — so the kind
demo and the local demo cannot drift apart. ``--priority NAME --gpus N`` prints one priority
Job instead, to trigger a preemption by hand.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from emulator.demo import scenario, timeline
from kontinue import keys

KIND_CHECKPOINT_PATH = "/var/lib/kontinue/checkpoints"


def scavenger_setup(options: scenario.Options, *, opted_in: bool = True) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = list(scenario.priority_classes())
    for _, obj in scenario.queues(options.nodes * options.gpus_per_node):
        objects.append(obj)
    if opted_in:
        cq = objects[-2]
        cq["metadata"]["labels"] = {keys.ENABLED_LABEL: "true", keys.POLICY_LABEL: scenario.POLICY}
        objects.insert(0, scenario.policy(options, host_path=KIND_CHECKPOINT_PATH))
    for index in range(options.scavengers):
        objects.append(
            scenario.trainer_job(
                f"scavenger-{index}",
                role=timeline.Role.SCAVENGER,
                gpus=1,
                steps=10**9,
                options=options,
            )
        )
    return objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator.demo.manifests", description=__doc__)
    parser.add_argument("--priority", help="print one priority Job of this name instead")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--not-opted-in", action="store_true", help="the baseline")
    parser.add_argument("--grace-seconds", type=int, default=30)
    parser.add_argument("--checkpoint-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    options = scenario.Options(
        grace_seconds=args.grace_seconds, checkpoint_seconds=args.checkpoint_seconds, rate=2.0
    )
    if args.priority:
        objects = [
            scenario.trainer_job(
                args.priority,
                role=timeline.Role.PRIORITY,
                gpus=args.gpus,
                steps=args.steps,
                options=options,
            )
        ]
    else:
        objects = scavenger_setup(options, opted_in=not args.not_opted_in)
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
