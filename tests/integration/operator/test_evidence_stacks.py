"""Stacks without ptrace, on the session's real Ray head: the evidence capture's own Ray job (grpo_launcher.stacks)
dumps a hung job's driver, its actor and the subprocess the actor spawned (as SGLang's engine spawns its scheduler),
each in its named frame, with py-spy never asked; and a node whose raylet is stopped costs the capture its budget,
no more, and is named in `missing.txt`; the miles double's `--fake-hang-frames` (its driver, an actor it places on
another node and that actor's scheduler stand-in, and a flight-recorder stand-in) is what the capture reads.

The session's head starts every Python process with the image's hook, as a Ray pod does (devtools/grpo_dev/localray.py:
a `sitecustomize` adding a site directory that holds the image's own `.pth`); the hung job points its processes at a
directory of its own through its runtime env's `env_vars`, which Ray gives the job's driver and workers and they give
their children, so no other test's processes are dumped with it."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
from grpo_dev import fake_miles
from grpo_launcher import stackdump
from grpo_operator.edges.rayjobs import RayJobs
from grpo_operator.render.job import stacks_job
from grpo_operator.render.settings import RenderSettings
from ray.job_submission import JobSubmissionClient

from tests.support.operator_harness import RAY_TOKEN, wait_for

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "hanging_job.py"
SETTINGS = RenderSettings(python=sys.executable)
FAKE_MILES = Path(fake_miles.__file__)
FRAMES = ("fake_driver_waits_in_rollout", "fake_actor_waits_in_generate", "fake_scheduler_waits_for_batch")


def hooked_runtime_env(stacks_dir: Path) -> dict[str, object]:
    return {"env_vars": {stackdump.ENV: str(stacks_dir)}}


def test_the_stacks_job_names_the_hung_driver_its_actor_and_the_actors_subprocess_without_py_spy(
    ray_head,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    sid, stacks_dir = f"stacks-{secrets.token_hex(4)}", tmp_path / "stacks"
    marker = f"HUNG-{sid}"
    entrypoint = f"{sys.executable} {SCRIPT} --marker {marker} --spawn"
    client.submit_job(entrypoint=entrypoint, submission_id=sid, runtime_env=hooked_runtime_env(stacks_dir))
    ray = RayJobs(ray_head.dashboard_url, RAY_TOKEN)
    try:
        wait_for("the hung job's marker", lambda: marker in client.get_job_logs(sid), timeout=300)
        job = stacks_job(sid, "run-forensics-1", 60.0, SETTINGS, directory=str(stacks_dir))
        pieces = ray.evidence(sid, budget_seconds=60.0, stacks=job)
        stacks = pieces["stacks.txt"]
        for frame in ("driver_waits_here", "wait_in_named_frame", "subprocess_waits_here"):
            assert frame in stacks, (frame, stacks[-4000:], pieces.get("missing.txt"))
        assert "(pid " not in stacks  # no py-spy section (`== driver (pid N on ...)`): ptrace was not granted
        sections = [s for s in stacks.split("\n== ") if "subprocess_waits_here" in s]
        assert sections and all("-c" in s.splitlines()[0] for s in sections)  # the section names its command line
        assert any(k.startswith("logs-") and k.endswith("raylet.out") for k in pieces), sorted(pieces)
        assert client.get_job_info(job.submission_id).status.value == "SUCCEEDED"  # the job ended by itself
        assert client.get_job_info(sid).status.value == "RUNNING"  # and the hung job was only looked at
    finally:
        client.stop_job(sid)


def test_a_node_whose_raylet_never_answers_costs_the_budget_and_is_named_missing(
    ray_head,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    sid = f"stacks-stopped-{secrets.token_hex(4)}"
    marker = f"HUNG-{sid}"
    client.submit_job(entrypoint=f"{sys.executable} {SCRIPT} --marker {marker}", submission_id=sid)
    ray = RayJobs(ray_head.dashboard_url, RAY_TOKEN)
    budget = 30.0
    with ray_head.worker_node({"stacks_silent": 1}) as node:
        raylets = [p for p in node.pids() if b"raylet" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]
        try:
            wait_for("the hung job's marker", lambda: marker in client.get_job_logs(sid), timeout=300)
            assert raylets, node.pids()
            for pid in raylets:
                os.kill(pid, signal.SIGSTOP)
            job = stacks_job(sid, "run-forensics-2", budget, SETTINGS, directory=str(tmp_path / "stacks"))
            began = time.monotonic()
            pieces = ray.evidence(sid, budget_seconds=budget, stacks=job)
            took = time.monotonic() - began
        finally:
            for pid in raylets:
                os.kill(pid, signal.SIGCONT)
            client.stop_job(sid)
    assert took < budget + 5.0, took  # the product's promise: the stop after the capture waits no longer
    missing = pieces.get("missing.txt", "")
    assert "node " in missing and node.node_id[:8] in missing, (missing, node.node_id)
    [line] = [m for m in missing.splitlines() if node.node_id[:8] in m]
    assert line.startswith("node ") and ("did not answer" in line or "Died" in line), line
    answered = [s for s in pieces["stacks.txt"].split("\n") if s.startswith("== ")]
    assert answered and all(node.node_id[:8] not in s for s in answered)  # the head's node answered; not this one
    assert json.loads(pieces["job.json"])["status"] == "RUNNING"


def test_the_miles_doubles_hang_frames_are_what_the_stacks_job_names_with_its_actor_on_the_other_node(
    ray_head,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    client = JobSubmissionClient(ray_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})
    sid, stacks_dir = f"stacks-double-{secrets.token_hex(4)}", tmp_path / "stacks"
    env_vars = {stackdump.ENV: str(stacks_dir), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{stacks_dir}/nccl_trace_rank_"}
    argv = [sys.executable, str(FAKE_MILES), "--num-rollout", "5", "--fake-step-seconds", "0.05"]
    argv += ["--fake-stall-after", "1", "--fake-hang-frames"]
    ray = RayJobs(ray_head.dashboard_url, RAY_TOKEN)
    with ray_head.worker_node({"hang_frames": 1}) as node:
        client.submit_job(entrypoint=shlex.join(argv), submission_id=sid, runtime_env={"env_vars": env_vars})
        try:
            log = wait_for(
                "the double's hung actor",
                lambda: (t := client.get_job_logs(sid)) and "hung actor" in t and t,
                timeout=300,
            )
            assert f"hung actor started on node {node.node_id}" in log  # not the driver's (the head's) node
            job = stacks_job(sid, "run-forensics-3", 60.0, SETTINGS, directory=str(stacks_dir))
            pieces = wait_for(
                "the three frames",
                lambda: (
                    (p := ray.evidence(sid, budget_seconds=60.0, stacks=job))
                    and all(f in p["stacks.txt"] for f in FRAMES)
                    and p
                ),
                timeout=300,
            )
            assert any(k.startswith("nccl-") and k.endswith("nccl_trace_rank_0.b64") for k in pieces), sorted(pieces)
        finally:
            client.stop_job(sid)
