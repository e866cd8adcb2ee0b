"""The Ray pods' preStop hook against the miles stand-in (devtools/grpo_dev/fake_miles.py, which checks the
sentinel after each step, saves the model and the tracker, then the rollout data state, then deletes the sentinel,
as miles's train.py:76-90,120-126 does): it returns with the new checkpoint once miles says the save is done, gives
up at its wait when the step never ends, and at once when the launcher's marker is gone or stale. The wait is
counted in the hook's polls on an injected clock, never in real seconds."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpo_dev import fake_miles
from grpo_launcher.cli import main as launcher_main
from grpo_launcher.presave import (
    DATA_STATE,
    HEAD_REPORT,
    MILES_RUNNING,
    REPORT,
    STALE_AFTER_SECONDS,
    TRACKER,
    add_presave,
    report,
    run_presave,
    save_before_exit,
)

POLL = 2.0


class PollClock:
    """The hook's clock advances by one poll each time it sleeps; the real pause is short."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(0.02)
        self.now += seconds


def _wait_for_line(log: Path, text: str) -> None:
    for _ in range(3000):  # a safety net for a loaded machine, not a timing assertion
        if text in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"the stand-in never logged {text!r}: {log.read_text()[-2000:]}")


def _wait_gone(path: Path, log: Path) -> None:
    for _ in range(3000):  # as above
        if not path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"the stand-in never deleted {path}: {log.read_text()[-2000:]}")


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, list[str]]]:
    """A checkpoint directory holding iteration 4, and a way to start the stand-in resuming from it."""
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "iter_0000004").mkdir(parents=True)
    (checkpoints / TRACKER).write_text("4\n")
    (checkpoints / MILES_RUNNING).write_text("1\n")  # as the launcher keeps it while miles runs (launch.py)
    sentinel, log = checkpoints / ".grpo-save-now", tmp_path / "miles.log"
    procs: list[subprocess.Popen[bytes]] = []
    argv = [
        sys.executable,
        fake_miles.__file__,
        "--num-rollout",
        "100000",
        "--fake-checkpoints",
        "--load",
        str(checkpoints),
        "--save",
        str(checkpoints),
        "--save-interval",
        "1000000",  # no periodic save: only the sentinel makes one
        "--save-trigger-sentinel",
        str(sentinel),
        "--fake-step-seconds",
        "0.05",
    ]

    def start(*extra: str) -> None:
        with log.open("wb") as out:
            procs.append(subprocess.Popen([*argv, *extra], stdout=out, stderr=subprocess.STDOUT))

    yield checkpoints, sentinel, log, start  # type: ignore[misc]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_when_miles_saves_the_hook_returns_with_the_new_checkpoint(standin: tuple) -> None:  # type: ignore[type-arg]
    checkpoints, sentinel, log, start = standin
    start()
    _wait_for_line(log, "rollout 6: {")
    clock = PollClock()
    outcome = save_before_exit(sentinel, checkpoints, 100_000, clock=clock, sleep=clock.sleep, poll_seconds=POLL)
    assert outcome.saved and outcome.iteration_before == 4
    assert outcome.iteration is not None and outcome.iteration > 6
    assert (checkpoints / TRACKER).read_text().strip() == str(outcome.iteration)
    assert (checkpoints / f"iter_{outcome.iteration:07d}" / "fake_checkpoint").is_file()
    # miles deletes the sentinel after the whole save (train.py:76-90,124-126): by then the data state is written.
    assert not sentinel.exists() and outcome.data_state
    assert (checkpoints / DATA_STATE.format(outcome.iteration)).is_file()
    assert outcome.seconds < outcome.wait_seconds


def test_the_hook_returns_only_after_miles_wrote_the_data_state_seconds_after_the_tracker(
    standin: tuple,  # type: ignore[type-arg]
) -> None:
    """miles writes the rollout data state after Megatron's tracker (train.py:90); a hook back at the tracker lets
    `ray stop` kill the rollout manager before it, and the resumed run restarts its prompts at sample 0."""
    checkpoints, sentinel, log, start = standin
    start("--fake-data-state-seconds", "5")
    _wait_for_line(log, "rollout 6: {")
    clock = PollClock()
    outcome = save_before_exit(sentinel, checkpoints, 100_000, clock=clock, sleep=clock.sleep, poll_seconds=POLL)
    assert outcome.saved and outcome.iteration is not None
    state = checkpoints / DATA_STATE.format(outcome.iteration)
    assert state.is_file(), f"the hook returned before miles wrote {state}: {log.read_text()[-1500:]}"
    assert outcome.data_state and not sentinel.exists()
    assert f"saved rollout data state {state}" in log.read_text()


