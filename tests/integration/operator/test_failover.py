"""Two operator replicas with kopf peering against the real API server and a real Ray head: the active one is
killed (SIGKILL) mid-run, the other takes over; no run's job is submitted twice and the guards still act.

The replicas run as the chart runs them with `replicas: 2` (`--peering NAME` instead of `--standalone`; the
peering CRDs from charts/grpo-operator/crds/kopfpeerings.kopf.dev.yaml and the KopfPeering object of
templates/peering.yaml), here with explicit priorities so the test knows which is active, and a peering
lifetime of 10 s (GRPO_PEERING_LIFETIME_SECONDS) as the failover bound. The waits' timeouts are safety nets.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from ray.job_submission import JobStatus

from tests.support.operator_harness import (
    REPO,
    Operator,
    fake,
    jobs_client,
    jobs_of,
    manifest,
    phase_is,
    play_kuberay_ready,
    wait_for,
)

pytestmark = pytest.mark.integration
PEERING = "grpo-operator"
LIFETIME = 10
PHASES = ("Running", "Failed", "Succeeded")


def paused(op: Operator) -> bool:
    """Whether kopf's peering has this replica paused, from what it last said in its log.

    With `--peering NAME` the peering is mandatory (kopf/_core/reactor/running.py:204-206), so a replica starts
    paused (orchestration.py:229, `is_preactivated = settings.peering.mandatory`) and kopf logs only the
    transitions (engines/peering.py:137-151): "Resuming ..." when it finds no live peer of a higher priority,
    "Pausing ..." when one appears. A replica whose first look at the peering object already shows the active
    one therefore stays paused without a word; no line at all means paused.
    """
    said = [line for line in op.logs().splitlines() if "Pausing operations" in line or "Resuming operations" in line]
    return not said or "Pausing operations" in said[-1]


def peers(kubectl: Any, namespace: str) -> list[int]:
    """The priorities of the live replicas the KopfPeering object lists (kopf's keep-alives write them)."""
    body = json.loads(kubectl("get", "kopfpeering", PEERING, "-n", namespace, "-o", "json").stdout)
    return sorted(info.get("priority", 0) for info in (body.get("status") or {}).values() if info)


def replica(control_plane: Any, namespace: str, ray_url: str, log_dir: Path, priority: int, **env: str) -> Operator:
    log_dir.mkdir()
    op = Operator(
        control_plane.kubeconfig, namespace, ray_url, log_dir, GRPO_PEERING_LIFETIME_SECONDS=str(LIFETIME), **env
    )
    op.args = ["--peering", PEERING, "--priority", str(priority), "--namespace", namespace]
    return op


def test_killing_the_active_replica_mid_run_hands_the_run_to_the_other_with_one_job_and_its_guard(
    control_plane: Any, ray_head: Any, namespace: str, kubectl: Any, tmp_path: Path
) -> None:
    control_plane.apply_crds([REPO / "charts" / "grpo-operator" / "crds" / "kopfpeerings.kopf.dev.yaml"])
    kubectl(
        "apply",
        "-f",
        "-",
        input=f"apiVersion: kopf.dev/v1\nkind: KopfPeering\nmetadata: {{name: {PEERING}, namespace: {namespace}}}\n",
    )
    ray_url = ray_head.dashboard_url
    active = replica(control_plane, namespace, ray_url, tmp_path / "active", priority=200)
    # The replicas of one Deployment share their settings: the trainer's metrics port and the entrypoint.
    shared = {k: active.env[k] for k in ("GRPO_PROMETHEUS_PORT", "GRPO_ENTRYPOINT_PREFIX")}
    standby = replica(control_plane, namespace, ray_url, tmp_path / "standby", priority=100, **shared)
    active.start()
    standby.start()
    try:
        # Both replicas have registered, and the standby is paused (never resumed, or paused again since).
        wait_for(
            "both replicas in the peering, the standby paused",
            lambda: peers(kubectl, namespace) == [100, 200] and paused(standby),
        )
        # Repetitive from rollout 60 on (~24 s in): the degenerate-output guard (3 consecutive rollouts) has to
        # trip after the kill, by the standby, from the guard state the killed replica left in the status.
        repetition = ",".join(["0.0"] * 60 + ["0.56"])
        kubectl(
            "apply",
            "-f",
            "-",
            input=manifest("looping", namespace, fake("--fake-repetition", repetition, rollouts=300)),
        )
        play_kuberay_ready(kubectl, namespace, "looping")
        before = wait_for(
            "Running with metrics",
            lambda: (r := phase_is(kubectl, namespace, "looping", "Running")) and r["status"].get("metrics") and r,
        )
        assert paused(standby)  # it stayed paused while the active one ran

        active.stop(9)  # SIGKILL: no keep-alive withdrawn, no finalizer released
        killed = time.monotonic()
        wait_for("the standby resuming", lambda: not paused(standby), timeout=6 * LIFETIME)
        print(f"takeover {time.monotonic() - killed:.1f}s after SIGKILL (peering lifetime {LIFETIME}s)")
        after = wait_for(
            "the standby writing the status",
            lambda: (
                (r := phase_is(kubectl, namespace, "looping", *PHASES))
                and r["status"].get("metrics", {}).get("rollout", 0) > before["status"]["metrics"]["rollout"]
                and r
            ),
        )
        assert after["status"]["jobSubmissionId"] == before["status"]["jobSubmissionId"]

        done = wait_for(
            "stopped by its guard", lambda: phase_is(kubectl, namespace, "looping", "Failed", "Succeeded"), timeout=240
        )
        assert done["status"]["reason"] == "DegenerateOutput", done["status"]
        assert "repetition_frac 0.56" in done["status"]["message"]
        assert done["status"]["jobSubmissionId"] == before["status"]["jobSubmissionId"]
        [job] = jobs_of(ray_url, namespace, "looping")  # one job: nothing was submitted again
        wait_for("its job stopped", lambda: jobs_client(ray_url).get_job_status(job.submission_id) == JobStatus.STOPPED)
    finally:
        standby.stop()
        active.stop()
