"""The worker pods' preStop hook (`python -m grpo_launcher presave`): before Kubernetes stops a worker (Kueue
preemption, a drain, a spot reclaim, `spec.suspend`), ask miles for a checkpoint by touching its
`--save-trigger-sentinel` (miles saves after the rollout step in flight, then deletes the file), and wait until the
checkpoint tracker names an iteration newer than the one there when the hook started, or until the wait the
operator sized ends, or miles is no longer running (the launcher's marker is gone). Exits 0 either way, so the pod goes; the outcome is a JSON line on stdout and a small JSON
file beside the checkpoints (`preemption-save.json`), which the next attempt and the user can read. With
`--stop-ray` it then stops this pod's Ray (`ray stop`), as KubeRay's own preStop does: the container's first
process (`bash -c "...; ray start --block"`) ignores the SIGTERM that follows the hook, so without it the job goes on
running in a pod that is going away until the grace ends."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's tracker, which miles's save writes last
REPORT = "preemption-save.json"
# The launcher keeps this file beside the checkpoints while miles runs (launch.py): without it no save can come,
# so a pod deleted after its job ended (a finished run, a stopped job) goes at once instead of waiting the grace.
MILES_RUNNING = ".grpo-miles-running"
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    saved: bool
    miles_running: bool  # whether miles was running when the hook started (else nothing was asked of it)
    iteration_before: int | None  # the checkpoint the tracker named when the hook started
    iteration: int | None  # the checkpoint the next attempt will load
    seconds: float
    wait_seconds: float


def tracker_iteration(checkpoint_dir: Path) -> int | None:
    try:
        return int((checkpoint_dir / TRACKER).read_text().strip())
    except (OSError, ValueError):  # no checkpoint yet, or the tracker mid-write: as if unchanged
        return None


def save_before_exit(
    sentinel: Path,
    checkpoint_dir: Path,
    wait_seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = POLL_SECONDS,
) -> Outcome:
    """Touch the sentinel, then wait for a newer checkpoint, miles's exit, or `wait_seconds` on `clock`."""
    before = tracker_iteration(checkpoint_dir)
    start = clock()
    running = checkpoint_dir / MILES_RUNNING
    if not running.exists():
        return Outcome(False, False, before, before, 0.0, wait_seconds)
    sentinel.parent.mkdir(parents=True, exist_ok=True)
    sentinel.touch()
    while True:
        now = tracker_iteration(checkpoint_dir)
        elapsed = clock() - start
        if now is not None and (before is None or now > before):
            return Outcome(True, True, before, now, round(elapsed, 1), wait_seconds)
        if elapsed >= wait_seconds or not running.exists():
            # No save coming: a sentinel left behind would make the next attempt save after its first step.
            sentinel.unlink(missing_ok=True)
            return Outcome(False, True, before, now, round(elapsed, 1), wait_seconds)
        sleep(poll_seconds)


def report(outcome: Outcome, checkpoint_dir: Path) -> str:
    """The outcome as one JSON line, also kept beside the checkpoints (written whole, then renamed)."""
    line = json.dumps({"preStopSave": asdict(outcome)}, sort_keys=True)
    try:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint_dir / f".{REPORT}.{os.getpid()}"
        tmp.write_text(line + "\n")
        tmp.replace(checkpoint_dir / REPORT)
    except OSError as exc:  # the pod still goes; the line on stdout says what happened
        line = json.dumps({"preStopSave": asdict(outcome), "reportError": str(exc)}, sort_keys=True)
    return line


# `ray stop`'s own wait before SIGKILL; the save is done by then, so what is left needs no long goodbye.
RAY_STOP_GRACE_SECONDS = 10


def stop_ray() -> None:
    """`ray stop` with this Python's Ray: the node's raylet and workers end, and with them `ray start --block`."""
    argv = [sys.executable, "-m", "ray.scripts.scripts", "stop", "--grace-period", str(RAY_STOP_GRACE_SECONDS)]
    subprocess.run(argv, check=False, stdin=subprocess.DEVNULL)  # the pod goes either way


def add_presave(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sentinel", type=Path, required=True, help="miles's --save-trigger-sentinel path")
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="miles's --save directory")
    parser.add_argument("--wait-seconds", type=float, required=True, help="give up after this long")
    parser.add_argument("--stop-ray", action="store_true", help="then stop this node's Ray (`ray stop`)")


def run_presave(args: argparse.Namespace, stop: Callable[[], None] = stop_ray) -> int:
    outcome = save_before_exit(args.sentinel, args.checkpoint_dir, args.wait_seconds)
    sys.stdout.write(report(outcome, args.checkpoint_dir) + "\n")
    sys.stdout.flush()
    if args.stop_ray:
        stop()
    return 0
