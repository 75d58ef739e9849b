"""Issue 13, "Done when": docs/cli.md shows a real session, captured from the demo cluster.

``python -m emulator.demo.cli_session --update docs/cli.md`` wrote it; this test captures the
session again (the installed console script against the demo's emulated cluster, Kontinue's
real webhook and bridge over HTTPS, the Job controller's real pod-failure backoff) and compares
it with the document, command by command, all but what differs from run to run: times, UIDs,
generated names, steps, sizes, durations and column widths
(``emulator.demo.cli_session.normalized``). A change to what a command prints, or to what it
does to the cluster, fails here until docs/cli.md is captured again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.demo import cli_session

pytestmark = pytest.mark.timeout(600)

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"


def test_normalized_keeps_what_a_run_decides_and_drops_what_it_does_not() -> None:
    one = (
        "$ kubectl kontinue list\n"
        "job/a   gpu-cq   1/0   step 47, 14s ago   a-f470f41c74 (2m3s ago)\n"
    )
    two = "$ kubectl kontinue list\njob/a gpu-cq 1/0 step 9, 3s ago a-0123456789 (9s ago)\n"
    assert cli_session.normalized(one) == cli_session.normalized(two)
    other = two.replace("1/0", "0/1")
    assert cli_session.normalized(one) != cli_session.normalized(other)
    doc = "# t\n\n## A session\n\ntext\n\n```console\nold\n```\n\nrest\n"
    spliced = cli_session.splice(doc, "$ new\nout\n")
    assert cli_session.session_block(spliced) == "$ new\nout\n"
    assert spliced.endswith("```\n\nrest\n")


async def test_the_session_in_docs_cli_md_is_what_the_demo_cluster_prints(
    tmp_path: Path,
) -> None:
    transcript = await cli_session.capture(tmp_path)
    got = cli_session.normalized(transcript)
    want = cli_session.normalized(cli_session.session_block(DOC.read_text()))
    assert [command for command, _ in got] == [command for command, _ in want], transcript
    for (command, lines), (_, expected) in zip(got, want, strict=True):
        assert lines == expected, f"{command}\n--- captured now:\n{transcript}"
