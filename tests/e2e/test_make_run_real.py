"""`GRPO_REAL_NODE=1 make run` as the README describes it: the quickstart-like run reaches Succeeded in real pods
on this machine's kubelet node (the operator a pod installed by its chart, KubeRay's head and worker from our
images), the first lines say what is real and what is played, the operator's log lands in .grpo/logs/operator.log,
and Ctrl-C (SIGINT to the foreground process group), with the operator's and the reward service's pods still
running, leaves the host as it was: no process, mount, bridge, network namespace, iptables rule or chain of the
node, and ip_forward and bridge-nf-call-iptables back to their values."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from grpo_dev.localcluster import tool_path
from grpo_dev.localcluster.realnode import BRIDGE, STATE_DIR, leftovers, remove_dead_node

from tests.e2e.conftest import _unavailable as unavailable
from tests.support.devrun import make_run
from tests.support.operator_harness import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / ".grpo" / "logs"
KUBECONFIG = REPO / ".grpo" / "kubeconfig"


def _iptables() -> set[str]:
    lines: set[str] = set()
    for binary in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            out = subprocess.run([binary, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
            lines |= {f"{binary} {table} {line}" for line in out.stdout.splitlines()}
    return lines


def _host() -> dict[str, Any]:
    """What a real node changes on the host: sysctls, links of ours, mounts under its state and CNI netns."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "bridge-nf-call-iptables": Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip(),
        "links": sorted(
            name
            for name in (line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
            if name.startswith("grpo")
        ),
        "mounts": sorted(
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if str(STATE_DIR) in line.split()[4] or "/run/netns/cni-" in line.split()[4]
        ),
    }


# On a machine that never ran a node, this `make run` first builds kubelet, kube-proxy, CoreDNS and the Ray dev
# layers (about 10 minutes on two cores beside the other pytest worker): more than the suite's 900 s per test.
@pytest.mark.timeout(2700)
def test_make_run_on_the_real_node_reaches_succeeded_in_real_pods_and_ctrl_c_leaves_the_host_clean() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    started: list[psutil.Process] = []
    # A node killed outright before this test (a runner stopped mid-suite) leaves its bridge, mounts and netns;
    # make run removes them first, so "the host as it was" is the host after that removal.
    assert remove_dead_node() == []
    before_host, before_rules = _host(), _iptables()
    with make_run(GRPO_REAL_NODE="1") as run:
        lines = run.lines
        row = wait_for("the quickstart to end", run.quickstart_ended, timeout=2400, interval=2)
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
        during = _host()
        assert BRIDGE in during["links"] and during["mounts"], during  # the node really changed the host
        assert any("KUBE-" in line for line in _iptables() - before_rules)
        running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        assert running, "no pod running at Ctrl-C"
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
    assert _host() == before_host
    added = {line for line in _iptables() - before_rules if "KUBE-" in line or BRIDGE in line or "grpo" in line}
    assert added == set()
    assert not STATE_DIR.exists()