def test_when_the_step_never_ends_the_hook_gives_up_at_its_wait_and_names_the_checkpoint_to_load(
    standin: tuple,  # type: ignore[type-arg]
) -> None:
    checkpoints, sentinel, log, start = standin
    start("--fake-stall-after", "7")
    _wait_for_line(log, "stalled before rollout 7")
    clock = PollClock()
    outcome = save_before_exit(sentinel, checkpoints, 60, clock=clock, sleep=clock.sleep, poll_seconds=POLL)
    assert not outcome.saved
    assert (outcome.iteration_before, outcome.iteration) == (4, 4)  # the next attempt loads 4, resumes at 5
    assert outcome.seconds == 60 == outcome.wait_seconds  # 30 polls of 2 s on the hook's clock
    assert not sentinel.exists()  # not left for the next attempt to trip over
    line = json.loads(report(outcome, checkpoints))
    assert line == json.loads((checkpoints / REPORT).read_text())
    assert line["preStopSave"] == {
        "saved": False,
        "miles_running": True,
        "iteration_before": 4,
        "iteration": 4,
        "seconds": 60,
        "wait_seconds": 60,
        "data_state": False,
        "error": None,
    }


def test_the_hook_command_exits_0_and_reports_even_when_nothing_saves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints = tmp_path / "checkpoints"
    argv = ["presave", "--sentinel", str(checkpoints / ".grpo-save-now"), "--checkpoint-dir", str(checkpoints)]
    assert launcher_main([*argv, "--wait-seconds", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["preStopSave"]["saved"] is False and out["preStopSave"]["iteration"] is None
    assert out["preStopSave"]["miles_running"] is False
    assert json.loads((checkpoints / REPORT).read_text()) == out


def test_when_miles_is_not_running_the_hook_returns_at_once_without_asking(tmp_path: Path) -> None:
    """A pod deleted after its job ended (a finished run, a job the operator stopped) does not wait the grace."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / TRACKER).write_text("9\n")
    clock = PollClock()
    outcome = save_before_exit(checkpoints / ".s", checkpoints, 600, clock=clock, sleep=clock.sleep)
    assert (outcome.saved, outcome.miles_running, outcome.iteration, outcome.seconds) == (False, False, 9, 0.0)
    assert clock.now == 0 and not (checkpoints / ".s").exists()


def test_when_miles_exits_without_saving_the_hook_stops_waiting(standin: tuple) -> None:  # type: ignore[type-arg]
    checkpoints, sentinel, log, start = standin
    start("--fake-stall-after", "7")
    _wait_for_line(log, "stalled before rollout 7")
    clock = PollClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 10:  # the launcher saw miles exit (a stopped job) and removed its marker
            (checkpoints / MILES_RUNNING).unlink(missing_ok=True)

    outcome = save_before_exit(sentinel, checkpoints, 600, clock=clock, sleep=sleep, poll_seconds=POLL)
    assert (outcome.saved, outcome.miles_running, outcome.iteration, outcome.seconds) == (False, True, 4, 10)
    assert not sentinel.exists()


@pytest.mark.parametrize("stop_ray", [True, False])
def test_with_stop_ray_the_hook_stops_the_pods_ray_once_the_outcome_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stop_ray: bool
) -> None:
    """Ray's `ray start --block` under bash ignores the SIGTERM after the hook: the hook stops Ray itself, after the
    save and its report, so the job does not go on in a pod that is going away."""
    checkpoints = tmp_path / "checkpoints"
    reported_when_stopped: list[bool] = []
    args = argparse.Namespace(
        sentinel=checkpoints / ".grpo-save-now",
        checkpoint_dir=checkpoints,
        wait_seconds=0.0,
        stop_ray=stop_ray,
        head=False,
    )
    assert run_presave(args, stop=lambda: reported_when_stopped.append((checkpoints / REPORT).exists())) == 0
    assert reported_when_stopped == ([True] if stop_ray else [])
    assert json.loads(capsys.readouterr().out)["preStopSave"]["saved"] is False


def test_the_hook_command_takes_stop_ray() -> None:
    parser = argparse.ArgumentParser()
    add_presave(parser)
    argv = ["--sentinel", "s", "--checkpoint-dir", "c", "--wait-seconds", "1"]
    assert parser.parse_args([*argv, "--stop-ray"]).stop_ray is True
    assert parser.parse_args(argv).stop_ray is False


def _marked(tmp_path: Path) -> tuple[Path, float]:
    """A checkpoint directory with the launcher's marker, and when the marker was last touched."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    marker = checkpoints / MILES_RUNNING
    marker.write_text("1\n")
    return checkpoints, marker.stat().st_mtime


@pytest.mark.parametrize(
    ("age", "waits"), [(0.0, True), (STALE_AFTER_SECONDS - 1, True), (STALE_AFTER_SECONDS + 1, False)]
)
def test_a_marker_not_refreshed_for_three_periods_is_a_dead_launcher_and_the_hook_returns_at_once(
    tmp_path: Path, age: float, waits: bool
) -> None:
    """A launcher killed outright (node loss, SIGKILL, an OOM group kill) leaves its marker; a stale one must not
    hold the pod's GPUs for the whole grace after the run ended."""
    checkpoints, touched = _marked(tmp_path)
    clock = PollClock()
    outcome = save_before_exit(
        checkpoints / ".s", checkpoints, 20, clock=clock, sleep=clock.sleep, wall=lambda: touched + age
    )
    assert outcome.miles_running is waits and not outcome.saved
    assert outcome.seconds == (20 if waits else 0.0)


def test_a_marker_that_goes_stale_during_the_wait_ends_it_there(tmp_path: Path) -> None:
    """The launcher was killed while the hook waited: it returns once the marker is three refresh periods old."""
    checkpoints, touched = _marked(tmp_path)
    clock = PollClock()
    outcome = save_before_exit(
        checkpoints / ".s", checkpoints, 600, clock=clock, sleep=clock.sleep, wall=lambda: touched + clock.now
    )
    assert outcome.miles_running and not outcome.saved
    assert STALE_AFTER_SECONDS < outcome.seconds <= STALE_AFTER_SECONDS + POLL
    assert not (checkpoints / ".s").exists()


def test_the_heads_hook_keeps_its_outcome_apart_from_the_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints = tmp_path / "checkpoints"
    argv = ["presave", "--sentinel", str(checkpoints / ".grpo-save-now"), "--checkpoint-dir", str(checkpoints)]
    assert launcher_main([*argv, "--wait-seconds", "0", "--head"]) == 0
    assert json.loads((checkpoints / HEAD_REPORT).read_text()) == json.loads(capsys.readouterr().out)
    assert not (checkpoints / REPORT).exists()


def _dangling_symlink(sentinel: Path) -> None:
    sentinel.symlink_to(sentinel.parent / "gone" / "away")


def _directory_in_the_way(sentinel: Path) -> None:
    sentinel.mkdir()


@pytest.mark.parametrize(
    ("spoil", "relative"),
    [
        pytest.param(_dangling_symlink, ".grpo-save-now", id="dangling-symlink"),
        pytest.param(_directory_in_the_way, ".grpo-save-now", id="directory-in-the-way"),
        pytest.param(None, "run.log/.grpo-save-now", id="a-file-where-its-folder-should-be"),
    ],
)
@pytest.mark.parametrize("head", [False, True], ids=["worker", "head"])
def test_a_sentinel_the_hook_cannot_write_is_reported_and_ray_is_still_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spoil: object, relative: str, head: bool
) -> None:
    """A read-only volume, a dangling symlink or a directory in the way: no save can be asked for, but the hook
    still exits 0 with its report line and stops Ray, so the worker does not hold its GPUs for the whole grace."""
    checkpoints, _ = _marked(tmp_path)  # miles is running, so the hook tries to ask for a save
    (checkpoints / "run.log").write_text("a file, not a folder\n")
    sentinel = checkpoints / relative
    if callable(spoil):
        spoil(sentinel)
    stopped: list[bool] = []
    args = argparse.Namespace(
        sentinel=sentinel, checkpoint_dir=checkpoints, wait_seconds=600.0, stop_ray=True, head=head
    )
    assert run_presave(args, stop=lambda: stopped.append(True)) == 0
    assert stopped == [True]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])["preStopSave"]
    assert out["saved"] is False and out["miles_running"] is True
    assert str(sentinel) in out["error"] and "sentinel" in out["error"]
    assert json.loads((checkpoints / (HEAD_REPORT if head else REPORT)).read_text())["preStopSave"] == out
