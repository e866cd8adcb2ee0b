"""`make run` as the README describes it: `GRPO_DEMO=1` brings the quickstart to Succeeded on the simulated
cluster with the miles stand-in, and Ctrl-C (SIGINT to the foreground process group) stops everything it
started and says so."""

from __future__ import annotations

import os
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


def test_make_run_brings_the_demo_quickstart_to_succeeded_and_ctrl_c_leaves_nothing_running() -> None:
    env = {**os.environ, "GRPO_DEMO": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("KUBECONFIG", None)
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
    _, alive = psutil.wait_procs(started, timeout=30)
    assert [p.pid for p in alive] == [], f"left running after Ctrl-C: {[' '.join(p.cmdline()) for p in alive]}"
