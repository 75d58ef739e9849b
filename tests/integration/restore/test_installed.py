"""The command the webhook injects runs as installed: the ``kontinue-restore`` console script.

The init container's ``command`` is an entry point the package installs (pyproject.toml
``[project.scripts]``), not ``python -m ...``: an image without a ``python`` on PATH still
restores (issue 10). Two installs are exercised for real:

- this environment's (``pip install -e``): the script beside the interpreter;
- the Dockerfile's: its build stage copied file by file into a scratch directory and installed
  with the same ``pip install --prefix`` line, then the command from the webhook's patch run from
  that prefix only (no checkout on the import path). There is no container builder here, so the
  image itself is not built; everything that decides what ``/usr/local/bin`` holds is.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kontinue import keys, restore
from kontinue.models import checkpoint
from kontinue.models import policy as policy_model
from tests.integration.restore import support
from webhook import plumbing

ROOT = support.ROOT


def test_pyproject_installs_the_injected_command() -> None:
    scripts = re.search(
        r"\[project\.scripts\]\n(.*?)\n\n", (ROOT / "pyproject.toml").read_text(), re.S
    )
    assert scripts is not None
    declared = {
        name.strip(): target.strip().strip('"')
        for name, target in (line.split("=", 1) for line in scripts.group(1).splitlines())
    }
    assert declared[restore.COMMAND[0]] == "kontinue.restore.program:main"


def _injected(area: Path) -> tuple[list[str], dict[str, str]]:
    """The init container the webhook's patch adds, with container paths mapped into ``area``
    (as a kubelet's mounts would): command and env."""
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]},
    }
    pol = policy_model.DEFAULT
    mount = pol.spec.storage.mount_path
    plan = plumbing.plumb_pod(
        pod,
        pod_lineage=checkpoint.Lineage(
            namespace="team-a", owner_kind="Job", owner_name="train", owner_uid="u-1"
        ),
        policy=pol,
        restore=plumbing.Restore(checkpoint="train-1", source=f"{mount}/team-a/old"),
        cold_start_reason="",
        image="kontinue:test",
        member="index=0",
    )
    inits = [op["value"] for op in plan.patch if op["path"] == "/spec/initContainers"]
    assert len(inits) == 1
    (container,) = inits[0]
    env = {}
    for item in container["env"]:
        if "value" in item:
            value = item["value"].replace(mount, str(area / "volume"))
            env[item["name"]] = value.replace(plumbing.RESTORE_DIR, str(area / "run"))
    return list(container["command"]), env


def _good_checkpoint(area: Path) -> Path:
    directory = area / "volume" / "team-a" / "old"
    support.trainer_checkpoint(directory)
    return directory


def test_the_environments_console_script_runs_the_injected_command(area: Path) -> None:
    command, env = _injected(area)
    assert command == [restore.SCRIPT]
    script = Path(sys.executable).parent / command[0]
    assert script.is_file(), (
        f"{script} missing: this environment predates the script; run "
        "`.venv/bin/pip install -e '.[test,demo]'`"
    )
    good = _good_checkpoint(area)

    proc = subprocess.run(
        [str(script)],
        env={
            "PATH": f"{script.parent}:/usr/bin:/bin",
            keys.ENV_TERMINATION_LOG: str(area / "termination"),
            **env,
        },
        cwd=area,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr
    assert (area / "run" / "restore-from").resolve() == good.resolve()
    assert "checkpoint train-1" in (area / "termination").read_text()


def _dockerfile_build(prefix: Path, context: Path) -> None:
    """Replay the Dockerfile's build stage: its COPY lines, then its ``pip install`` line."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    build_stage = re.split(r"^FROM ", dockerfile, flags=re.M)[1]
    copies = re.findall(r"^COPY (?!--from)(.+) (\S+)$", build_stage, re.M)
    assert copies, "the Dockerfile's build stage copies nothing"
    for sources, destination in copies:
        for source in sources.split():
            if (ROOT / source).is_dir():
                shutil.copytree(
                    ROOT / source,
                    context / destination,
                    ignore=shutil.ignore_patterns("__pycache__"),
                )
            else:
                shutil.copy2(ROOT / source, context / destination / Path(source).name)
    (install,) = re.findall(r"^RUN (pip install .*)$", build_stage, re.M)
    argv = shlex.split(install)
    argv = [a.replace("--prefix=/install", f"--prefix={prefix}") for a in argv]
    assert f"--prefix={prefix}" in argv, install
    subprocess.run(
        # --ignore-installed: never uninstall this environment's own (editable) install.
        [sys.executable, "-m", *argv, "--quiet", "--no-deps", "--ignore-installed"],
        cwd=context,
        capture_output=True,
        timeout=300,
        check=True,
    )


def test_the_dockerfiles_install_runs_the_injected_command(area: Path, tmp_path: Path) -> None:
    prefix, context = tmp_path / "install", tmp_path / "context"
    context.mkdir()
    _dockerfile_build(prefix, context)
    site = next(prefix.glob("lib/python3*/site-packages"))
    command, env = _injected(area)
    good = _good_checkpoint(area)
    image_env = {
        # The image's PATH and import path: the install prefix only, nothing of this checkout.
        "PATH": f"{prefix / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": str(site),
        keys.ENV_TERMINATION_LOG: str(area / "termination"),
        **env,
    }
    where = subprocess.run(
        [sys.executable, "-c", "import kontinue.restore.program as p; print(p.__file__)"],
        env=image_env,
        cwd=area,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(str(site))

    proc = subprocess.run(
        command,
        env=image_env,
        cwd=area,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr
    assert (area / "run" / "restore-from").resolve() == good.resolve()
    assert shutil.which(command[0], path=image_env["PATH"]) == str(prefix / "bin" / command[0])


@pytest.mark.parametrize("argv", [["--help"], ["-h"]])
def test_help_prints_usage(area: Path, argv: list[str]) -> None:
    result = support.run(area, {}, *argv)
    assert result.code == 0
    assert result.stdout.startswith(f"usage: {restore.SCRIPT}")
    assert result.stderr == ""
