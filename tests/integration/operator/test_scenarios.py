"""The operator end to end, through the real API server and a real Ray head: what a user sees with kubectl.

KubeRay is the real KubeRay operator of the simulated cluster (tests/conftest.py `simulated_cluster`:
kube-scheduler places the pods on kwok GPU and CPU nodes, KubeRay writes the RayCluster status), except where
the fault can only be hand-written (`plain_env`, on the plain control plane, status patched by the test);
miles is played by devtools/grpo_dev/fake_miles.py, which serves
miles's Prometheus gauges only while it runs (like miles's collector actor, gone with the job) and exits as
told, wrapped by the real trainer launcher. The operator reconciles every 5 s (harness.Operator) while the
double logs a rollout every 0.4 s: a run's last rollouts fall between two scrapes, so its end is what the
launcher's GRPO_RUN_SUMMARY line says, never a lucky last scrape.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from grpo_operator.render import names
from ray.job_submission import JobStatus

from tests.support.operator_harness import (
    fake,
    free_port,
    jobs_client,
    jobs_of,
    manifest,
    phase_is,
    play_kuberay_ready,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration


def condition(run: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in run["status"]["conditions"] if c["type"] == type_)


@pytest.fixture
def env(simulated_cluster, ray_head, sim_namespace, tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_operator(simulated_cluster, sim_namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, sim_namespace, simulated_cluster.kubectl, ray_head.dashboard_url


@pytest.fixture
def plain_env(control_plane, ray_head, namespace, kubectl, tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_operator(control_plane, namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, namespace, kubectl, ray_head.dashboard_url


def test_happy_path_reaches_succeeded_with_metrics_and_filled_columns(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, ray_url = env
    kubectl(
        "apply",
        "-f",
        "-",
        input=manifest("happy", ns, fake("--fake-reward", "0.5", "--fake-repetition", "0.0", rollouts=25)),
    )
    wait_for("phase Provisioning", lambda: phase_is(kubectl, ns, "happy", "Pending", "Provisioning"))
    running = wait_for(
        "metrics while Running",
        lambda: (r := phase_is(kubectl, ns, "happy", "Running")) and r["status"].get("metrics") and r,
    )
    table = kubectl("get", "grporuns", "-n", ns).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "PHASE",
        "MODEL",
        "PROGRESS",
        "REWARD",
        "REPETITION",
        "EVAL",
        "GPU-HOURS",
        "AGE",
    ]
    row = table[1].split()
    assert row[1] == "Running" and row[2] == "qwen3-4b" and row[3].endswith("/25") and row[4] == "0.5" and row[5] == "0"
    assert condition(running, "JobRunning")["status"] == "True"
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "happy", "Succeeded", "Failed"), timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["progress"] == "25/25"
    assert done["status"]["metrics"]["rawReward"] == 0.5
    assert condition(done, "Complete")["status"] == "True"
    assert done["status"]["observedGeneration"] == done["metadata"]["generation"]
    events = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=happy", "-o", "json").stdout
    assert {"Succeeded"} <= {e["reason"] for e in json.loads(events)["items"]}
    assert len(jobs_of(ray_url, ns, "happy")) == 1
    # A finished run gives its GPUs back.
    wait_for(
        "RayCluster deleted",
        lambda: kubectl("get", "raycluster", names.ray_cluster("happy"), "-n", ns, check=False).returncode != 0,
    )


def test_an_invalid_spec_fails_with_the_reason_and_creates_nothing(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("invalid", ns, {"extraArgs": ["--lr", "0.1"]}))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "invalid", "Failed"))
    assert run["status"]["reason"] == "InvalidSpec"
    validated = condition(run, "Validated")
    assert validated["status"] == "False" and "spec.extraArgs[0]: --lr is managed" in validated["message"]
    assert (
        kubectl(
            "get", "rayclusters,configmaps,deployments", "-n", ns, "-l", "grpo.dev/run=invalid", "-o", "name"
        ).stdout.strip()
        == ""
    )
    warnings = json.loads(kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    assert any(e["type"] == "Warning" and e["involvedObject"]["name"] == "invalid" for e in warnings)


def test_degenerate_output_stops_the_job_and_fails_the_run(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, ray_url = env
    kubectl(
        "apply",
        "-f",
        "-",
        # Rollouts enough to outlast the guard's capture (its stacks job included), so there is a job to stop.
        input=manifest("degenerate", ns, fake("--fake-reward", "0.4", "--fake-repetition", "0.56", rollouts=1000)),
    )
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "degenerate", "Failed", "Succeeded"), timeout=180)
    assert run["status"]["reason"] == "DegenerateOutput"
    assert "repetition_frac 0.56" in run["status"]["message"]
    assert condition(run, "Healthy")["status"] == "False"
    [job] = jobs_of(ray_url, ns, "degenerate")
    wait_for("job stopped", lambda: jobs_client(ray_url).get_job_status(job.submission_id) == JobStatus.STOPPED)


def test_a_job_that_succeeds_with_degenerate_metrics_is_not_succeeded(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, _ = env
    spec = fake("--fake-reward", "0.0", rollouts=3, guards={"action": "Warn", "minReward": {"afterRollouts": 2}})
    kubectl("apply", "-f", "-", input=manifest("zero-reward", ns, spec))
    run = wait_for("terminal", lambda: phase_is(kubectl, ns, "zero-reward", "Failed", "Succeeded"), timeout=180)
    assert run["status"]["phase"] == "Failed" and run["status"]["reason"] == "DegenerateOutput"
    assert run["status"]["jobStatus"] == "SUCCEEDED"
    assert "succeeded but the output is degenerate" in run["status"]["message"]


def test_a_stalled_run_is_stopped(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, ray_url = env
    spec = fake("--fake-stall-after", "1", rollouts=10, guards={"stallTimeoutSeconds": 5, "startupGraceSeconds": 0})
    kubectl("apply", "-f", "-", input=manifest("stall", ns, spec))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "stall", "Failed", "Succeeded"), timeout=180)
    assert run["status"]["reason"] == "Stalled" and "no rollout progress" in run["status"]["message"]
    [job] = jobs_of(ray_url, ns, "stall")
    wait_for("job stopped", lambda: jobs_client(ray_url).get_job_status(job.submission_id) == JobStatus.STOPPED)


def test_an_operator_restart_mid_run_submits_nothing_twice(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, ray_url = env
    kubectl("apply", "-f", "-", input=manifest("restart", ns, fake("--fake-reward", "0.5", rollouts=30)))
    before = wait_for(
        "Running with metrics",
        lambda: (r := phase_is(kubectl, ns, "restart", "Running")) and r["status"].get("metrics") and r,
    )
    op.restart()  # SIGKILL: no chance to clean up
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "restart", "Succeeded", "Failed"), timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["jobSubmissionId"] == before["status"]["jobSubmissionId"]
    assert len(jobs_of(ray_url, ns, "restart")) == 1


def test_deleting_a_run_mid_run_stops_its_job(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, ray_url = env
    kubectl("apply", "-f", "-", input=manifest("doomed", ns, fake(rollouts=100)))
    wait_for("Running", lambda: phase_is(kubectl, ns, "doomed", "Running"))
    [job] = jobs_of(ray_url, ns, "doomed")
    kubectl("delete", "grporun", "doomed", "-n", ns, "--wait=true", "--timeout=120s")
    wait_for("job stopped", lambda: jobs_client(ray_url).get_job_status(job.submission_id) == JobStatus.STOPPED)
    wait_for(
        "children garbage-collected",
        lambda: kubectl("get", "configmap", names.config_map("doomed"), "-n", ns, check=False).returncode != 0,
    )


def test_suspend_checkpoints_stops_and_frees_gpus_and_resume_continues(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, ray_url = env
    shared = tmp_path / "shared"  # stands in for the shared volume the workers mount
    # The suspension outlasts the stall timeout (which also bounds the wait for the checkpoint): the resumed job,
    # which numbers its rollouts from the checkpoint + 1 (at or below what the first job reached), is a new
    # attempt with a fresh stall clock.
    stall = 20
    spec = fake(
        "--fake-checkpoints",
        "--fake-step-seconds",
        "1",
        rollouts=40,
        storage={"mountPath": str(shared)},
        guards={"stallTimeoutSeconds": stall, "startupGraceSeconds": 60},
    )
    kubectl("apply", "-f", "-", input=manifest("pausable", ns, spec))
    wait_for(
        "Running with metrics",
        lambda: (r := phase_is(kubectl, ns, "pausable", "Running")) and r["status"].get("metrics") and r,
    )
    kubectl("patch", "grporun", "pausable", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    suspended = wait_for("Suspended", lambda: phase_is(kubectl, ns, "pausable", "Suspended"))
    checkpoint_dir = Path(suspended["status"]["plan"]["checkpointDir"])
    saved = int((checkpoint_dir / "latest_checkpointed_iteration.txt").read_text())
    assert not (checkpoint_dir / ".grpo-save-now").exists()  # miles consumed the sentinel
    wait_for(
        "RayCluster deleted",
        lambda: kubectl("get", "raycluster", names.ray_cluster("pausable"), "-n", ns, check=False).returncode != 0,
    )
    [first] = [j for j in jobs_of(ray_url, ns, "pausable") if not j.submission_id.endswith("-save")]
    wait_for("job stopped", lambda: jobs_client(ray_url).get_job_status(first.submission_id) == JobStatus.STOPPED)
    stopped = condition(suspended, "JobRunning")["lastTransitionTime"]  # after the first job's last rollout
    since = datetime.strptime(stopped, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    wait_for(
        "the suspension to outlast guards.stallTimeoutSeconds",  # the scenario's premise, not a speed check
        lambda: (datetime.now(UTC) - since).total_seconds() > stall + 5,
    )
    kubectl("patch", "grporun", "pausable", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    resumed = wait_for(
        "Running again",
        lambda: (
            (r := phase_is(kubectl, ns, "pausable", "Running"))
            and r["status"]["jobSubmissionId"] != first.submission_id
            and r
        ),
    )
    line = f"resuming at rollout {saved + 1}"
    wait_for(line, lambda: line in jobs_client(ray_url).get_job_logs(resumed["status"]["jobSubmissionId"]))
    main_jobs = [j for j in jobs_of(ray_url, ns, "pausable") if not j.submission_id.endswith("-save")]
    assert len(main_jobs) == 2
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "pausable", "Succeeded", "Failed"), timeout=240)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["progress"] == "40/40" and done["status"]["attempt"] == 2


def test_spec_edits_other_than_suspend_and_guards_are_refused(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("frozen", ns, fake(rollouts=100)))
    refused = kubectl(
        "patch",
        "grporun",
        "frozen",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"spec": {"rollout": {"numRollout": 5}}}',
        check=False,
    )
    assert refused.returncode != 0 and "only spec.suspend and spec.guards can change" in refused.stderr
    allowed = kubectl(
        "patch", "grporun", "frozen", "-n", ns, "--type=merge", "-p", '{"spec": {"guards": {"maxRepetitionFrac": 0.5}}}'
    )
    assert allowed.returncode == 0


def test_pod_problems_are_surfaced_in_the_schedulers_own_words(plain_env) -> None:  # type: ignore[no-untyped-def]
    _, ns, kubectl, _ = plain_env
    kubectl("apply", "-f", "-", input=manifest("stuck", ns, fake(rollouts=3)))
    wait_for(
        "RayCluster",
        lambda: kubectl("get", "raycluster", names.ray_cluster("stuck"), "-n", ns, check=False).returncode == 0,
    )
    wait_for(
        "default ServiceAccount",
        lambda: kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
    )
    # What KubeRay would create and the scheduler would report (no kubelet or scheduler runs here).
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stuck-ray-gpu-worker-abcde", "labels": names.labels("stuck", "ray-worker")},
        "spec": {"containers": [{"name": "ray-worker", "image": "miles@sha256:" + "0" * 64}]},
    }
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
    reason = "0/4 nodes are available: 4 Insufficient vpc.amazonaws.com/efa. preemption: 0/4 nodes are available."
    status = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}]}
    kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    run = wait_for(
        "the scheduler's words in the status",
        lambda: (
            (r := phase_is(kubectl, ns, "stuck", "Provisioning")) and reason in (r["status"].get("message") or "") and r
        ),
    )
    assert run["status"]["message"] == f"pod stuck-ray-gpu-worker-abcde unschedulable: {reason}"


def _serves(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
            return True
    except OSError:
        return False


def test_a_run_whose_last_rollouts_fall_between_scrapes_ends_at_its_real_last_rollout(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("brief", ns, fake("--fake-reward", "0.5", rollouts=6)))
    done = wait_for("terminal", lambda: phase_is(kubectl, ns, "brief", "Succeeded", "Failed"), timeout=180)
    assert not _serves(op.prometheus_port)  # the trainer's metrics died with the job
    assert done["status"]["phase"] == "Succeeded", done["status"]
    row = kubectl("get", "grporuns", "brief", "-n", ns, "--no-headers").stdout.split()
    assert row[1] == "Succeeded" and row[3] == "6/6" and row[4] == "0.5"
    assert done["status"]["metrics"]["source"] == "RunSummary" and done["status"]["metrics"]["rollout"] == 5
    assert condition(done, "MetricsAvailable")["reason"] == "RunSummary"
    assert done["status"]["provenance"]["ray"]  # read in the trainer's image by the launcher
    # Where the logs are, in status and in `kubectl describe`; the ConfigMap outlives the RayCluster.
    logs = done["status"]["logs"]
    assert logs["configMap"] == names.job_logs("brief") and logs["submissionId"] == done["status"]["jobSubmissionId"]
    assert names.job_logs("brief") in kubectl("describe", "grporun", "brief", "-n", ns).stdout
    wait_for(
        "RayCluster deleted",
        lambda: kubectl("get", "raycluster", names.ray_cluster("brief"), "-n", ns, check=False).returncode != 0,
    )
    kept = json.loads(kubectl("get", "configmap", logs["configMap"], "-n", ns, "-o", "json").stdout)
    assert "rollout 5: {'rollout/raw_reward': 0.5" in kept["data"][logs["key"]]
    assert kept["metadata"]["ownerReferences"][0]["name"] == "brief"


def test_a_failure_reported_from_inside_miles_names_the_failure_and_keeps_the_log(env) -> None:  # type: ignore[no-untyped-def]
    _op, ns, kubectl, _ = env
    spec = fake(
        "--fake-fail-after",
        "2",
        "--fake-fail-reason",
        "RewardServiceFailed",
        "--fake-fail-message",
        "reward service http://r:8000 unreachable for 600 s",
        rollouts=10,
    )
    kubectl("apply", "-f", "-", input=manifest("refused", ns, spec))
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "refused", "Failed", "Succeeded"), timeout=180)
    assert run["status"]["reason"] == "RewardServiceFailed"
    assert run["status"]["message"].startswith("reward service http://r:8000 unreachable for 600 s")
    assert "\n" not in run["status"]["message"] and run["status"]["progress"] == "2/10"
    kept = json.loads(kubectl("get", "configmap", names.job_logs("refused"), "-n", ns, "-o", "json").stdout)
    assert "GRPO_RUN_SUMMARY" in kept["data"]["job.log"]


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("dec268f7", id="dec268f7: the client's failure ends miles"),
        pytest.param("v0.1.0", id="v0.1.0: miles swallows it and the launcher stops it"),
    ],
)
def test_a_reward_service_that_stays_down_fails_the_run_as_reward_service_failed_not_a_stall(  # type: ignore[no-untyped-def]
    env, version: str
) -> None:
    # miles scores through the real reward client (the image's --custom-rm-path) against a port nothing listens on.
    # At dec268f7 the client's exception ends miles; at v0.1.0 miles logs it and fetches more prompts for ever
    # (docs/integrations/miles.md), so only the launcher's watch of the client's failure ends the job. The stall
    # guard is far beyond the client's budget: a run that ends here ended for the reward service, not as a stall.
    _op, ns, kubectl, _ = env
    budget = 3.0
    spec = fake(
        "--custom-rm-path", "grpo_launcher.reward_client.reward", "--fake-score-rewards",
        "--rm-url", f"http://127.0.0.1:{free_port()}/score", "--fake-miles-version", version,
        "--fake-reward-retry-budget", str(budget),
        rollouts=1000,
        guards={"stallTimeoutSeconds": 3600, "startupGraceSeconds": 0},
    )  # fmt: skip
    name = f"down-{version.replace('.', '')}"
    kubectl("apply", "-f", "-", input=manifest(name, ns, spec))
    run = wait_for("terminal", lambda: phase_is(kubectl, ns, name, "Failed", "Succeeded"), timeout=300)
    assert (run["status"]["reason"], run["status"]["progress"]) == ("RewardServiceFailed", "0/1000"), run["status"]
    assert "no reward after" in run["status"]["message"] and "GRPO_REWARD_RETRY_BUDGET_S=3" in run["status"]["message"]
    healthy = next(c for c in run["status"]["conditions"] if c["type"] == "Healthy")
    assert healthy["reason"] != "Stalled"


def test_an_unreachable_metrics_endpoint_is_metrics_unavailable_not_a_stall(
    control_plane,
    ray_head,
    namespace,
    kubectl,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there (e.g. a NetworkPolicy drops it)
    with running_operator(control_plane, namespace, ray_head.dashboard_url, tmp_path, GRPO_TRAINER_METRICS_URL=dead):
        spec = fake("--fake-reward", "0.5", rollouts=30, guards={"stallTimeoutSeconds": 5, "startupGraceSeconds": 0})
        kubectl("apply", "-f", "-", input=manifest("blind", namespace, spec))
        play_kuberay_ready(kubectl, namespace, "blind")
        blind = wait_for(
            "MetricsAvailable=False",
            lambda: (
                (r := phase_is(kubectl, namespace, "blind", "Running"))
                and any(c["type"] == "MetricsAvailable" and c["status"] == "False" for c in r["status"]["conditions"])
                and r
            ),
        )
        assert condition(blind, "MetricsAvailable")["reason"] in ("ScrapeFailed", "ScrapeOutage")
        done = wait_for("terminal", lambda: phase_is(kubectl, namespace, "blind", "Succeeded", "Failed"), timeout=180)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["progress"] == "30/30"
