"""``run``: the argv handed to miles byte for byte, the exit code, signals, stale configs, the metric."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from grpo_launcher.launch import refresh

from tests.support.launcher import base_config, launcher, write_config

# A stand-in for train.py: records its argv and environment, then exits with the code it is told.
STAND_IN = """
import json, os, sys, urllib.request
record = {"argv": sys.argv, "env": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")}
port = os.environ.get("SCRAPE_PORT")
if port:
    record["metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
open(os.environ["RECORD"], "w").write(json.dumps(record))
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""

TRICKY = ["a b", "", "--x=$HOME", "it's", 'say "hi"', "semi;colon", "ünïcode", "new\nline", "--", "*"]


def _miles_argv(tmp_path: Path) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(STAND_IN)
    return [sys.executable, str(script), "--hf-checkpoint", "/fsx/models/Qwen3-4B", *TRICKY]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(tmp_path: Path, argv: list[str], config: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    path = write_config(tmp_path, config)
    return launcher(
        "run",
        "--metrics-addr",
        "127.0.0.1",
        "--config",
        str(path),
        "--",
        *argv,
        env={"RECORD": str(tmp_path / "record.json"), **env},
    )


def test_miles_receives_exactly_the_rendered_argv(tmp_path: Path) -> None:
    argv = _miles_argv(tmp_path)
    config = base_config(tmp_path)
    config["argv"] = argv
    proc = _run(tmp_path, argv, config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["argv"] == argv[1:]  # sys.argv of a script drops the interpreter, keeps every item verbatim


def test_the_run_config_env_reaches_miles(tmp_path: Path) -> None:
    proc = _run(tmp_path, _miles_argv(tmp_path), base_config(tmp_path), CUDA_DEVICE_MAX_CONNECTIONS="8")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "record.json").read_text())["env"] == "1"


def test_the_launcher_exits_with_miles_exit_code(tmp_path: Path) -> None:
    proc = _run(tmp_path, _miles_argv(tmp_path), base_config(tmp_path), EXIT_CODE="7")
    assert proc.returncode == 7
    *_, exited, summary = proc.stdout.splitlines()
    assert exited == "[info] miles exited with 7"
    assert json.loads(summary.removeprefix("GRPO_RUN_SUMMARY "))["exit_code"] == 7


def test_a_stale_config_argv_is_refused_before_anything_starts(tmp_path: Path) -> None:
    argv = _miles_argv(tmp_path)
    config = base_config(tmp_path)
    config["argv"] = [*argv[:3], "/fsx/models/Qwen3-8B", *argv[4:]]
    proc = _run(tmp_path, argv, config)
    assert proc.returncode == 2
    assert "stale run config" in proc.stderr
    assert 'item 3: config has "/fsx/models/Qwen3-8B", entrypoint has "/fsx/models/Qwen3-4B"' in proc.stderr
    assert not (tmp_path / "record.json").exists()


def test_a_failed_preflight_never_starts_miles(tmp_path: Path) -> None:
    proc = _run(tmp_path, _miles_argv(tmp_path), base_config(tmp_path, checkpointGiB=10**7))
    assert proc.returncode == 3
    *_, verdict, summary = proc.stdout.splitlines()
    assert verdict.startswith("preflight failed: checkpoint: ") and summary.startswith("GRPO_RUN_SUMMARY ")
    assert not (tmp_path / "record.json").exists()


def test_run_without_miles_argv_is_a_usage_error(tmp_path: Path) -> None:
    proc = launcher("run", "--config", str(write_config(tmp_path, base_config(tmp_path))))
    assert proc.returncode == 2
    assert "after --" in proc.stderr


def test_the_provenance_line_comes_first_and_the_info_metric_is_served_while_miles_runs(tmp_path: Path) -> None:
    port = _free_port()
    proc = _run(tmp_path, _miles_argv(tmp_path), base_config(tmp_path, metricsPort=port), SCRAPE_PORT=str(port))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    provenance = json.loads(proc.stdout.splitlines()[0])["grpo_trainer_provenance"]
    assert provenance["run_name"] == "qwen3-4b"
    assert provenance["launcher"] == "0.1.0"
    assert provenance["miles_commit"].startswith("absent: /root/miles")
    metrics = json.loads((tmp_path / "record.json").read_text())["metrics"]
    info = [line for line in metrics.splitlines() if line.startswith("grpo_trainer_provenance_info{")]
    assert len(info) == 1
    assert 'run_name="qwen3-4b"' in info[0]
    assert info[0].endswith(" 1.0")


def test_a_busy_metrics_port_is_a_warning_and_miles_still_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _run(tmp_path, _miles_argv(tmp_path), base_config(tmp_path, metricsPort=port))
    assert proc.returncode == 0
    assert f"[warn] metrics: cannot serve on 127.0.0.1:{port}" in proc.stdout


SLOW_MILES = """
import signal, sys, time
def stop(signum, frame):
    print("miles got signal", signum, flush=True)
    sys.exit(40 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("miles running", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_is_forwarded_to_miles_and_its_exit_code_returned(tmp_path: Path, sig: signal.Signals) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_MILES)
    config = write_config(tmp_path, base_config(tmp_path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpo_launcher",
            "run",
            "--metrics-addr",
            "127.0.0.1",
            "--config",
            str(config),
            "--",
            sys.executable,
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("miles running"):
            break
    proc.send_signal(sig)  # to the launcher only; it must pass the signal on
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 40 + int(sig)
    assert f"miles got signal {int(sig)}" in rest


def test_miles_killed_by_a_signal_exits_128_plus_the_signal(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = _run(tmp_path, [sys.executable, str(script)], base_config(tmp_path))
    assert proc.returncode == 128 + signal.SIGKILL


# A shell starts in about a millisecond, so it looks for the marker before a launcher that wrote it only after
# starting miles would have (most runs of that order fail here).
MARKER_PROBE = [
    "/bin/sh",
    "-c",
    'if [ -e "$CHECKPOINTS/.grpo-miles-running" ]; then echo true; else echo false; fi > "$RECORD"',
]


def test_the_launcher_marks_miles_running_beside_the_checkpoints_only_while_it_runs(tmp_path: Path) -> None:
    """The workers' preStop hook waits for a save only while this file exists (presave.py): from miles's first
    instant on."""
    config = base_config(tmp_path)
    checkpoints = Path(config["preflight"]["checkpointDir"])
    proc = _run(tmp_path, MARKER_PROBE, config, CHECKPOINTS=str(checkpoints))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "record.json").read_text().strip() == "true"
    assert not (checkpoints / ".grpo-miles-running").exists()


def test_a_miles_that_cannot_start_exits_127_naming_it_and_leaves_no_running_marker(tmp_path: Path) -> None:
    config = base_config(tmp_path)
    checkpoints = Path(config["preflight"]["checkpointDir"])
    missing = str(tmp_path / "no-such-train.py")
    proc = _run(tmp_path, [missing], config)
    assert proc.returncode == 127, proc.stdout + proc.stderr
    assert f"cannot start miles: {missing!r}: No such file or directory" in proc.stdout + proc.stderr
    assert checkpoints.is_dir() and not (checkpoints / ".grpo-miles-running").exists()


def test_the_launcher_says_which_checkpoint_miles_resumes_from_on_one_line_before_miles_starts(tmp_path: Path) -> None:
    """miles starts at the tracker's iteration + 1 under `--load` (its start_rollout_id); the operator judges the
    stopped attempt's save from this line, and whether the rollout data state of that iteration is there."""
    config = base_config(tmp_path)
    load = tmp_path / "ckpt"
    (load / "rollout").mkdir(parents=True)
    (load / "latest_checkpointed_iteration.txt").write_text("7\n")
    (load / "rollout" / "global_dataset_state_dict_7.pt").write_bytes(b"x")
    proc = _run(tmp_path, [*_miles_argv(tmp_path), "--load", str(load)], config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("GRPO_RESUME ")]
    assert json.loads(line.removeprefix("GRPO_RESUME ")) == {"load": str(load), "iteration": 7, "dataState": True}
    assert proc.stdout.index(line) < proc.stdout.index("[info] starting miles")
    (load / "rollout" / "global_dataset_state_dict_7.pt").unlink()
    (load / "latest_checkpointed_iteration.txt").write_text("9\n")
    proc = _run(tmp_path, [*_miles_argv(tmp_path), f"--load={load}"], config)
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("GRPO_RESUME ")]
    assert json.loads(line.removeprefix("GRPO_RESUME ")) == {"load": str(load), "iteration": 9, "dataState": False}


def test_a_first_attempt_resumes_from_nothing(tmp_path: Path) -> None:
    proc = _run(tmp_path, [*_miles_argv(tmp_path), "--load", str(tmp_path / "empty")], base_config(tmp_path))
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("GRPO_RESUME ")]
    assert json.loads(line.removeprefix("GRPO_RESUME "))["iteration"] is None


def test_the_marker_is_touched_while_miles_runs_and_no_longer_once_stopped(tmp_path: Path) -> None:
    """The preStop hook reads a marker not touched for three periods as a launcher that died (presave.py)."""
    marker = tmp_path / ".grpo-miles-running"
    marker.write_text("1\n")
    os.utime(marker, (1_000_000, 1_000_000))
    stop = threading.Event()
    thread = refresh(marker, stop, period=0.01)
    for _ in range(3000):  # a safety net for a loaded machine, not a timing assertion
        if marker.stat().st_mtime > 1_000_000:
            break
        time.sleep(0.01)
    assert marker.stat().st_mtime > 1_000_000
    stop.set()
    thread.join(timeout=60)
    assert not thread.is_alive()
    marker.unlink()
    assert not marker.exists()  # a refresh never makes the marker again
