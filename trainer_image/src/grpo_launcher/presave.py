"""The Ray pods' preStop hook (`python -m grpo_launcher presave`): before Kubernetes stops a worker or the head (Kueue
preemption, a drain, a delete, `spec.suspend`), ask miles for a checkpoint by touching its
`--save-trigger-sentinel` and wait until miles says the save is done: it deletes the sentinel only after the whole
save, Megatron's checkpoint and tracker first, then the rollout data state (train.py:76-90,120-126 at the pin), so
the sentinel's removal, cross-checked by a tracker newer than the one there when the hook started, is the signal.
It stops waiting when the wait the operator sized ends, or when miles is no longer running: the launcher's marker is
gone, or older than `STALE_AFTER_SECONDS` (the launcher refreshes it every `MARKER_REFRESH_SECONDS` while miles runs;
a launcher killed outright leaves it behind, and a stale marker must not hold the GPUs for the whole grace). Exits 0
either way, so the pod goes; the outcome is a JSON line on stdout and a small JSON file beside the checkpoints
(`preemption-save.json`, the head's `preemption-save-head.json`), which the next attempt and the user can read. With
`--stop-ray` it then stops this pod's Ray (`ray stop`), as KubeRay's own preStop does: the container's first process
(`bash -c "...; ray start --block"`) ignores the SIGTERM that follows the hook, so without it the job goes on running
in a pod that is going away until the grace ends. A spot interruption's notice is not covered by the grace: see
the runtime's `interruptionNoticeSeconds`."""

from __future__ import annotations

import argparse
import contextlib
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
HEAD_REPORT = "preemption-save-head.json"
# The launcher keeps this file beside the checkpoints while miles runs (launch.py): without it no save can come,
# so a pod deleted after its job ended (a finished run, a stopped job) goes at once instead of waiting the grace.
MILES_RUNNING = ".grpo-miles-running"
# The launcher touches the marker this often while miles runs; one not touched for three periods is a launcher
# that was killed outright (node loss, SIGKILL, an OOM group kill): nothing will save, the hook returns.
MARKER_REFRESH_SECONDS = 10.0
STALE_AFTER_SECONDS = 3 * MARKER_REFRESH_SECONDS
# miles's rollout data state (data_source.py:123-136 at the pin): the prompt order a resumed run continues from.
DATA_STATE = "rollout/global_dataset_state_dict_{}.pt"
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    saved: bool
    miles_running: bool  # whether miles was running when the hook started (else nothing was asked of it)
    iteration_before: int | None  # the checkpoint the tracker named when the hook started
    iteration: int | None  # the checkpoint the next attempt will load
    seconds: float
    wait_seconds: float
    data_state: bool = False  # whether miles's rollout data state of `iteration` exists (else it restarts at sample 0)
    error: str | None = None  # why the hook could not ask for a save (e.g. the sentinel could not be written)


def tracker_iteration(checkpoint_dir: Path) -> int | None:
    try:
        return int((checkpoint_dir / TRACKER).read_text().strip())
    except (OSError, ValueError):  # no checkpoint yet, or the tracker mid-write: as if unchanged
        return None


def miles_running(marker: Path, wall: float) -> bool:
    """The launcher's marker is there and was touched within `STALE_AFTER_SECONDS` of `wall` (epoch seconds)."""
    try:
        return wall - marker.stat().st_mtime <= STALE_AFTER_SECONDS
    except OSError:
        return False


def data_state(checkpoint_dir: Path, iteration: int | None) -> bool:
    return iteration is not None and (checkpoint_dir / DATA_STATE.format(iteration)).is_file()


def save_before_exit(
    sentinel: Path,
    checkpoint_dir: Path,
    wait_seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
    poll_seconds: float = POLL_SECONDS,
) -> Outcome:
    """Touch the sentinel, then wait for miles's "save done" (the sentinel deleted, the tracker newer), miles's exit
    (the marker gone or stale), or `wait_seconds` on `clock`."""
    before = tracker_iteration(checkpoint_dir)
    start = clock()
    running = checkpoint_dir / MILES_RUNNING
    if not miles_running(running, wall()):
        return Outcome(False, False, before, before, 0.0, wait_seconds, data_state(checkpoint_dir, before))
    try:
        sentinel.parent.mkdir(parents=True, exist_ok=True)
        with sentinel.open("a"):  # unlike touch(), refuses a directory in the way, which miles could never delete
            pass
    except OSError as exc:  # a read-only volume, a dangling symlink, a directory in the way: no save can be asked for
        error = f"cannot write the save sentinel {sentinel}: {exc.strerror or exc}"
        return Outcome(False, True, before, before, 0.0, wait_seconds, data_state(checkpoint_dir, before), error)
    while True:
        now = tracker_iteration(checkpoint_dir)
        elapsed = round(clock() - start, 1)
        newer = now is not None and (before is None or now > before)
        if newer and not sentinel.exists():
            return Outcome(True, True, before, now, elapsed, wait_seconds, data_state(checkpoint_dir, now))
        if elapsed >= wait_seconds or not miles_running(running, wall()):
            # No save coming: a sentinel left behind would make the next attempt save after its first step.
            with contextlib.suppress(OSError):
                sentinel.unlink(missing_ok=True)
            return Outcome(False, True, before, now, elapsed, wait_seconds, data_state(checkpoint_dir, now))
        sleep(poll_seconds)


def report(outcome: Outcome, checkpoint_dir: Path, name: str = REPORT) -> str:
    """The outcome as one JSON line, also kept beside the checkpoints (written whole, then renamed)."""
    line = json.dumps({"preStopSave": asdict(outcome)}, sort_keys=True)
    try:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint_dir / f".{name}.{os.getpid()}"
        tmp.write_text(line + "\n")
        tmp.replace(checkpoint_dir / name)
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
    parser.add_argument(
        "--head", action="store_true", help=f"the head's hook: its outcome goes to {HEAD_REPORT}, not {REPORT}"
    )


def run_presave(args: argparse.Namespace, stop: Callable[[], None] = stop_ray) -> int:
    """Never raises and always exits 0: whatever goes wrong is the report line's `error`, and Ray is stopped
    regardless, so a worker whose hook failed does not hold its GPUs for the whole grace."""
    name = HEAD_REPORT if args.head else REPORT
    try:
        outcome = save_before_exit(args.sentinel, args.checkpoint_dir, args.wait_seconds)
        line = report(outcome, args.checkpoint_dir, name)
    except Exception as exc:  # the hook's one promise is to let the pod go
        line = json.dumps({"preStopSave": None, "error": f"{type(exc).__name__}: {exc}"}, sort_keys=True)
    with contextlib.suppress(OSError):  # no stdout (the kubelet closed it): the file beside the checkpoints may say it
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    if args.stop_ray:
        stop()
    return 0
