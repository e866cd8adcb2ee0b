"""`status.accounting` on the simulated cluster: real KubeRay makes the worker pods, kube-scheduler binds them to
kwok p5en nodes, and the operator reads their GPU requests and binding times; miles is the double behind the real
launcher (tests/support/operator_harness.py). Every expectation is recomputed here from what the test itself
reads (the pods' PodScheduled times, the checkpoint file, the job log), never from the operator's arithmetic."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from grpo_operator.render import names

from tests.support.operator_harness import (
    FAKE_KNOBS,
    KNOBS_DIR,
    fake,
    get_run,
    jobs_client,
    manifest,
    phase_is,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration
Kubectl = Callable[..., Any]
STAMP = "%Y-%m-%dT%H:%M:%SZ"


def _time(text: str) -> datetime:
    return datetime.strptime(text, STAMP).replace(tzinfo=UTC)


@pytest.fixture
def env(simulated_cluster, ray_head, sim_namespace, tmp_path: Path) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    with running_operator(simulated_cluster, sim_namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, sim_namespace, simulated_cluster.kubectl, ray_head.dashboard_url


def bound_workers(kubectl: Kubectl, namespace: str, run: str) -> tuple[int, datetime] | None:
    """(GPUs requested, earliest PodScheduled time) of the run's worker pods once all are bound, else None."""
    pods = json.loads(
        kubectl("get", "pods", "-n", namespace, "-l", f"ray.io/cluster={names.ray_cluster(run)}", "-o", "json").stdout
    )["items"]
    workers = [p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
    if not workers or not all(p["spec"].get("nodeName") for p in workers):
        return None
    gpus = sum(
        int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
        for p in workers
        for c in p["spec"]["containers"]
    )
    scheduled = [
        _time(c["lastTransitionTime"])
        for p in workers
        for c in p["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c["status"] == "True"
    ]
    return (gpus, min(scheduled)) if len(scheduled) == len(workers) else None


def accounting(run: dict[str, Any]) -> dict[str, Any]:
    acc: dict[str, Any] = run["status"]["accounting"]
    return acc


def test_a_first_time_success_reports_gpu_hours_and_goodput_from_its_own_timestamps(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("paid", ns, fake("--fake-step-seconds", "1", rollouts=25)))
    gpus, bound = wait_for("the worker pods bound", lambda: bound_workers(kubectl, ns, "paid"))
    assert gpus == 8  # one p5en worker of the quickstart run
    wait_for(  # the premise: the operator saw the run make its first rollout while it ran
        "a first rollout recorded",
        lambda: (
            (r := phase_is(kubectl, ns, "paid", "Running"))
            and r["status"].get("accounting", {}).get("attempts")
            and r["status"]["accounting"]["attempts"][0].get("firstRolloutTime")
        ),
    )
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "paid", "Succeeded", "Failed"), timeout=600)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    acc = accounting(done)
    [attempt] = acc["attempts"]
    ended = _time(attempt["ended"])
    # The worker's 8 GPUs from their binding to the end of the run, and nothing else.
    assert attempt["gpus"] == acc["gpus"] == 8
    assert attempt["gpuSeconds"] == acc["gpuSeconds"] == 8 * int((ended - bound).total_seconds())
    assert acc["gpuHours"] == round(acc["gpuSeconds"] / 3600, 4)
    assert (attempt["firstRollout"], attempt["lastRollout"], attempt["rolloutsCompleted"]) == (0, 24, 25)
    assert "rolloutsLost" not in attempt and acc["lostGpuHours"] == 0  # unset fields are left out of the status
    # Goodput: the GPU time after the first rollout over all of it.
    before = attempt["gpuSecondsToFirstRollout"]
    assert 0 < before < attempt["gpuSeconds"]
    assert acc["goodput"] == round((attempt["gpuSeconds"] - before) / attempt["gpuSeconds"], 4)
    created = _time(done["metadata"]["creationTimestamp"])
    assert acc["timeToFirstRolloutSeconds"] == int((_time(attempt["firstRolloutTime"]) - created).total_seconds())
    total = acc["queuedSeconds"] + acc["provisioningSeconds"] + acc["runningSeconds"] + acc["suspendedSeconds"]
    assert total == int((_time(done["status"]["completionTime"]) - created).total_seconds())
    row = kubectl("get", "grporun", "paid", "-n", ns, "-o", "wide").stdout.splitlines()
    # kubectl aligns each value under its header; PROGRESS ("completed 8/8 rollouts") holds spaces.
    for column, value in (("GPU-HOURS", acc["gpuHours"]), ("GOODPUT", acc["goodput"])):
        at = row[0].index(f" {column}") + 1
        assert row[1][at:].split()[0] == f"{value:g}", row
    events = json.loads(
        kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=paid", "-o", "json").stdout
    )["items"]
    [ended_event] = [e["message"] for e in events if e["reason"] == "AttemptEnded"]
    assert ended_event.startswith(f"attempt 1 ended (Succeeded/Succeeded): {acc['gpuHours']:g} GPU-hours on 8 GPUs")


