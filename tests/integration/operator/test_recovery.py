"""spec.recovery on the simulated cluster (KubeRay, kwok nodes) with a real Ray head: a job that fails with an
NCCL watchdog timeout restarts once from its checkpoint as attempt 2 and, failing the same way again, ends
`Failed/NCCLTimeout`; each failed attempt's evidence, with the log's NCCL lines, is kept past its RayCluster.
miles is the double of devtools/grpo_dev/fake_miles.py behind the real launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.operator_harness import (
    bundle_texts,
    fake,
    jobs_client,
    jobs_of,
    manifest,
    phase_is,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

WATCHDOG = (
    "(MegatronTrainRayActor pid=4711, ip=10.0.1.7) [Rank 3] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for"
    " 1800083 milliseconds before timing out."
)


@pytest.fixture
def env(simulated_cluster, ray_head, sim_namespace, tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_operator(simulated_cluster, sim_namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, sim_namespace, simulated_cluster.kubectl, ray_head.dashboard_url


def test_an_nccl_timeout_restarts_once_from_the_checkpoint_and_the_second_one_ends_failed(
    env,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    _op, ns, kubectl, ray_url = env
    shared = tmp_path / "shared"  # stands in for the shared volume the workers mount
    spec = fake(
        "--fake-checkpoints",
        "--fake-fail-after",
        "4",
        "--fake-fail-message",
        WATCHDOG,
        rollouts=10,
        storage={"mountPath": str(shared), "saveInterval": 2},
        recovery={"maxRestarts": 1},
    )
    kubectl("apply", "-f", "-", input=manifest("flaky", ns, spec))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "flaky", "Failed", "Succeeded"), timeout=240)
    status = run["status"]
    assert (status["reason"], status["attempt"], status["restarts"]) == ("NCCLTimeout", 2, 1), status
    assert status["message"].startswith("rank 3 on node 10.0.1.7 waited 1800 s in ALLREDUCE: ")
    assert "(after 1 restart)" in status["message"]
    jobs = sorted(jobs_of(ray_url, ns, "flaky"), key=lambda j: j.submission_id)
    assert len(jobs) == 2 and jobs[1].submission_id.endswith("-a2")
    assert "resuming at rollout 4" in jobs_client(ray_url).get_job_logs(jobs[1].submission_id)
    events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    # The restart's own event, posted whether or not a reconcile saw the first attempt Running before it failed
    # (the Running -> Provisioning transition event exists only when one did).
    told = [(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == "flaky"]
    restarted = [message for reason, message in told if reason == "Restarted"]
    assert len(restarted) == 1, told
    assert restarted[0].startswith("restart 1 of recovery.maxRestarts 1, from the last checkpoint, after NCCLTimeout")
    # each failed attempt's evidence, captured before its RayCluster went, still there
    bundles = status["forensics"]
    assert [(b["trigger"], b["submissionId"]) for b in bundles] == [("NCCLTimeout", j.submission_id) for j in jobs]
    wait_for("the RayCluster gone", lambda: kubectl("get", "raycluster", "-n", ns, "-o", "name").stdout.strip() == "")
    for bundle in bundles:
        texts = bundle_texts(kubectl, ns, bundle["configMap"])
        assert "Watchdog caught collective operation timeout" in texts["nccl.log.gz"]
        assert '"status": "FAILED"' in texts["job.json.gz"] and "nccl.log.gz" in texts["index.txt"]
