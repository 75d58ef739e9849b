"""The one process runner (kontinue.supervision) in real processes: a root task that ends takes
the process down with it, logged once, its sibling root tasks cancelled; SIGTERM ends it with 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap

from tests import fixtures

PROGRAM = textwrap.dedent(
    """
    import asyncio, sys
    from kontinue import supervision

    async def watch(after: float) -> None:
        await asyncio.sleep(after)
        raise RuntimeError("the watch broke")

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            print("sibling cancelled", flush=True)

    async def body(config: float, stop: asyncio.Event) -> int:
        async with supervision.Supervisor() as supervisor:
            supervisor.spawn(watch(config), name="watch:pods")
            supervisor.spawn(sibling(), name="certificates")
            print("running", flush=True)
            return 1 if await supervisor.wait(stop) is not None else 0

    supervision.main("test-program", lambda: float(sys.argv[1]), body)
    """
)


async def _run(fail_after: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROGRAM,
        str(fail_after),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=fixtures.ROOT,
    )


async def test_a_root_task_that_fails_ends_the_process_once_logged() -> None:
    process = await _run(0.3)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    log = stderr.decode()
    assert process.returncode == 1, log
    assert log.count("root task watch:pods failed: RuntimeError('the watch broke')") == 1, log
    assert log.count("Traceback") == 1, log  # logged once, not re-raised by asyncio.run
    assert "root task certificates" not in log  # cancelled by the stop, not reported
    assert stdout.decode().splitlines() == ["running", "sibling cancelled"]


async def test_sigterm_stops_every_root_task_and_exits_zero() -> None:
    process = await _run(3600)
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 30) == b"running\n"
    process.send_signal(signal.SIGTERM)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    assert stdout.decode().splitlines() == ["sibling cancelled"]
    assert "root task" not in stderr.decode()


LOGGING = textwrap.dedent(
    """
    import asyncio, logging
    from kontinue import supervision, telemetry

    async def body(config: None, stop: asyncio.Event) -> int:
        tel = telemetry.setup("kontinue-bridge", environ={})
        with tel.tracer.start_as_current_span("kontinue.eviction") as span:
            with telemetry.about("Workload", "team-a", "job-train-1"):
                logging.getLogger("kontinue.bridge").info("checkpoint created members=%d", 2)
        print(format(span.get_span_context().trace_id, "032x"), flush=True)
        return 0

    supervision.main("test-program", lambda: None, body)
    """
)


async def _logged(environ: dict[str, str]) -> tuple[str, list[str]]:
    """The trace id the program printed and its log lines (stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KONTINUE_LOG", "OTEL_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LOGGING,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=fixtures.ROOT,
        env={**env, **environ},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode().strip(), stderr.decode().splitlines()


async def test_logs_are_text_by_default_and_json_objects_when_asked() -> None:
    """Issue 12, logs: ``KONTINUE_LOG_FORMAT=json`` gives one JSON object per line with the
    object's namespace/name and the trace id; text stays the default (kontinue/telemetry.py,
    set up by this runner for both deployables)."""
    _, text = await _logged({})
    (line,) = [line for line in text if "checkpoint created" in line]
    assert line.endswith("INFO kontinue.bridge: checkpoint created members=2"), line
    assert not line.startswith("{"), line

    trace_id, lines = await _logged({"KONTINUE_LOG_FORMAT": "json"})
    (record,) = [json.loads(line) for line in lines]  # every line is one JSON object
    assert record["message"] == "checkpoint created members=2"
    assert (record["level"], record["logger"]) == ("INFO", "kontinue.bridge")
    assert (record["kind"], record["namespace"], record["name"]) == (
        "Workload",
        "team-a",
        "job-train-1",
    )
    assert record["trace_id"] == trace_id
    assert len(trace_id) == 32
