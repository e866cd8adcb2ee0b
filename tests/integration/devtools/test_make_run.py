"""`make run` as the README describes it: on this GPU-less machine it says first that the trainer is the miles
stand-in and brings the quickstart to Succeeded with it on the simulated cluster; the terminal holds the run's
table and messages while the operator's log goes to .grpo/logs/operator.log (and the daemons' and the Ray head's
beside it); Ctrl-C (SIGINT to the foreground process group) stops everything it started and says so."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests.support.operator_harness import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LOGS = REPO / ".grpo" / "logs"


def test_make_run_brings_the_quickstart_to_succeeded_with_the_stand_in_and_ctrl_c_leaves_nothing_running() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine may have a GPU: make run's default trainer would be miles, not the stand-in")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("KUBECONFIG", "GRPO_TRAINER"):
        env.pop(name, None)
    # the command the `run` target runs once `install` and `control-plane` are done
    process = subprocess.Popen(
        [sys.executable, "-m", "grpo_dev.devrun"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's foreground process group, which Ctrl-C signals as a whole
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    started: list[psutil.Process] = []
    try:

        def quickstart_row() -> str | None:
            rows = [line for line in list(lines) if line.startswith("quickstart ")]
            return rows[-1] if rows and rows[-1].split()[1] in ("Succeeded", "Failed") else None

        row = wait_for("the quickstart to end", quickstart_row, timeout=900, interval=1)
        assert row.split()[1] == "Succeeded", "".join(lines[-40:])
        assert any("Running" in line.split()[1:2] for line in lines if line.startswith("quickstart ")), "".join(lines)
        started = psutil.Process(process.pid).children(recursive=True)
        assert started, "make run had started nothing"
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=180) == 0, "".join(lines[-40:])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(timeout=30)
    assert "[make run] stopped; nothing is left running\n" in lines, "".join(lines[-20:])
    said = "".join(lines[:3])
    assert "no GPU on this machine: the run's trainer is the miles stand-in" in said, said
    assert "not miles" in said, said
    # the operator's log is in its file, not on the terminal
    assert not [line for line in lines if "kopf" in line], "".join(line for line in lines if "kopf" in line)[:2000]
    operator_log = (LOGS / "operator.log").read_text()
    assert "[default/quickstart]" in operator_log, operator_log[-2000:]
    assert "kube-apiserver.log" in os.listdir(LOGS) and "kuberay-operator.log" in os.listdir(LOGS)
    assert (LOGS / "ray" / "ray-start.log").is_file(), sorted(os.listdir(LOGS))
    assert any(
        "logs (the operator, the control plane, KubeRay; the Ray head's on stop): .grpo/logs/" in line for line in lines
    )
    _, alive = psutil.wait_procs(started, timeout=30)
    assert [p.pid for p in alive] == [], f"left running after Ctrl-C: {[' '.join(p.cmdline()) for p in alive]}"
