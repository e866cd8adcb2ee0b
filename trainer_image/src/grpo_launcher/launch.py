"""``run``: provenance, metrics, preflight, then miles as a child process with exactly the rendered argv.

The argv after ``--`` on the launcher's command line is what the operator rendered; it is handed to
``subprocess.Popen`` as the same list, never rebuilt, re-quoted or edited. When the run config also carries
``argv`` and the two differ, the config is stale and the launcher refuses. miles runs as a child (not exec)
so the metrics server lives on; SIGTERM and SIGINT are forwarded to it and the launcher exits with its exit
code (128 + N when a signal N ended it).

miles's stdout and stderr are piped through the launcher (written on unchanged, line by line, to the job's
output) so that the launcher sees every rollout miles logs; when miles has exited the launcher prints ONE
``GRPO_RUN_SUMMARY {json}`` line, the durable end-of-run record the operator reads from the job log. The
contract (the line's keys and the ``GRPO_FAILURE_FILE`` a component inside miles writes before it ends the
run on purpose) is in ``grpo_launcher.summary``.

A failure recorded while miles runs ends the run at once: the launcher watches the failure file (and the
``GRPO_FAILURE`` lines it pumps) every ``FAILURE_POLL_SECONDS`` and, on the first one, stops miles (SIGTERM, then
SIGKILL after ``STOP_GRACE_SECONDS``) and exits ``RECORDED_FAILURE_EXIT`` with that failure in its summary. Not
every miles version ends the job itself: v0.1.0's default class-based rollout logs an exception of a rollout
group, drops the group and fetches more prompts (docs/integrations/miles.md, "A group's exception at v0.1.0"), so
with the reward service down it would go on until the stall guard. Only miles's own process is signalled, not a
process group: Ray's stop_job signals the entrypoint's process group, so miles must stay in the launcher's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

from grpo_launcher.checks import PREFLIGHT_FAILED_EXIT, print_report
from grpo_launcher.config import RunConfig, echo
from grpo_launcher.metrics import MetricsServer, serve
from grpo_launcher.outputs import EXPORT_MISSING
from grpo_launcher.outputs import collect as collect_outputs
from grpo_launcher.preflight import PreflightEnv, run_preflight
from grpo_launcher.presave import MARKER_REFRESH_SECONDS, MILES_RUNNING, data_state, tracker_iteration
from grpo_launcher.provenance import ProvenanceSources, collect, provenance_line
from grpo_launcher.summary import FAILURE_FILE_ENV, RolloutLog, read_failure, summary_line

USAGE_EXIT = 2
RECORDED_FAILURE_EXIT = 1  # a failure a component recorded: not 128 + SIGTERM, which reads as a stop from outside
FAILURE_POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 30.0
METRICS_ADDR = "0.0.0.0"  # noqa: S104 (scraped from outside the pod)


class StaleConfigError(Exception):
    """The run config's argv and the entrypoint's argv disagree."""


def check_argv_matches(config: RunConfig, argv: Sequence[str]) -> None:
    """Refuse when the config's rendered argv is present and differs from the entrypoint's."""
    if config.argv is None or list(config.argv) == list(argv):
        return
    first = next(
        (i for i, (a, b) in enumerate(zip(config.argv, argv, strict=False)) if a != b),
        min(len(config.argv), len(argv)),
    )
    have = argv[first] if first < len(argv) else "<end>"
    want = config.argv[first] if first < len(config.argv) else "<end>"
    raise StaleConfigError(
        f"stale run config: its argv ({len(config.argv)} items) differs from the argv after -- "
        f"({len(argv)} items) "
        f"first at item {first}: config has {echo(want)}, entrypoint has {echo(have)}; the ConfigMap and "
        f"the Ray job were "
        "rendered from different specs: re-render both (delete the Ray job and let the operator resubmit)"
    )


def child_env(base: Mapping[str, str], config: RunConfig) -> dict[str, str]:
    """The environment miles starts with: the pod's, with the run config's ``env`` applied on top."""
    env = dict(base)
    env.update(config.env)
    return env


def exit_code(returncode: int) -> int:
    """Popen's returncode as a shell would report it (signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class RunOptions:
    metrics_addr: str = METRICS_ADDR
    provenance: ProvenanceSources = field(default_factory=ProvenanceSources)
    preflight: PreflightEnv = field(default_factory=PreflightEnv)
    skip_preflight: bool = False


