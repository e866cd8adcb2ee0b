"""`GRPO_REAL_NODE=1 make run` as the README describes it: the quickstart-like run reaches Succeeded in real pods
on this machine's kubelet node (the operator a pod installed by its chart, KubeRay's head and worker from our
images), the first lines say what is real and what is played, the operator's log lands in .grpo/logs/operator.log,
and Ctrl-C (SIGINT to the foreground process group) leaves no process, mount, bridge or iptables rule behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest
from grpo_dev.localcluster import tool_path
from grpo_dev.localcluster.realnode import leftovers

from tests.e2e.conftest import _unavailable as unavailable
from tests.support.devrun import make_run
from tests.support.operator_harness import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / ".grpo" / "logs"
KUBECONFIG = REPO / ".grpo" / "kubeconfig"


def test_make_run_on_the_real_node_reaches_succeeded_in_real_pods_and_ctrl_c_leaves_the_host_clean() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    started: list[psutil.Process] = []
    with make_run(GRPO_REAL_NODE="1") as run:
        lines = run.lines
        row = wait_for("the quickstart to end", run.quickstart_ended, timeout=1500, interval=2)
        assert row.split()[1] == "Succeeded", "".join(lines[-40:])
        # the run's pods ran in containerd on the real node, not as kwok's records
        listed = subprocess.run(
            [str(tool_path("kubectl")), f"--kubeconfig={KUBECONFIG}", "get", "pods", "-A", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        pods = [
            p for p in json.loads(listed.stdout)["items"] if p["metadata"]["namespace"] in ("grpo-demo", "grpo-system")
        ]
        on_node = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
        ids = [s.get("containerID", "") for p in pods for s in p["status"].get("containerStatuses") or []]
        assert pods and set(on_node.values()) == {"grpo-real-node"}, on_node
        assert ids and all(i.startswith("containerd://") for i in ids), ids
        started = psutil.Process(run.process.pid).children(recursive=True)
        assert run.ctrl_c(timeout=300) == 0, "".join(lines[-40:])
    said = "".join(lines[:4])
    assert "the run's pods run for real on a kubelet node of this machine" in said, said
    assert "the trainer is the miles stand-in, not miles" in said, said
    assert "[make run] stopped; nothing is left running\n" in lines, "".join(lines[-20:])
    assert "[grpo-demo/quickstart]" in (LOGS / "operator.log").read_text()
    _, alive = psutil.wait_procs(started, timeout=30)
    assert [p.pid for p in alive] == [], f"left running after Ctrl-C: {[' '.join(p.cmdline()) for p in alive]}"
    assert leftovers() == [], leftovers()
