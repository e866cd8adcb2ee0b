"""Where a run's Ray auth token goes: into its Secret and nowhere else a user, a log reader or a Ray job's
submitter could read it (rendered objects, the GRPORun status, events, the operator's logs, the Ray job's
runtime env, entrypoint and metadata, and the evidence bundles a stopped job leaves or a user asks for, unpacked,
the reward service's metrics in them included).

The run's token is the recognisable `harness.RAY_TOKEN` (the local head's), given in a Secret made before the
run; a run without one gets a Secret made by the operator, owned by the run, which the rendered Ray pods
reference and which is looked for the same way.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from grpo_operator.render import names
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from ray.job_submission import JobSubmissionClient

from tests.support.operator_harness import (
    RAY_TOKEN,
    REWARD_IMAGE,
    bundle_texts,
    fake,
    free_port,
    get_run,
    manifest,
    phase_is,
    play_kubelet_ready,
    play_kuberay_ready,
    running_operator,
    wait_for,
)

pytestmark = pytest.mark.integration

KINDS = "configmaps,secrets,services,deployments,replicasets,poddisruptionbudgets,networkpolicies,rayclusters,pods,grporuns,events"


def places_holding(token: str, kubectl: Any, namespace: str, logs: str) -> list[str]:
    """Every object of the namespace (and the operator's log) whose text holds the token, raw or base64."""
    needles = (token, base64.b64encode(token.encode()).decode())
    objects = json.loads(kubectl("get", KINDS, "-n", namespace, "-o", "json").stdout)["items"]
    found = [f"{o['kind']}/{o['metadata']['name']}" for o in objects if any(n in _text(o) for n in needles)]
    if any(n in logs for n in needles):
        found.append("operator log")
    return found


def _text(obj: dict[str, Any]) -> str:
    """An object as JSON, with the gzip'd pieces of a ConfigMap (the evidence bundles) unpacked."""
    unpacked = []
    for value in (obj.get("binaryData") or {}).values():
        raw = base64.b64decode(value)
        unpacked.append(gzip.decompress(raw).decode(errors="replace") if raw[:2] == b"\x1f\x8b" else "")
    return json.dumps(obj) + "".join(unpacked)


@pytest.fixture
def env(control_plane, ray_head, namespace, kubectl, tmp_path: Path):  # type: ignore[no-untyped-def]
    with running_operator(control_plane, namespace, ray_head.dashboard_url, tmp_path) as op:
        yield op, namespace, kubectl, ray_head


def test_the_token_appears_only_in_the_runs_secret_after_a_whole_run(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, head = env
    kubectl("apply", "-f", "-", input=manifest("secretive", ns, fake("--fake-reward", "0.5", rollouts=3)))
    play_kuberay_ready(kubectl, ns, "secretive")
    done = wait_for("Succeeded", lambda: phase_is(kubectl, ns, "secretive", "Succeeded", "Failed"), timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]  # the operator's Jobs API calls carried the token
    kubectl("get", "networkpolicy", names.network_policy("secretive", "ray-head"), "-n", ns)  # rendered, and searched
    assert places_holding(RAY_TOKEN, kubectl, ns, op.logs()) == [f"Secret/{names.ray_auth_secret('secretive')}"]
    client = JobSubmissionClient(head.dashboard_url, headers=head.auth_headers)
    [job] = [
        j
        for j in client.list_jobs()
        if (j.metadata or {}).get("grpo.dev/run") == "secretive" and (j.metadata or {}).get("grpo.dev/namespace") == ns
    ]
    submitted = json.dumps({"entrypoint": job.entrypoint, "runtime_env": job.runtime_env, "metadata": job.metadata})
    assert RAY_TOKEN not in submitted


def test_a_run_without_a_token_secret_gets_its_own_owned_by_the_run_and_referenced_by_every_ray_container(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, _ = env
    kubectl("apply", "-f", "-", input=manifest("fresh", ns, fake(rollouts=3), ray_token=None))
    secret_name = names.ray_auth_secret("fresh")
    wait_for("the token Secret", lambda: kubectl("get", "secret", secret_name, "-n", ns, check=False).returncode == 0)
    secret = json.loads(kubectl("get", "secret", secret_name, "-n", ns, "-o", "json").stdout)
    run = json.loads(kubectl("get", "grporun", "fresh", "-n", ns, "-o", "json").stdout)
    [owner] = secret["metadata"]["ownerReferences"]
    assert owner["uid"] == run["metadata"]["uid"] and owner["kind"] == "GRPORun"
    assert secret["immutable"] is True
    token = base64.b64decode(secret["data"][names.AUTH_TOKEN_KEY]).decode()
    assert len(token) >= 43 and token != RAY_TOKEN  # 32 random bytes, url-safe base64
    cluster = wait_for(
        "RayCluster",
        lambda: json.loads(
            kubectl("get", "raycluster", names.ray_cluster("fresh"), "-n", ns, "-o", "json", check=False).stdout
            or "null"
        ),
    )
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            env_vars = {e["name"]: e for e in container["env"]}
            assert env_vars["RAY_AUTH_MODE"]["value"] == "token"
            assert env_vars["RAY_AUTH_TOKEN"]["valueFrom"] == {
                "secretKeyRef": {"name": secret_name, "key": names.AUTH_TOKEN_KEY}
            }
    # The local head does not know this token: the operator's submission is refused, and says so without it.
    play_kuberay_ready(kubectl, ns, "fresh")
    refused = wait_for(
        "the refusal in the status",
        lambda: (
            (r := phase_is(kubectl, ns, "fresh", "Provisioning", "Pending"))
            and "Invalid authentication token" in (r["status"].get("message") or "")
            and r
        ),
    )
    assert "jobSubmissionId" not in refused["status"] or not refused["status"]["jobSubmissionId"]
    assert places_holding(token, kubectl, ns, op.logs()) == [f"Secret/{secret_name}"]


def test_a_stalled_run_keeps_its_evidence_before_the_stop_with_no_token_and_loses_it_with_the_run(env) -> None:  # type: ignore[no-untyped-def]
    op, ns, kubectl, head = env
    spec = fake("--fake-stall-after", "1", rollouts=10, guards={"stallTimeoutSeconds": 5, "startupGraceSeconds": 0})
    kubectl("apply", "-f", "-", input=manifest("hung", ns, spec))
    play_kuberay_ready(kubectl, ns, "hung")
    run = wait_for("Failed", lambda: phase_is(kubectl, ns, "hung", "Failed", "Succeeded"), timeout=180)
    assert run["status"]["reason"] == "Stalled", run["status"]
    [bundle] = run["status"]["forensics"]
    assert bundle["trigger"] == "Stalled" and bundle["submissionId"] == run["status"]["jobSubmissionId"]
    texts = bundle_texts(kubectl, ns, bundle["configMap"])
    # captured while the job still ran: its driver's stack is the stalled double's, its status RUNNING
    assert "fake_miles.py" in texts["stacks.txt.gz"] and '"status": "RUNNING"' in texts["job.json.gz"]
    assert "stalled before rollout 1" in texts["driver.log.gz"]
    assert places_holding(RAY_TOKEN, kubectl, ns, op.logs()) == [f"Secret/{names.ray_auth_secret('hung')}"]
    assert all(RAY_TOKEN not in text for text in texts.values())
    client = JobSubmissionClient(head.dashboard_url, headers=head.auth_headers)
    wait_for(
        "the job stopped after the capture", lambda: client.get_job_status(bundle["submissionId"]).value == "STOPPED"
    )
    kubectl("delete", "grporun", "hung", "-n", ns, "--wait=true", "--timeout=120s")
    wait_for(
        "the bundle garbage-collected with the run",
        lambda: kubectl("get", "configmap", bundle["configMap"], "-n", ns, check=False).returncode != 0,
    )


@pytest.fixture
def reward_env(control_plane, ray_head, namespace, kubectl, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The operator with a reward service's /metrics played by a registry serving the service's own error ratio,
    under a label whose value is the token (a secret that reached the reward service's metrics)."""
    registry = CollectorRegistry()
    ratio = Gauge("reward_service_service_error_ratio", "errors / requests", ["leaked"], registry=registry)
    ratio.labels(RAY_TOKEN).set(0.0)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with running_operator(
            control_plane, namespace, ray_head.dashboard_url, tmp_path, GRPO_REWARD_METRICS_URL=url
        ) as op:
            yield op, namespace, kubectl, ray_head
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _rollout(kubectl: Any, ns: str, name: str) -> int:
    return int(((get_run(kubectl, ns, name).get("status") or {}).get("metrics") or {}).get("rollout") or -1)


def test_a_capture_request_keeps_the_job_running_holds_no_token_and_is_not_repeated_after_an_operator_restart(
    reward_env,  # type: ignore[no-untyped-def]
) -> None:
    op, ns, kubectl, head = reward_env
    reward = {"reward": {"type": "remote", "remote": {"replicas": 1, "image": REWARD_IMAGE}}}
    kubectl("apply", "-f", "-", input=manifest("asked", ns, fake(rollouts=5000, **reward)))
    wait_for("reward pods", lambda: play_kubelet_ready(kubectl, ns, "grpo.dev/run=asked,grpo.dev/component=reward"))
    play_kuberay_ready(kubectl, ns, "asked")
    wait_for("rollouts", lambda: _rollout(kubectl, ns, "asked") >= 1, timeout=240)
    kubectl("annotate", "grporun", "asked", "-n", ns, "grpo.dev/capture=first")
    run = wait_for(
        "the request handled", lambda: (r := get_run(kubectl, ns, "asked"))["status"].get("captureHandled") and r
    )
    status = run["status"]
    assert status["captureHandled"] == "first" and (status["phase"], status["reason"]) == ("Running", "Running")
    [bundle] = status["forensics"]
    assert (bundle["trigger"], bundle["submissionId"]) == ("CaptureRequested", status["jobSubmissionId"])
    client = JobSubmissionClient(head.dashboard_url, headers=head.auth_headers)
    assert client.get_job_status(bundle["submissionId"]).value == "RUNNING"  # not stopped by the capture
    texts = bundle_texts(kubectl, ns, bundle["configMap"])
    assert "fake_miles.py" in texts["stacks.txt.gz"] and '"status": "RUNNING"' in texts["job.json.gz"]
    assert 'reward_service_service_error_ratio{leaked="<redacted>"} 0.0' in texts["reward-metrics.txt.gz"]
    assert all(RAY_TOKEN not in text for text in texts.values())

    # A restarted operator has only the status: the handled value there keeps it from capturing again.
    op.restart()
    seen = _rollout(kubectl, ns, "asked")
    wait_for("reconciles of the restarted operator", lambda: _rollout(kubectl, ns, "asked") >= seen + 3, timeout=240)
    status = get_run(kubectl, ns, "asked")["status"]
    assert len(status["forensics"]) == 1 and status["phase"] == "Running"
    assert client.get_job_status(bundle["submissionId"]).value == "RUNNING"

    kubectl("annotate", "grporun", "asked", "-n", ns, "grpo.dev/capture=second", "--overwrite")
    run = wait_for(
        "a second bundle", lambda: len((r := get_run(kubectl, ns, "asked"))["status"]["forensics"]) == 2 and r
    )
    second = run["status"]["forensics"][1]
    assert second["trigger"] == "CaptureRequested" and run["status"]["captureHandled"] == "second"
    assert "fake_miles.py" in bundle_texts(kubectl, ns, second["configMap"])["stacks.txt.gz"]
    assert places_holding(RAY_TOKEN, kubectl, ns, op.logs()) == [f"Secret/{names.ray_auth_secret('asked')}"]
    kubectl("delete", "grporun", "asked", "-n", ns, "--wait=true", "--timeout=120s")
