"""Suite-wide guards and markers.

Markers (``pytest -m "not slow"`` is the fast inner loop; docs/testing.md):

- ``demo``: runs the demo (tests/integration/demo/);
- ``e2e``: a whole emulated cluster end to end (tests/integration/cluster/, the bridge's
  tests/integration/bridge/test_end_to_end.py and the tests built on it, the CLI's and the SDK's
  cluster tests, the short fault soak tests/soak/test_soak.py) or a real control plane
  (tests/realcp/);
- ``slow``: every ``demo`` and ``e2e`` test, and any test marked so by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
DEMO = ("integration/demo/",)
E2E = (
    "integration/cluster/",
    "integration/bridge/test_end_to_end.py",
    # the tests that start the bridge's end-to-end system or the Volcano-only one
    "integration/bridge/test_failed_restore.py",
    "integration/bridge/test_member_sets.py",
    "integration/bridge/test_observability.py",
    "integration/bridge/test_pod_shapes.py",
    "integration/bridge/test_volcano_preemptions.py",
    "integration/webhook/test_cluster.py",
    # the demo's stack (emulator/demo/stack.py) under the CLI and the SDK
    "integration/cli/test_",
    "integration/sdk/test_hf_cluster.py",
    "integration/sdk/test_shared_cluster.py",
    "integration/sdk/test_torch_cluster.py",
    "realcp/",
    "soak/test_soak.py",
)
WHOLE_CLUSTER = (
    "cluster.Cluster(",
    "stack.running(",
    "harness.kube(",
    "harness.running(",
    "test_end_to_end import",
    "volcano_system(",
)
"""What a test module that starts a whole emulated cluster says (tests/unit/suite/test_guards.py
checks each such module is marked ``e2e`` by its path above)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes long; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "demo: runs the demo (implies slow)")
    config.addinivalue_line("markers", "e2e: a whole emulated cluster or control plane (slow)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(HERE).as_posix() if item.path.is_relative_to(HERE) else ""
        marks = [
            name for name, prefixes in (("demo", DEMO), ("e2e", E2E)) if where.startswith(prefixes)
        ]
        for name in marks:
            item.add_marker(name)
        if marks:
            item.add_marker("slow")


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """A test that leaves a task running fails, naming it; the task is then cancelled.

    Set up before and torn down after every other fixture of the test, so what is still running
    here was left behind by the test (or a fixture of it) rather than ended. Cancelling
    re-cancels until each task really ends: on Python 3.11 ``asyncio.wait_for`` can swallow a
    cancellation that races its inner future's completion (CPython gh-86296), and such a task
    would otherwise keep pytest-asyncio's loop teardown waiting forever. Bounded: after 10 s the
    test errors, naming what would not stop.
    """
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()  # teardown may run in another task than setup
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    leaked = [t for t in asyncio.all_tasks() if t is not current and t not in before]
    leaked = [t for t in leaked if not t.done()]
    names = sorted(t.get_name() + ": " + repr(t.get_coro())[:120] for t in leaked)
    while pending := [t for t in leaked if not t.done()]:
        if loop.time() > deadline:
            pytest.fail(f"tasks would not stop after cancellation: {pending!r}"[:2000])
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=0.1)
    if names:
        pytest.fail(f"the test left {len(names)} task(s) running: {names}"[:2000])
