"""The GPU profile shared by the emulated cluster and the kind scripts."""

from __future__ import annotations

import json
import subprocess
import sys

from emulator import gpus
from kontinue import keys


def test_a100_profile_labels_carry_what_checkpoint_fingerprints_compare() -> None:
    labels = gpus.A100.labels()
    assert labels[keys.GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
    assert labels[keys.CUDA_DRIVER_MAJOR_LABEL] == "550"
    assert labels[keys.GPU_COUNT_LABEL] == "4"


def test_status_patch_escapes_the_resource_name() -> None:
    patch = gpus.GpuProfile(count=2).status_patch()
    assert patch == [
        {"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "2"},
        {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "2"},
    ]


def test_cli_prints_what_the_kind_script_applies() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "emulator.gpus", "label-args", "--profile", "a100", "--count", "8"],
        check=True,
        capture_output=True,
        text=True,
    )
    args = dict(item.split("=", 1) for item in run.stdout.split())
    assert args[keys.GPU_COUNT_LABEL] == "8"
    assert args[keys.GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
    patch = subprocess.run(
        [sys.executable, "-m", "emulator.gpus", "status-patch", "--count", "8"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(patch.stdout)[0]["value"] == "8"
