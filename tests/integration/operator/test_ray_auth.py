"""Ray token authentication against the real local head (started with RAY_AUTH_MODE=token, as every rendered Ray
container is): the Jobs API refuses whoever lacks the token, the operator's Ray client gets in, and what
KubeRay v1.5.0 runs in a Ray pod still passes: its wget probes (no token needed) and the `wait-gcs-ready`
init container's `ray health-check`, with the environment the rendered pod gives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from grpo_dev.localray import LocalRayHead
from grpo_operator.edges.rayjobs import RayJobs, RayUnavailable
from grpo_operator.render import JobSubmission, names
from grpo_operator.render.raycluster import pod_env
from ray.job_submission import JobSubmissionClient

from tests.support.builders import example, run_of

GPU_NODE = {"gpu_node": 0.001}


def http_status(url: str, method: str = "GET", headers: dict[str, str] | None = None, body: Any = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, method=method, data=data, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def a_job(tag: str) -> JobSubmission:
    return JobSubmission(
        submission_id=f"auth-{tag}-{uuid.uuid4().hex[:8]}",
        entrypoint_argv=("echo", "hello"),
        miles_argv=(),
        runtime_env={},
        entrypoint_resources=GPU_NODE,
        metadata={"test": "auth"},
    )


def test_a_submission_without_the_token_is_refused_and_the_operators_goes_through(ray_head: LocalRayHead) -> None:
    jobs_url = f"{ray_head.dashboard_url}/api/jobs/"
    submission = {"entrypoint": "echo pwned", "submission_id": f"intruder-{uuid.uuid4().hex[:8]}"}
    assert http_status(jobs_url, "POST", body=submission) == 401  # no token
    assert http_status(jobs_url, "POST", {"Authorization": "Bearer guessed"}, submission) == 403  # a wrong one
    with pytest.raises(Exception, match="Authentication required"):
        JobSubmissionClient(ray_head.dashboard_url).submit_job(entrypoint="echo pwned")
    with pytest.raises(RayUnavailable):
        RayJobs(ray_head.dashboard_url).submit(a_job("tokenless"))
    with pytest.raises(RayUnavailable):
        RayJobs(ray_head.dashboard_url, "guessed").find("anything")
    everyone = JobSubmissionClient(ray_head.dashboard_url, headers=ray_head.auth_headers).list_jobs()
    assert not [j for j in everyone if (j.submission_id or "").startswith("intruder-") or j.entrypoint == "echo pwned"]

    operator = RayJobs(ray_head.dashboard_url, ray_head.auth_token)
    job = a_job("operator")
    assert operator.submit(job).submission_id == job.submission_id
    found = operator.find(job.submission_id)
    assert found is not None and found.submission_id == job.submission_id
    assert ray_head.auth_token not in repr(operator)


def kuberay_probe(port: int, path: str, timeout: int) -> list[str]:
    """KubeRay's probe command, BaseWgetHealthCommand (kuberay v1.5.0 ray-operator/controllers/ray/utils/
    constant.go:235), on 127.0.0.1 and the local head's ports instead of localhost:52365 / localhost:8265."""
    return ["bash", "-c", f"wget --tries 1 -T {timeout} -q -O- http://127.0.0.1:{port}/{path} | grep success"]


def test_kuberays_probes_pass_under_token_auth_without_the_token(ray_head: LocalRayHead) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    # pod.go:364-376: the raylet check through the dashboard agent, and (head only) the GCS check.
    for port, path in (
        (ray_head.ports.agent_listen, "api/local_raylet_healthz"),
        (ray_head.ports.dashboard, "api/gcs_healthz"),
    ):
        done = subprocess.run(
            kuberay_probe(port, path, 2), env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, (path, done.stdout, done.stderr)
    # The same wget, tokenless, is turned away by the Jobs API: 401, wget's exit 6 (authentication failure).
    jobs = ["wget", "--tries", "1", "-T", "2", "-q", "-O-", f"http://127.0.0.1:{ray_head.ports.dashboard}/api/jobs/"]
    assert subprocess.run(jobs, env=env, capture_output=True, timeout=30, check=False).returncode == 6


def rendered_pod_environment(token: str) -> dict[str, str]:
    """The environment a rendered Ray container (and KubeRay's init container, which copies it) gets, with the
    kubelet's part played: the run's Secret resolved to `token`."""
    run = run_of(example("quickstart"))
    env = {}
    for entry in pod_env(run):
        ref = entry.get("valueFrom", {}).get("secretKeyRef")
        if ref == {"name": names.ray_auth_secret(run.metadata.name), "key": names.AUTH_TOKEN_KEY}:
            env[entry["name"]] = token
        elif "value" in entry:
            env[entry["name"]] = entry["value"]
    return env


def test_wait_gcs_ready_passes_with_the_rendered_pod_environment_and_fails_without_the_token(
    ray_head: LocalRayHead,
) -> None:
    """KubeRay's init container runs `ray health-check --address <head>:<port>` until it exits 0 (pod.go:269-290)
    with the Ray container's env (pod.go:298): the rendered env must carry the token there."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    base["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    argv = [ray_head.ray_executable, "health-check", "--address", ray_head.gcs_address]
    pod = rendered_pod_environment(ray_head.auth_token or "")
    assert pod["RAY_AUTH_MODE"] == "token"
    done = subprocess.run(argv, env={**base, **pod}, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    without = {k: v for k, v in pod.items() if k != "RAY_AUTH_TOKEN"}
    done = subprocess.run(argv, env={**base, **without}, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode != 0 and "token" in done.stderr.lower()
