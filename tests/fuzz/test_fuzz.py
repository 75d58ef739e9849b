"""The bounded fuzz run inside ``make test``: the admission handlers and the restore program
(``make fuzz`` runs the same properties at least 100,000 times: ``python -m tests.fuzz``).
Derandomized here, so the suite is repeatable; the full run draws fresh inputs each time and
prints its seed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given

from kontinue import checkpoint_format
from tests.fuzz import inputs, properties, runs
from tests.fuzz import restore as restore_fuzz

EXAMPLES = 3000
"""About a minute on the project's 2-core machine (docs/security.md)."""


@pytest.mark.parametrize("seed_index", range(len(inputs.SEEDS)))
@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize("state_index", range(len(inputs.STATES)))
def test_every_seed_unchanged_keeps_the_properties(
    seed_index: int, path: str, state_index: int
) -> None:
    body = json.dumps(inputs.SEEDS[seed_index]).encode()
    case = inputs.Case(body, path, state_index, seed_index, 0)
    problems = properties.check(case)
    assert problems == [], f"{problems}\n{case.describe()}"


@runs.derandomized(EXAMPLES)
@given(inputs.cases())
def test_bent_reviews_keep_the_properties(case: inputs.Case) -> None:
    problems = properties.check(case)
    assert problems == [], f"{problems}\n{case.describe()}"


# --- the restore program (tests/fuzz/restore.py) ---------------------------------------------

RESTORE_EXAMPLES = 400
"""10-20 s on the project's 2-core machine: each input is a real directory tree."""


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return Path(os.path.realpath(tmp_path))  # the program refuses paths through a symlink


@pytest.mark.parametrize("mode", restore_fuzz.MODES)
@pytest.mark.parametrize(
    "damage",
    sorted({*restore_fuzz.HARMLESS, *restore_fuzz.FILE_DAMAGES, *restore_fuzz.DIRECTORY_DAMAGES}),
)
@pytest.mark.parametrize("member", [restore_fuzz.MEMBER, "index=1"])
def test_every_damage_in_every_mode_keeps_the_properties(
    scratch: Path, mode: str, damage: str, member: str
) -> None:
    """Each damage alone, on a checkpoint as the format writes it: the outcome is the promised
    one (an intact checkpoint of this member restores, a damaged one or another member's never
    does), with a documented code and one line."""
    files = (("shards/rank0.pt", b"shards/rank0.pt:\x00\x01"), ("state.bin", b"state.bin:x"))
    written = restore_fuzz._manifest(files, restore_fuzz.MEMBER)
    case = restore_fuzz.Case(
        files=files,
        manifest=json.dumps(written, sort_keys=True).encode(),
        manifest_bent=False,
        damage=damage,
        target=1,
        mode=mode,
        member_env=member,
        member_written=restore_fuzz.MEMBER,
        env_junk=(),
        argv=(),
    )
    assert restore_fuzz.check(case, scratch) == [], case.describe()


def test_the_hand_built_manifest_is_the_writers(tmp_path: Path) -> None:
    """The fuzzer's manifests are what kontinue.checkpoint_format.write_manifest writes."""
    files = (("a/b.bin", b"a/b.bin:1"), ("c.json", b"c.json:{}"))
    for name, data in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    checkpoint_format.write_manifest(tmp_path, member="index=0")
    written = json.loads((tmp_path / checkpoint_format.MANIFEST_NAME).read_text())
    assert restore_fuzz._manifest(files, "index=0") == written


@runs.derandomized(RESTORE_EXAMPLES, also=[HealthCheck.function_scoped_fixture])
@given(restore_fuzz.cases())
def test_bent_checkpoints_end_with_a_documented_code(
    scratch: Path, case: restore_fuzz.Case
) -> None:
    problems = restore_fuzz.check(case, scratch)
    assert problems == [], f"{problems}\n{case.describe()}"
