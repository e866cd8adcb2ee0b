"""The real node's teardown removes kube-proxy's and kubelet's iptables rules even where they carry quoted
comments (kube-proxy's do), and leaves other rules alone. Runs under the machine-wide real-node lock, so no
real node is up meanwhile."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from grpo_dev.localcluster import realnode

pytestmark = pytest.mark.integration


def _rules() -> str:
    return subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=True).stdout


def test_kube_chains_and_their_commented_jumps_are_removed_and_nothing_else() -> None:
    try:
        realnode.ensure_host_tools(install=True)
    except realnode.RealNodeUnavailable as exc:
        pytest.skip(f"this machine cannot run a real node: {exc}")
    assert shutil.which("iptables")
    with realnode._machine_lock():
        subprocess.run(["iptables", "-w", "-N", "KUBE-GRPO-PROBE"], check=True)
        subprocess.run(["iptables", "-w", "-N", "GRPO-OTHER-PROBE"], check=True)
        try:
            jump = ["FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-GRPO-PROBE"]
            subprocess.run(["iptables", "-w", "-I", *jump], check=True)
            realnode._remove_kube_chains()
            rules = _rules()
            assert "KUBE-GRPO-PROBE" not in rules
            assert "-N GRPO-OTHER-PROBE" in rules
        finally:
            subprocess.run(["iptables", "-w", "-D", *jump], capture_output=True, check=False)
            for chain in ("KUBE-GRPO-PROBE", "GRPO-OTHER-PROBE"):
                subprocess.run(["iptables", "-w", "-X", chain], capture_output=True, check=False)
