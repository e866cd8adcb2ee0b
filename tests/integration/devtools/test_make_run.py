"""`make run` as the README describes it: on this GPU-less machine it says first that the trainer is the miles
stand-in and brings the quickstart to Succeeded with it on the simulated cluster; the terminal holds the run's
table and messages while the operator's log goes to .grpo/logs/operator.log (and the daemons' and the Ray head's
beside it); Ctrl-C (SIGINT to the foreground process group) stops everything it started and says so."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest

from tests.support.devrun import make_run
from tests.support.operator_harness import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LOGS = REPO / ".grpo" / "logs"


def test_make_run_brings_the_quickstart_to_succeeded_with_the_stand_in_and_ctrl_c_leaves_nothing_running() -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine may have a GPU: make run's default trainer would be miles, not the stand-in")
    started: list[psutil.Process] = []
    with make_run() as run:
        lines = run.lines
        row = wait_for("the quickstart to end", run.quickstart_ended, timeout=900, interval=1)
        assert row.split()[1] == "Succeeded", "".join(lines[-40:])
        assert any("Running" in line.split()[1:2] for line in lines if line.startswith("quickstart ")), "".join(lines)
        started = psutil.Process(run.process.pid).children(recursive=True)
        assert started, "make run had started nothing"
        assert run.ctrl_c(timeout=180) == 0, "".join(lines[-40:])
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