def test_an_operator_restart_mid_run_changes_none_of_the_recorded_values(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("steady", ns, fake(rollouts=40)))
    _gpus, bound = wait_for("the worker pods bound", lambda: bound_workers(kubectl, ns, "steady"))
    before = wait_for(
        "a first rollout recorded",
        lambda: (
            (r := phase_is(kubectl, ns, "steady", "Running"))
            and r["status"].get("accounting", {}).get("attempts")
            and r["status"]["accounting"]["attempts"][0].get("firstRolloutTime")
            and r
        ),
    )
    op.restart()  # SIGKILL: nothing in memory survives
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "steady", "Succeeded", "Failed"), timeout=600)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    then, now = accounting(before), accounting(done)
    recorded = ("queuedSeconds", "provisioningSeconds", "timeToFirstRolloutSeconds")
    assert {k: now[k] for k in recorded} == {k: then[k] for k in recorded}
    # firstRollout is what the first scrape saw until the job's summary gives the exact one at the end
    kept = ("attempt", "submissionId", "started", "firstRolloutTime", "timeToFirstRolloutSeconds")
    kept += ("gpus", "gpuSecondsToFirstRollout")
    assert {k: now["attempts"][0][k] for k in kept} == {k: then["attempts"][0][k] for k in kept}
    # No interval lost or counted twice across the restart: still 8 GPUs from binding to the end.
    ended = _time(now["attempts"][0]["ended"])
    assert now["gpuSeconds"] == 8 * int((ended - bound).total_seconds())


def test_a_suspended_run_reports_the_rollouts_after_its_checkpoint_as_lost_once_it_resumes(  # type: ignore[no-untyped-def]
    env, tmp_path: Path
) -> None:
    """The first job stops making progress after rollout 7 (the double's --fake-stall-after 8) with a checkpoint
    every 3 rollouts; the run is suspended there, then resumed with a double that runs to the end."""
    _op, ns, kubectl, ray_url = env
    shared = tmp_path / "shared"
    spec = fake(
        "--fake-checkpoints",
        "--fake-stall-after",
        "8",
        rollouts=12,
        storage={"mountPath": str(shared), "saveInterval": 3, "checkpointOnSuspend": False},
        guards={"stallTimeoutSeconds": 900, "startupGraceSeconds": 900},
    )
    knobs = [k for k in spec[FAKE_KNOBS] if k not in ("--fake-stall-after", "8")]
    kubectl("apply", "-f", "-", input=manifest("lossy", ns, spec))
    stuck = wait_for(
        "rollout 7 observed",
        lambda: (
            (r := phase_is(kubectl, ns, "lossy", "Running"))
            and (r["status"].get("metrics") or {}).get("rollout") == 7
            and r
        ),
        timeout=240,
    )
    first_job = stuck["status"]["jobSubmissionId"]
    (KNOBS_DIR / "lossy.json").write_text(json.dumps(knobs))  # the resumed job runs to the end
    kubectl("patch", "grporun", "lossy", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    suspended = wait_for("Suspended", lambda: phase_is(kubectl, ns, "lossy", "Suspended"), timeout=600)
    checkpoint_dir = Path(suspended["status"]["plan"]["checkpointDir"])
    saved = int((checkpoint_dir / "latest_checkpointed_iteration.txt").read_text())
    log = jobs_client(ray_url).get_job_logs(first_job)
    last = max(int(n) for n in re.findall(r"rollout (\d+): \{", log))
    assert saved < last
    kubectl("patch", "grporun", "lossy", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "lossy", "Succeeded", "Failed"), timeout=600)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    acc = accounting(done)
    first, second = acc["attempts"]
    assert (first["endPhase"], first["endReason"]) == ("Suspended", "Suspended")
    assert second["firstRollout"] == saved + 1  # the launcher's summary: where miles resumed
    assert first["lastRollout"] == last
    assert first["rolloutsLost"] == last - saved
    # Their GPU time: the lost rollouts' share of the first attempt's rollout time; the resume's warm-up. The
    # rollout time is measured from the first rollout observed, so on a busy machine, whose first scrape may come
    # after the saved rollout, all of it is lost and no more.
    rollout_time = first["gpuSeconds"] - first["gpuSecondsToFirstRollout"]
    share = round(rollout_time * min(last - saved, first["rolloutsCompleted"]) / first["rolloutsCompleted"])
    assert first["lostGpuHours"] == round(share / 3600, 4)
    assert second["lostGpuHours"] == round(second["gpuSecondsToFirstRollout"] / 3600, 4)
    assert acc["lostGpuHours"] == round((share + second["gpuSecondsToFirstRollout"]) / 3600, 4)
    created = _time(done["metadata"]["creationTimestamp"])
    total = acc["queuedSeconds"] + acc["provisioningSeconds"] + acc["runningSeconds"] + acc["suspendedSeconds"]
    assert total == int((_time(done["status"]["completionTime"]) - created).total_seconds())
    assert get_run(kubectl, ns, "lossy")["status"]["accounting"] == acc  # terminal: it stays
