"""``python -m emulator.demo --workload torch``: the scavengers' jobs, the equality verdict and
its row in the report (a full torch demo is minutes of CPU: run by hand, see docs/demo.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from emulator.demo import metrics, observe, report, scenario, timeline, torch_workload
from emulator.demo.timeline import PodRecord, Role

REFERENCE = "steps=64 params=ab12"


def _pod(job: str, pod: str, **fields: Any) -> PodRecord:
    return PodRecord(job=job, pod=pod, role=Role.SCAVENGER, gpus=1, node="n", created=0.0, **fields)


def _run(*pods: PodRecord) -> timeline.Run:
    return timeline.Run(
        name="r", duration=10, gpus_total=2, steps_per_second=5, pods=pods, workload="torch"
    )


def test_verdict_is_yes_only_when_every_finished_scavenger_has_the_reference_parameters() -> None:
    preempted = _pod("scavenger-0", "a", exit_code=143, terminating=1.0)
    finished = _pod("scavenger-0", "b", exit_code=0, done=REFERENCE)
    unfinished = _pod("scavenger-1", "c", exit_code=None)
    assert torch_workload.verdict(_run(preempted, finished, unfinished), REFERENCE) == (
        "yes (1 of 2 finished)"
    )
    wrong = _pod("scavenger-1", "d", exit_code=0, done="steps=64 params=ffff")
    assert torch_workload.verdict(_run(finished, wrong), REFERENCE) == (
        "no (1 of 2 finished differ)"
    )
    assert torch_workload.verdict(_run(preempted, unfinished), REFERENCE) == ("— (0 of 2 finished)")


def test_the_verdict_is_a_row_of_the_report() -> None:
    run = _run(_pod("scavenger-0", "b", exit_code=0, started=0, running=0, ended=5, done="x"))
    row = ("final parameters equal the uninterrupted run", ["yes (1 of 1 finished)", "no"])
    text = report.table([metrics.report(run), metrics.report(run)], [row])
    last = text.splitlines()[-1]
    assert re.fullmatch(
        r"final parameters equal the uninterrupted run +\| +yes \(1 of 1 "
        r"finished\) \| +no",
        last,
    ), last


def test_the_recorder_reads_the_torch_trainers_steps_and_final_line() -> None:
    log = "STEP 7 epoch=0 loss=0x1.8p+0\nSTEP 8 epoch=0 loss=0x1.4p+0\nDONE steps=8 params=cd\n"
    assert observe.PROGRESS.findall(log) == ["7", "8"]
    assert observe.PROGRESS.findall("PROGRESS step=3 steps=9\n") == ["3"]
    assert observe.DONE.findall(log) == ["steps=8 params=cd"]


def test_with_workload_torch_scavengers_train_torch_and_priority_jobs_do_not() -> None:
    options = scenario.Options(workload="torch", torch_epochs=2, rate=4.0)
    kinds = {}
    for role in (Role.SCAVENGER, Role.PRIORITY):
        job = scenario.trainer_job("j", role=role, gpus=1, steps=10, options=options)
        container = job["spec"]["template"]["spec"]["containers"][0]
        kinds[role] = (container["command"][-1], {e["name"]: e["value"] for e in container["env"]})
    module, env = kinds[Role.SCAVENGER]
    assert module == "reference_workload.torch_trainer"
    assert env["TRAINER_EPOCHS"] == "2"
    assert env["TRAINER_STEP_SECONDS"] == "0.25"
    assert kinds[Role.PRIORITY][0] == "reference_workload.trainer"
    assert kinds[Role.PRIORITY][1]["TRAINER_STEPS"] == "10"


@pytest.mark.timeout(120)
def test_the_reference_is_the_uninterrupted_runs_final_line() -> None:
    pytest.importorskip("torch")  # CI installs it (Makefile); a bare venv skips
    done = torch_workload.reference(epochs=1)
    assert re.fullmatch(r"steps=16 params=[0-9a-f]{64}", done), done
