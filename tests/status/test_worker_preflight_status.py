"""A GPU worker whose preflight fails: the launcher's own line reaches the GRPORun's status, which ends
Failed/PreflightFailed.

The launcher really runs (`python -m grpo_launcher preflight` with the rendered run config, as the worker's init
container does) on this machine, which has no libcuda for it; its output tail becomes the init container's
termination message as the kubelet keeps it under `terminationMessagePolicy: FallbackToLogsOnError` (the last
80 lines, at most 2048 bytes: kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go, maxTerminationMessage
LogLines/Length), and the status is derived from that pod status."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from grpo_operator.api.status import Phase
from grpo_operator.edges.childstate import cluster_observation
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import Seen

from tests.support.builders import example, kind, rendered, run_of
from tests.support.pods import preflight_failed_pod
from tests.support.status import intent


def _kubelet_message(output: str) -> str:
    tail = "\n".join(output.splitlines()[-80:])
    return tail.encode()[-2048:].decode(errors="replace")


def test_a_failed_worker_preflight_reaches_the_status_in_the_preflights_own_words(tmp_path: Path) -> None:
    doc = example("quickstart")
    result = rendered(doc)
    config = json.loads(kind(result, "ConfigMap")["data"]["run-config.json"])
    config["preflight"]["checkpointDir"] = str(tmp_path)  # the shared volume is not mounted here
    (tmp_path / "run-config.json").write_text(json.dumps(config))
    pod = kind(result, "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    command = [sys.executable, *pod["initContainers"][0]["command"][1:]]
    command[command.index("/etc/grpo/run-config.json")] = str(tmp_path / "run-config.json")
    done = subprocess.run(
        [*command, "--libcuda", str(tmp_path / "no-libcuda.so.1")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("preflight failed: libcuda: ")

    observed = cluster_observation({"status": {}}, 1, [preflight_failed_pod(_kubelet_message(done.stdout))])
    assert observed is not None
    assert observed.message == f"pod quickstart-ray-gpu-worker-abcde on node ip-10-0-0-7: {line}"

    run = run_of(doc)
    decision = decide(None, Seen(cluster=observed), intent(run.spec), datetime(2026, 12, 1, tzinfo=UTC))
    # the kubelet would run the same checks on the same node again: the run ends, naming pod, node and check
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, "PreflightFailed")
    assert decision.status.message == observed.preflight_failure == observed.message
    assert "CrashLoopBackOff" not in decision.status.message  # the kubelet's back-off is not the reason
