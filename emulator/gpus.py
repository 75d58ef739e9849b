"""Emulated GPU nodes: the capacity and GPU Feature Discovery labels a real NVIDIA node carries.

One definition serves the emulated cluster (nodes created in the API emulator) and the kind
scripts (``kind/gpus.sh`` patches real kind workers with the output of this module's CLI), so
the demo on this machine and the demo on kind see the same GPUs. The technique is the one
Kueue's own e2e suite uses (test/e2e/tas/baseline/suite_test.go: patch node status capacity);
label names and example values are from NVIDIA/k8s-device-plugin
docs/gpu-feature-discovery/README.md.

Usage (prints JSON)::

    python -m emulator.gpus labels --product NVIDIA-H100-80GB-HBM3 --count 4
    python -m emulator.gpus status-patch --count 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from kontinue import keys


@dataclasses.dataclass(frozen=True)
class GpuProfile:
    product: str = "NVIDIA-H100-80GB-HBM3"
    count: int = 4
    memory_mib: int = 81559
    family: str = "hopper"
    driver_major: str = "580"
    runtime_major: str = "13"

    def labels(self) -> dict[str, str]:
        """The GFD labels (``nvidia.com/gpu.product`` and friends) for a node of this profile."""
        return {
            "nvidia.com/gpu.present": "true",
            keys.GPU_PRODUCT_LABEL: self.product,
            keys.GPU_COUNT_LABEL: str(self.count),
            keys.GPU_MEMORY_LABEL: str(self.memory_mib),
            "nvidia.com/gpu.family": self.family,
            keys.CUDA_DRIVER_MAJOR_LABEL: self.driver_major,
            "nvidia.com/cuda.runtime-version.major": self.runtime_major,
        }

    def status_patch(self) -> list[dict[str, Any]]:
        """JSON patch for ``nodes/status`` advertising ``nvidia.com/gpu`` as an extended resource.

        ``~1`` escapes the ``/`` of the resource name (RFC 6901). ``add`` replaces an existing
        value, so the patch is idempotent — re-apply it after a node is recreated, since the
        kubelet zeroes extended resources then (pkg/kubelet/kubelet_node_status.go).
        """
        value = str(self.count)
        return [
            {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": value},
            {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": value},
        ]


A100 = GpuProfile(
    product="NVIDIA-A100-SXM4-80GB", memory_mib=81920, family="ampere", driver_major="550"
)
H100 = GpuProfile()
PROFILES = {"h100": H100, "a100": A100}


def _profile(args: argparse.Namespace) -> GpuProfile:
    base = PROFILES[args.profile]
    changes: dict[str, Any] = {}
    if args.product:
        changes["product"] = args.product
    if args.count is not None:
        changes["count"] = args.count
    if args.driver_major:
        changes["driver_major"] = args.driver_major
    return dataclasses.replace(base, **changes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator.gpus", description=__doc__)
    parser.add_argument("what", choices=["labels", "label-args", "status-patch"])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="h100")
    parser.add_argument("--product")
    parser.add_argument("--count", type=int)
    parser.add_argument("--driver-major")
    args = parser.parse_args(argv)
    profile = _profile(args)
    if args.what == "labels":
        print(json.dumps(profile.labels(), sort_keys=True))
    elif args.what == "label-args":  # for `kubectl label node N $(...)`
        print(" ".join(f"{k}={v}" for k, v in sorted(profile.labels().items())))
    else:
        print(json.dumps(profile.status_patch()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
