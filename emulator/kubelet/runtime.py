"""A container runtime whose containers are real local processes receiving real signals.

Each container is one process in its own process group (``start_new_session``), so every signal
reaches its children too, and when the main process ends the rest of the group is SIGKILLed (a
container's PID namespace dies with its init process). Output goes to the container's log file.

Stopping follows the kubelet (pkg/kubelet/kuberuntime/kuberuntime_container.go ``killContainer``,
``executePreStopHook``; ``minimumGracePeriodInSeconds = 2``): run the preStop hook for at most the
grace period and take its whole elapsed seconds off the grace, never give less than 2 s, then the
runtime's StopContainer: SIGTERM, wait the remaining grace, SIGKILL (exit code 137).

The termination message is read after exit as the kubelet does (``getTerminationMessage``): the
last 4096 bytes of the container's termination-message file; with ``FallbackToLogsOnError`` and a
non-zero exit and an empty file, the last 80 log lines capped at 2048 bytes. Exit code 0 is
``Completed``, anything else ``Error`` (there is no OOM killer here).

Images are not pulled or unpacked: the image name only selects a default entrypoint from
:class:`Commands`, and ``argv[0]`` must be a command :class:`Commands` maps to a host executable
(``python``/``python3`` -> this interpreter; the image's console scripts, such as
``kontinue-restore``, -> the ones installed beside it). Anything else ends at once as containerd
reports it: terminated, exit code 128, reason ``StartError``, with a message naming the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import datetime
import math
import os
import posixpath
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from emulator.kubelet import launch, state
from kontinue import restore

MAX_MESSAGE_BYTES = 4096  # kubecontainer.MaxContainerTerminationMessageLength
MAX_FALLBACK_LOG_LINES = 80  # kubecontainer.MaxContainerTerminationMessageLogLines
MAX_FALLBACK_LOG_BYTES = 2048  # kubecontainer.MaxContainerTerminationMessageLogLength
MINIMUM_GRACE_SECONDS = 2  # kuberuntime minimumGracePeriodInSeconds
START_ERROR_EXIT_CODE = 128

_IMAGE_SCRIPTS = {
    restore.SCRIPT: "kontinue.restore",
    "kontinue-webhook": "webhook",
    "kontinue-bridge": "queue_bridge",
}
_HOST_TOOLS = ("sh", "bash", "sleep", "true", "false", "echo", "cat", "env", "ls", "mkdir", "touch")


@dataclasses.dataclass(frozen=True)
class Commands:
    """Which container commands run locally, and each image's default entrypoint.

    ``executables``: command name (or absolute path's basename) -> host executable.
    ``entrypoints``: image name (tag and digest ignored) -> argv used when a container has no
    ``command``.
    """

    executables: Mapping[str, str]
    entrypoints: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    modules: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Console script -> module run with this interpreter, for scripts not installed here."""
    # What the image would have installed: this checkout, importable by mapped Python commands.
    python_path: str | None = str(Path(__file__).resolve().parents[2])

    def env_for(self, argv: tuple[str, ...], env: Mapping[str, str]) -> dict[str, str]:
        """The process env: the container's, plus PYTHONPATH for the image's Python."""
        out = dict(env)
        if argv[0] == sys.executable and self.python_path and "PYTHONPATH" not in out:
            out["PYTHONPATH"] = self.python_path
        return out

    @classmethod
    def default(cls, *, entrypoints: Mapping[str, tuple[str, ...]] | None = None) -> Commands:
        table = {"python": sys.executable, "python3": sys.executable}
        # The image's console scripts (pyproject.toml [project.scripts], installed into
        # /usr/local/bin by the Dockerfile): the ones this interpreter's environment installed.
        # An environment installed before a script was added runs its module instead.
        scripts = Path(sys.executable).parent
        modules = {}
        for script, module in _IMAGE_SCRIPTS.items():
            if (scripts / script).is_file():
                table[script] = str(scripts / script)
            else:
                modules[script] = module
        for tool in _HOST_TOOLS:
            found = shutil.which(tool)
            if found:
                table[tool] = found
        return cls(executables=table, entrypoints=dict(entrypoints or {}), modules=modules)

    def argv(self, spec: launch.LaunchSpec) -> tuple[str, ...]:
        """The host argv for ``spec`` (kubelet semantics: command replaces the entrypoint)."""
        command = spec.command
        args = spec.args
        if not command:
            image = spec.image.split("@", 1)[0]
            if ":" in image.rsplit("/", 1)[-1]:
                image = image.rsplit(":", 1)[0]
            command = self.entrypoints.get(image)
            if command is None:
                raise StartFailure(
                    f"image {spec.image!r} has no entrypoint known to the emulated runtime "
                    "and the container sets no command"
                )
        argv = (*command, *(args or ()))
        head = argv[0]
        module = self.modules.get(head) or self.modules.get(posixpath.basename(head))
        if module is not None:
            return (sys.executable, "-m", module, *argv[1:])
        host = self.executables.get(head) or self.executables.get(posixpath.basename(head))
        if host is None:
            raise StartFailure(
                f'exec: "{head}": executable file not found in $PATH '
                "(the emulated runtime runs only commands it maps to this machine)"
            )
        return (host, *argv[1:])


class StartFailure(Exception):
    """The container could not be started (the runtime's ``StartError``)."""


@dataclasses.dataclass(frozen=True)
class KillRecord:
    """One stop, as the kubelet log would show it, for tests and the demo's timeline."""

    grace_requested: int
    grace_passed: int  # to StopContainer, after the preStop hook and the 2 s minimum
    pre_stop: str | None  # "completed", "timed out", "failed: ..." or None without a hook
    sigterm_at: float | None  # time.monotonic()
    sigkill_at: float | None


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL this container when the emulator process dies.

    A node's containers die with its kubelet's machine; here the "machine" is this process.
    Without this, a test run that is killed (CI timeout, ^C) would leave trainers running
    forever, holding CPU on a 2-core box. Best effort: only Linux has ``prctl``.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _read_tail(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - limit))
            return stream.read()
    except OSError:
        return b""


