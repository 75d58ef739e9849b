"""The suite's own guards (tests/conftest.py), run on a small inner pytest session."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
CONFTEST = (Path(__file__).parents[2] / "conftest.py").read_text()
INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def test_a_test_that_leaves_a_task_running_fails_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import asyncio

        async def test_leaks():
            asyncio.create_task(asyncio.sleep(3600), name="forgotten")

        async def test_cleans_up():
            task = asyncio.create_task(asyncio.sleep(3600), name="stopped")
            task.cancel()
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the test left 1 task(s) running: ['forgotten: *"])


def test_paths_mark_slow_tests(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    for path in ("integration/demo/test_d.py", "integration/cluster/test_c.py", "unit/test_u.py"):
        pytester.path.joinpath(path).parent.mkdir(parents=True, exist_ok=True)
        pytester.path.joinpath(path).write_text("def test_x():\n    pass\n")
    fast = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not slow")
    fast.assert_outcomes(passed=1)
    assert pytester.runpytest_inprocess("-m", "demo").parseoutcomes() == {
        "passed": 1,
        "deselected": 2,
    }
    assert pytester.runpytest_inprocess("-m", "e2e").parseoutcomes() == {
        "passed": 1,
        "deselected": 2,
    }


def test_every_module_that_starts_a_whole_emulated_cluster_is_marked_e2e() -> None:
    from tests import conftest

    tests = Path(conftest.__file__).parent
    unmarked = []
    for module in sorted(tests.rglob("test_*.py")):
        where = module.relative_to(tests).as_posix()
        if where.startswith("unit/") or where.startswith(conftest.DEMO + conftest.E2E):
            continue
        text = module.read_text()
        if any(sign in text for sign in conftest.WHOLE_CLUSTER):
            unmarked.append(where)
    assert unmarked == [], "add these to E2E in tests/conftest.py"
