"""The evidence of a hung job, read from a real Ray head (the session's local head, token auth on, py-spy dumps
on as the operator's RayCluster turns them on where the GRPORuntime grants `spec.debug.ptrace`, so `py_spy=True`;
the stacks without ptrace are tests/integration/operator/test_evidence_stacks.py): a job whose actor waits in a named frame and whose driver waits
in another, after flooding its log with 1 GiB. What `RayJobs.evidence` reads, kept as the bundle the operator
writes, names both frames, lists the actor, holds the driver's last lines, fits a ConfigMap and holds no token.
An actor on a second raylet joined to the head (a worker node, as a Ray worker pod is) has its stack read through
that node: the bundle names the actor's node, not the driver's."""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import sys
from pathlib import Path

import pytest
from grpo_operator.edges.rayjobs import RayJobs
from grpo_operator.render.evidence import evidence_config_map
from ray.job_submission import JobSubmissionClient

from tests.support.operator_harness import RAY_TOKEN, wait_for

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "hanging_job.py"


def test_the_evidence_of_a_hung_job_names_each_processs_frame_and_stays_bounded_after_a_gigabyte_of_output(
    ray_head,  # type: ignore[no-untyped-def]
) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    sid = f"evidence-{secrets.token_hex(4)}"
    marker = f"HUNG-{sid}"
    client.submit_job(entrypoint=f"{sys.executable} {SCRIPT} --marker {marker} --spam-mib 1024", submission_id=sid)
    try:
        ray = RayJobs(ray_head.dashboard_url, RAY_TOKEN)
        # The pieces are read side by side: one capture can read the log just before the marker's line and the
        # driver's stack just after it; a hung job's next capture has both.
        pieces = wait_for(
            "both hung frames in the stacks and the marker ending the driver's log",
            lambda: (
                (p := ray.evidence(sid, py_spy=True))
                and "wait_in_named_frame" in p["stacks.txt"]
                and "driver_waits_here" in p["stacks.txt"]
                and p["driver.log"].rstrip().endswith(marker)
                and p
            ),
            timeout=300,
        )
        actors = json.loads(pieces["actors.json"])["result"]
        assert [(a["class_name"], a["state"]) for a in actors] == [("Hanger", "ALIVE")]
        assert json.loads(pieces["job.json"])["status"] == "RUNNING"
        assert "tasks-summary.json" in pieces and "placement-groups.json" in pieces
        assert len(pieces["driver.log"].encode()) < 4 * 1024 * 1024  # the last lines, not the gigabyte

        bundle = evidence_config_map(
            "ns", "run", "uid", "run-forensics-1", header={"trigger": "Stalled"}, pieces=pieces, secrets=[RAY_TOKEN]
        )
        assert len(json.dumps(bundle).encode()) < 1024 * 1024
        kept = {k: gzip.decompress(base64.b64decode(v)).decode() for k, v in bundle["binaryData"].items()}
        assert "wait_in_named_frame" in kept["stacks.txt.gz"] and kept["driver.log.gz"].rstrip().endswith(marker)
        assert RAY_TOKEN not in json.dumps(kept) and RAY_TOKEN not in json.dumps(bundle)
    finally:
        client.stop_job(sid)


def test_the_stack_of_an_actor_on_another_node_is_read_through_that_nodes_agent(ray_head) -> None:  # type: ignore[no-untyped-def]
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    sid = f"evidence-node-{secrets.token_hex(4)}"
    with ray_head.worker_node({"evidence_worker": 1}) as node:
        entrypoint = f"{sys.executable} {SCRIPT} --marker HUNG-{sid} --actor-resource evidence_worker"
        client.submit_job(entrypoint=entrypoint, submission_id=sid)
        try:
            ray = RayJobs(ray_head.dashboard_url, RAY_TOKEN)
            pieces = wait_for(
                "the actor's frame in the stacks",
                lambda: (p := ray.evidence(sid, py_spy=True)) and "wait_in_named_frame" in p["stacks.txt"] and p,
                timeout=300,
            )
            [actor] = json.loads(pieces["actors.json"])["result"]
            worker_pids = node.pids()
            driver_node = client.get_job_info(sid).driver_node_id
            assert actor["class_name"] == "Hanger" and actor["node_id"] != driver_node  # not on the head's raylet
            section = pieces["stacks.txt"].split("== actor-Hanger-")[1]
            assert actor["node_id"] == node.node_id and worker_pids
            assert f"on {actor['node_id']})" in section.splitlines()[0] and "wait_in_named_frame" in section
        finally:
            client.stop_job(sid)
    assert not node.pids() and not set(worker_pids) & set(ray_head.pids())  # the worker node's processes went
