"""Kontinue's workload SDK: keep the checkpoint contract in three lines of a training script.

Stdlib only at its core (:mod:`kontinue_sdk.session`, :mod:`kontinue_sdk.environment`; they
import kontinue.checkpoint_format and kontinue.keys, which are stdlib only, and ``kontinue``'s
``__init__`` imports nothing), so a training image needs only ``pip install kontinue --no-deps``.
The adapters import their framework: :mod:`kontinue_sdk.pytorch` (torch) and
:mod:`kontinue_sdk.hf` (transformers). docs/workload-contract.md has the recipes.
"""

from kontinue_sdk.session import Request, RestoreRefused, Session

__all__ = ["Request", "RestoreRefused", "Session"]
