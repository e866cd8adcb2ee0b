"""The evidence of a hung job, read from a real Ray head (the session's local head, token auth on, py-spy dumps
on as the operator's RayCluster turns them on): a job whose actor waits in a named frame and whose driver waits
in another, after flooding its log with 1 GiB. What `RayJobs.evidence` reads, kept as the bundle the operator
writes, names both frames, lists the actor, holds the driver's last lines, fits a ConfigMap and holds no token."""

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
        pieces = wait_for(
            "both hung frames in the stacks",
            lambda: (
                (p := ray.evidence(sid))
                and "wait_in_named_frame" in p["stacks.txt"]
                and "driver_waits_here" in p["stacks.txt"]
                and p
            ),
            timeout=300,
        )
        actors = json.loads(pieces["actors.json"])["result"]
        assert [(a["class_name"], a["state"]) for a in actors] == [("Hanger", "ALIVE")]
        assert json.loads(pieces["job.json"])["status"] == "RUNNING"
        assert "tasks-summary.json" in pieces and "placement-groups.json" in pieces
        assert pieces["driver.log"].rstrip().endswith(marker)
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
