"""Two operator replicas with kopf peering against the real API server and a real Ray head: the active one is
killed (SIGKILL) mid-run, the other takes over; no run's job is submitted twice and the guards still act.

The replicas run as the chart runs them with `replicas: 2` (`--peering NAME` instead of `--standalone`; the
peering CRDs from charts/grpo-operator/crds/kopfpeerings.kopf.dev.yaml and the KopfPeering object of
templates/peering.yaml), here with explicit priorities so the test knows which is active, and a peering
lifetime of 10 s (GRPO_PEERING_LIFETIME_SECONDS) as the failover bound. The waits' timeouts are safety nets.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from ray.job_submission import JobStatus

from tests.operator.harness import REPO, Operator, fake, manifest, phase_is, play_kuberay_ready, wait_for
from tests.operator.test_scenarios import jobs_client, jobs_of

pytestmark = pytest.mark.integration
PEERING = "grpo-operator"
LIFETIME = 10
PHASES = ("Running", "Failed", "Succeeded")


def paused(op: Operator) -> bool:
    """What kopf's peering last said in this replica's log (it starts unpaused until it has read the peers)."""
    said = [line for line in op.logs().splitlines() if "Pausing operations" in line or "Resuming operations" in line]
    return bool(said) and "Pausing operations" in said[-1]


def replica(control_plane: Any, namespace: str, ray_url: str, log_dir: Path, priority: int, **env: str) -> Operator:
    log_dir.mkdir()
    op = Operator(control_plane.kubeconfig, namespace, ray_url, log_dir, GRPO_PEERING_LIFETIME_SECONDS=str(LIFETIME), **env)
    op.args = ["--peering", PEERING, "--priority", str(priority), "--namespace", namespace]
    return op


# Known failure, issue #19 stays open: the standby took over once (7.1 s after SIGKILL, one job, the guard acted)
# and in 4 later runs never processed the peering object, so it never resumed. The chart's README says not to rely
# on replicas > 1 yet. Not strict: the test must keep running (and say XPASS when the cause is fixed).
@pytest.mark.xfail(reason="#19: the standby replica does not reliably take over (kopf peering; cause unknown)", strict=False)
def test_killing_the_active_replica_mid_run_hands_the_run_to_the_other_with_one_job_and_its_guard(
    control_plane: Any, ray_head: Any, namespace: str, kubectl: Any, tmp_path: Path
) -> None:
    control_plane.apply_crds([REPO / "charts" / "grpo-operator" / "crds" / "kopfpeerings.kopf.dev.yaml"])
    kubectl("apply", "-f", "-", input=f"apiVersion: kopf.dev/v1\nkind: KopfPeering\n"
                                      f"metadata: {{name: {PEERING}, namespace: {namespace}}}\n")  # fmt: skip
    ray_url = ray_head.dashboard_url
    active = replica(control_plane, namespace, ray_url, tmp_path / "active", priority=200)
    # The replicas of one Deployment share their settings: the trainer's metrics port and the entrypoint.
    shared = {k: active.env[k] for k in ("GRPO_PROMETHEUS_PORT", "GRPO_ENTRYPOINT_PREFIX")}
    standby = replica(control_plane, namespace, ray_url, tmp_path / "standby", priority=100, **shared)
    active.start()
    standby.start()
    try:
        wait_for("the standby pausing in favour of the active replica", lambda: paused(standby))
        # Repetitive from rollout 60 on (~24 s in): the degenerate-output guard (3 consecutive rollouts) has to
        # trip after the kill, by the standby, from the guard state the killed replica left in the status.
        repetition = ",".join(["0.0"] * 60 + ["0.56"])
        kubectl("apply", "-f", "-", input=manifest("looping", namespace, fake("--fake-repetition", repetition, rollouts=300)))
        play_kuberay_ready(kubectl, namespace, "looping")
        before = wait_for("Running with metrics", lambda: (r := phase_is(kubectl, namespace, "looping", "Running"))
                          and r["status"].get("metrics") and r)  # fmt: skip
        assert paused(standby)  # it stayed paused while the active one ran

        active.stop(9)  # SIGKILL: no keep-alive withdrawn, no finalizer released
        killed = time.monotonic()
        wait_for("the standby resuming", lambda: not paused(standby), timeout=6 * LIFETIME)
        print(f"takeover {time.monotonic() - killed:.1f}s after SIGKILL (peering lifetime {LIFETIME}s)")
        after = wait_for("the standby writing the status", lambda: (r := phase_is(kubectl, namespace, "looping", *PHASES))
                         and r["status"].get("metrics", {}).get("rollout", 0) > before["status"]["metrics"]["rollout"]
                         and r)  # fmt: skip
        assert after["status"]["jobSubmissionId"] == before["status"]["jobSubmissionId"]

        done = wait_for("stopped by its guard", lambda: phase_is(kubectl, namespace, "looping", "Failed", "Succeeded"),
                        timeout=240)  # fmt: skip
        assert done["status"]["reason"] == "DegenerateOutput", done["status"]
        assert "repetition_frac 0.56" in done["status"]["message"]
        assert done["status"]["jobSubmissionId"] == before["status"]["jobSubmissionId"]
        [job] = jobs_of(ray_url, namespace, "looping")  # one job: nothing was submitted again
        wait_for("its job stopped", lambda: jobs_client(ray_url).get_job_status(job.submission_id) == JobStatus.STOPPED)
    finally:
        standby.stop()
        active.stop()
