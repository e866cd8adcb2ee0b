"""The launcher's preflight and config loading on paths and values a cluster can really hand it: a checkpoint
directory under one the trainer's uid cannot enter (common on FSx), a path the kernel refuses as too long,
dangling and looping symlinks, a FIFO where the config should be, numbers too large for any field. Each ends as
one failed check or one ConfigError line, never a traceback, a hang, or a pass that a save then contradicts."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.checks import Status
from grpo_launcher.config import ConfigError, parse_run_config
from grpo_launcher.host_checks import HostPaths, check_checkpoint_dir

from tests.support.launcher import base_config

UNPRIVILEGED = 65534  # nobody: root enters every directory, the trainer's uid does not


def _check_as(uid: int | None, host: HostPaths, directory: Path, out: Any) -> None:
    try:
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        result = check_checkpoint_dir(host, directory, 0.001)
        out.send((result.status.value, result.reason))
    except BaseException as exc:  # what the user would have seen as a traceback
        out.send(("traceback", f"{type(exc).__name__}: {exc}"))


def checkpoint_check(host: HostPaths, directory: Path, uid: int | None = None) -> tuple[str, str]:
    """The checkpoint check's (status, message), run in a forked process under `uid` (as the trainer runs)."""
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_check_as, args=(uid, host, directory, send))
    child.start()
    child.join(120)
    assert receive.poll(), f"the check produced nothing (exit code {child.exitcode})"
    status, message = receive.recv()
    return str(status), str(message)


def test_a_checkpoint_dir_under_one_the_trainer_cannot_enter_fails_the_check(host: HostPaths, tmp_path: Path) -> None:
    locked = tmp_path / "fsx" / "team-b"
    locked.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "fsx", 0o755)
    os.chmod(locked, 0o700)  # root's: the trainer's uid cannot enter it
    status, message = checkpoint_check(host, locked / "run-1" / "checkpoints", uid=UNPRIVILEGED)
    assert status == Status.FAIL.value, message
    assert f"uid {UNPRIVILEGED}" in message and "Permission denied" in message and "fix:" in message


@pytest.mark.parametrize("shape", ["component", "whole"])
def test_a_path_the_kernel_refuses_as_too_long_fails_the_check(host: HostPaths, tmp_path: Path, shape: str) -> None:
    directory = tmp_path / ("x" * 300) if shape == "component" else tmp_path.joinpath(*["d" * 200] * 30)
    status, message = checkpoint_check(host, directory / "checkpoints")
    assert status == Status.FAIL.value, message
    assert "File name too long" in message and len(message) < 600


def test_a_dangling_symlink_on_the_checkpoint_path_fails_the_check(host: HostPaths, tmp_path: Path) -> None:
    (tmp_path / "ckpt").symlink_to(tmp_path / "volume-not-mounted")
    status, message = checkpoint_check(host, tmp_path / "ckpt" / "run-1")
    assert status == Status.FAIL.value, message
    assert "does not exist" in message


def test_a_looping_symlink_on_the_checkpoint_path_fails_the_check(host: HostPaths, tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    status, message = checkpoint_check(host, tmp_path / "loop" / "run-1")
    assert status == Status.FAIL.value, message
    assert "symlink loop" in message


def test_a_fifo_at_the_config_path_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "run-config.json"
    os.mkfifo(fifo)  # nobody ever writes to it: an open for reading waits forever
    try:
        done = subprocess.run(
            [sys.executable, "-m", "grpo_launcher", "preflight", "--config", str(fifo)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,  # a hang guard: the old launcher blocked here
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher blocked opening a FIFO as its run config")
    assert done.returncode != 0
    assert "is not a regular file (a FIFO)" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("field", "literal", "why"),
    [
        ("gpus", "9" * 5000, "digits"),
        ("metricsPort", "9" * 4400, "digits"),
        ("checkpointGiB", "1e400", "finite"),
        ("shmMinGiB", "-1e400", "finite"),
    ],
    ids=["gpus of 5000 digits", "metricsPort of 4400 digits", "checkpointGiB 1e400", "shmMinGiB -1e400"],
)
def test_a_number_too_large_for_any_field_is_one_config_error(
    tmp_path: Path, field: str, literal: str, why: str
) -> None:
    config = base_config(tmp_path)
    config["preflight"][field] = "@@"
    text = json.dumps(config).replace('"@@"', literal)
    with pytest.raises(ConfigError, match=why) as raised:
        parse_run_config(text)
    assert len(str(raised.value)) < 600