def start_miles(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def pump(stream: IO[bytes], out: TextIO, rollouts: RolloutLog) -> threading.Thread:
    """Copy miles's output to ``out`` line by line, feeding each line to ``rollouts``."""

    def copy() -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            out.write(line)
            out.flush()
            rollouts.feed(line)
        stream.close()

    thread = threading.Thread(target=copy, name="miles-output", daemon=True)
    thread.start()
    return thread


def supervise(child: subprocess.Popen[bytes]) -> int:
    """Forward SIGTERM/SIGINT to the child until it exits; return its exit code."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return exit_code(child.wait())
            except InterruptedError:  # pragma: no cover (PEP 475 retries; kept for clarity)
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch_failures(
    child: subprocess.Popen[bytes],
    record: tuple[RolloutLog, Path],
    out: TextIO,
    done: threading.Event,
    *,
    poll: float = FAILURE_POLL_SECONDS,
    grace: float = STOP_GRACE_SECONDS,
) -> threading.Event:
    """Until ``done``: stop miles on the first failure recorded (file or line); the returned event says it did."""
    rollouts, failure_file = record
    stopped = threading.Event()

    def watch() -> None:
        while not done.wait(poll):
            failure = read_failure(failure_file) or rollouts.failure
            if failure is None or child.poll() is not None:
                continue
            stopped.set()
            out.write(
                f"[error] {failure['reason']} recorded while miles runs: stopping miles (SIGTERM, SIGKILL after "
                f"{grace:g} s): {failure['message']}\n"
            )
            out.flush()
            child.terminate()
            try:
                child.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.kill()
            return

    threading.Thread(target=watch, name="failure-watch", daemon=True).start()
    return stopped


def run(config: RunConfig, miles_argv: Sequence[str], options: RunOptions, out: TextIO = sys.stdout) -> int:
    """The Ray job entrypoint: returns the process exit code."""
    check_argv_matches(config, miles_argv)
    run_ref = {"name": config.run.name, "namespace": config.run.namespace, "uid": config.run.uid}
    facts = collect(options.provenance, run_ref)
    out.write(provenance_line(facts) + "\n")
    out.flush()
    metrics: MetricsServer | None = None
    port = config.preflight.metrics_port
    if port:
        try:
            metrics = serve(facts, port, options.metrics_addr)
            out.write(
                f"[info] metrics: grpo_trainer_provenance_info on {options.metrics_addr}:{metrics.port}/metrics\n"
            )
        except OSError as exc:
            out.write(f"[warn] metrics: cannot serve on {options.metrics_addr}:{port}: {exc.strerror}; continuing\n")
    rollouts = RolloutLog()
    with tempfile.TemporaryDirectory(prefix="grpo-run-") as scratch:
        failure_file = Path(scratch) / "failure.json"
        code = 1  # what an exception escaping here ends the process with
        try:
            code = _preflight_and_miles(config, miles_argv, options, out, (rollouts, failure_file))
        finally:
            if metrics is not None:
                metrics.close()
            failure = read_failure(failure_file) or rollouts.failure
            outputs, missing = collect_outputs(flag_value(miles_argv, "--save"), flag_value(miles_argv, "--save-hf"))
            if code == 0 and missing is not None:
                # miles only logs a failed Hugging Face export: the run asked for one, so it fails here.
                failure, code = {"reason": EXPORT_MISSING, "message": f"Hugging Face export missing: {missing}"}, 1
                out.write(f"[error] {failure['message']}\n")
            out.write(summary_line(code, rollouts, facts, failure, outputs) + "\n")
            out.flush()
    return code


RESUME_PREFIX = "GRPO_RESUME "


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in miles's argv (`--flag value` or `--flag=value`; the last one wins, as argparse)."""
    found = None
    for i, item in enumerate(argv):
        if item == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif item.startswith(flag + "="):
            found = item[len(flag) + 1 :]
    return found


def resume_line(miles_argv: Sequence[str]) -> str:
    """`GRPO_RESUME {json}`: the checkpoint miles is about to resume from, read as miles reads it: the tracker under
    `--load` (Megatron's `latest_checkpointed_iteration.txt`; miles starts at that iteration + 1, its
    `start_rollout_id`), and whether the rollout data state of that iteration is there (without it miles restarts
    its prompt order at sample 0 and only logs it). The operator judges the stopped attempt's save from this line."""
    load = flag_value(miles_argv, "--load")
    iteration = tracker_iteration(Path(load)) if load else None
    facts = {
        "load": load,
        "iteration": iteration,
        "dataState": data_state(Path(load), iteration) if load else False,
    }
    return RESUME_PREFIX + json.dumps(facts, sort_keys=True)


def refresh(marker: Path, stop: threading.Event, period: float = MARKER_REFRESH_SECONDS) -> threading.Thread:
    """Touch the marker every `period` seconds until `stop`: a marker that ages is a launcher that died."""

    def touch() -> None:
        while not stop.wait(period):
            try:
                os.utime(marker)
            except OSError:  # removed or unwritable: the hook then reads miles as not running, as it is told
                return

    thread = threading.Thread(target=touch, name="miles-running-marker", daemon=True)
    thread.start()
    return thread


def _mark_running(checkpoint_dir: Path, out: TextIO) -> Path | None:
    """The file the workers' preStop hook (presave.py) reads: miles runs, so a save asked for can come."""
    marker = checkpoint_dir / MILES_RUNNING
    try:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{os.getpid()}\n")
    except OSError as exc:
        out.write(f"[warn] cannot write {marker}: {exc.strerror}; a preempted worker will not wait for a save\n")
        return None
    return marker


def _preflight_and_miles(
    config: RunConfig, miles_argv: Sequence[str], options: RunOptions, out: TextIO, record: tuple[RolloutLog, Path]
) -> int:
    rollouts, failure_file = record
    if not options.skip_preflight:
        report = run_preflight(config.preflight, options.preflight, out)
        print_report(report, out)
        if not report.ok:
            return PREFLIGHT_FAILED_EXIT
    if config.env:
        out.write(f"[info] env from the run config for miles: {', '.join(sorted(config.env))}\n")
    out.write(resume_line(miles_argv) + "\n")
    out.write(f"[info] starting miles: {len(miles_argv)} argv items, argv[0]={miles_argv[0]!r}\n")
    out.flush()
    env = {**child_env(os.environ, config), FAILURE_FILE_ENV: str(failure_file)}
    # Marked before miles starts: a stop that comes in miles's first instant must still wait for its save.
    marker = _mark_running(Path(config.preflight.checkpoint_dir), out)
    refreshing = threading.Event()
    if marker is not None:
        refresh(marker, refreshing)
    try:
        try:
            child = start_miles(miles_argv, env)
        except OSError as exc:
            out.write(f"cannot start miles: {miles_argv[0]!r}: {exc.strerror}\n")
            return 127
        assert child.stdout is not None  # start_miles pipes it
        copier = pump(child.stdout, out, rollouts)
        stopped = watch_failures(child, record, out, refreshing)
        code = supervise(child)
        if stopped.is_set():
            code = RECORDED_FAILURE_EXIT
    finally:
        refreshing.set()
        if marker is not None:
            marker.unlink(missing_ok=True)
    copier.join(timeout=30)  # miles's last lines, then the summary
    out.write(f"[info] miles exited with {code}\n")
    out.flush()
    return code