def _log_tail(path: Path) -> str:
    lines = _read_tail(path, 1 << 20).splitlines(keepends=True)[-MAX_FALLBACK_LOG_LINES:]
    return b"".join(lines)[-MAX_FALLBACK_LOG_BYTES:].decode("utf-8", errors="replace")


class Container:
    """One started container. ``record()`` is its current state; ``exited`` is set at its end."""

    def __init__(self, spec: launch.LaunchSpec, *, container_id: str, image_id: str) -> None:
        self.spec = spec
        self.container_id = container_id
        self.image_id = image_id
        self.exited = asyncio.Event()
        self.kills: list[KillRecord] = []
        self.ended_at: float | None = None  # time.monotonic() when the process was seen to end
        self._state: state.State = state.Waiting("ContainerCreating")
        self._process: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[state.Terminated] | None = None
        self._hooks: set[asyncio.subprocess.Process] = set()

    # --- state -------------------------------------------------------------------------------

    def record(self) -> state.ContainerRecord:
        return state.ContainerRecord(
            name=self.spec.name,
            state=self._state,
            container_id=self.container_id,
            image=self.spec.image,
            image_id=self.image_id,
        )

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def wait(self) -> state.Terminated:
        await self.exited.wait()
        assert isinstance(self._state, state.Terminated)
        return self._state

    # --- lifecycle ---------------------------------------------------------------------------

    async def _start(self, argv: tuple[str, ...], env: dict[str, str]) -> None:
        spec = self.spec
        spec.cwd.mkdir(parents=True, exist_ok=True)
        for directory in spec.volumes:  # hostPath DirectoryOrCreate, subPath, emptyDir
            directory.mkdir(parents=True, exist_ok=True)
        spec.termination_message_path.parent.mkdir(parents=True, exist_ok=True)
        spec.termination_message_path.write_bytes(b"")
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with spec.log_path.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        started = state.Running(started_at=state.now())
        self._state = started
        self._watcher = asyncio.create_task(self._watch(started.started_at))

    def _fail(self, message: str) -> None:
        at = state.now()
        self.ended_at = time.monotonic()
        self._state = state.Terminated(
            exit_code=START_ERROR_EXIT_CODE,
            reason="StartError",
            message=message,
            started_at=at,
            finished_at=at,
        )
        self.exited.set()

    async def _watch(self, started_at: datetime.datetime) -> None:
        """Wait for the process; whatever happens (even cancellation), end in a terminal state."""
        assert self._process is not None
        try:
            code = await self._process.wait()
        except BaseException:
            # Cancelled (event loop shutting down): the container must not outlive its watcher.
            self._signal_group(signal.SIGKILL)
            self._end(exit_code=128 + signal.SIGKILL, sig=signal.SIGKILL, started_at=started_at)
            raise
        self._signal_group(signal.SIGKILL)  # the rest of the "container" dies with its init
        sig = -code if code < 0 else None
        self._end(exit_code=128 + sig if sig is not None else code, sig=sig, started_at=started_at)

    def _end(self, *, exit_code: int, sig: int | None, started_at: datetime.datetime) -> None:
        self.ended_at = time.monotonic()
        finished = state.now()
        raw = _read_tail(self.spec.termination_message_path, MAX_MESSAGE_BYTES)
        message = raw.decode("utf-8", errors="replace")
        if (
            not message
            and exit_code != 0
            and self.spec.termination_message_policy == "FallbackToLogsOnError"
        ):
            message = _log_tail(self.spec.log_path)
        self._state = state.Terminated(
            exit_code=exit_code,
            reason="Completed" if exit_code == 0 else "Error",
            message=message or None,
            started_at=started_at,
            finished_at=finished,
            signal=sig,
        )
        for hook in list(self._hooks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(hook.pid, signal.SIGKILL)
        self.exited.set()

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, sig)

    async def _run_pre_stop(self, hook: launch.HookSpec, *, commands: Commands, limit: int) -> str:
        if hook.unsupported is not None:
            return f"failed: {hook.unsupported}"
        if hook.sleep_seconds is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(hook.sleep_seconds, limit)):
                    await self.exited.wait()
            return "completed" if hook.sleep_seconds <= limit else "timed out"
        hook_spec = dataclasses.replace(self.spec, command=hook.command, args=None)
        try:
            argv = commands.argv(hook_spec)
        except StartFailure as error:
            return f"failed: {error}"
        with self.spec.log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=commands.env_for(argv, self.spec.env),
                cwd=self.spec.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._hooks.add(process)
        try:
            async with asyncio.timeout(limit):
                code = await process.wait()
        except TimeoutError:
            return "timed out"
        finally:
            self._hooks.discard(process)
        return "completed" if code == 0 else f"failed: exit code {code}"

    async def stop(
        self,
        *,
        grace_seconds: int,
        commands: Commands,
        minimum_grace: int = MINIMUM_GRACE_SECONDS,
        run_pre_stop: bool = True,
    ) -> state.Terminated:
        """preStop, SIGTERM, wait what is left of the grace, SIGKILL; returns the final state.

        A second call while a stop is under way waits for the first (the kubelet does not restart
        a kill in progress).
        """
        if self._stopping is None:
            self._stopping = asyncio.create_task(
                self._stop(
                    grace_seconds=grace_seconds,
                    commands=commands,
                    minimum_grace=minimum_grace,
                    run_pre_stop=run_pre_stop,
                )
            )
        return await asyncio.shield(self._stopping)

    async def _stop(
        self, *, grace_seconds: int, commands: Commands, minimum_grace: int, run_pre_stop: bool
    ) -> state.Terminated:
        if self.exited.is_set():
            return await self.wait()
        grace = grace_seconds
        outcome = None
        hook = self.spec.pre_stop
        if hook is not None and run_pre_stop and grace > 0:
            began = time.monotonic()
            outcome = await self._run_pre_stop(hook, commands=commands, limit=grace)
            grace -= math.floor(time.monotonic() - began)
        grace = max(grace, minimum_grace)
        sigterm_at = sigkill_at = None
        if not self.exited.is_set():
            sigterm_at = time.monotonic()
            self._signal_group(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await self.exited.wait()
            except TimeoutError:
                sigkill_at = time.monotonic()
                self._signal_group(signal.SIGKILL)
        self.kills.append(KillRecord(grace_seconds, grace, outcome, sigterm_at, sigkill_at))
        return await self.wait()

    async def kill_now(self) -> None:
        """SIGKILL without grace (runtime shutdown, test teardown); never waits unbounded."""
        if self._process is None or self.exited.is_set():
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await self.exited.wait()
        if not self.exited.is_set() and self._watcher is not None:
            self._watcher.cancel()  # its cancellation path records the end


class Runtime:
    """Starts containers as processes and keeps them so they can be found and cleaned up."""

    def __init__(self, *, commands: Commands | None = None) -> None:
        self.commands = commands or Commands.default()
        self.containers: list[Container] = []

    async def start(self, spec: launch.LaunchSpec) -> Container:
        """Start ``spec``; a command that cannot run locally gives a StartError container."""
        container = Container(
            spec,
            container_id=f"emulator://{secrets.token_hex(32)}",
            image_id=f"emulator://image/{spec.image}",
        )
        self.containers.append(container)
        try:
            argv = self.commands.argv(spec)
        except StartFailure as error:
            container._fail(str(error))
            return container
        try:
            await container._start(argv, self.commands.env_for(argv, spec.env))
        except OSError as error:
            container._fail(f"failed to start {argv[0]!r}: {error}")
        return container

    async def close(self) -> None:
        """Kill every container still running (idempotent)."""
        for container in self.containers:
            await container.kill_now()
