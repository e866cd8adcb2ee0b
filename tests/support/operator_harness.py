"""Drive the real operator in tests: a `python -m grpo_operator` subprocess against the real API server and a
real local Ray head, with miles played by devtools/grpo_dev/fake_miles.py and KubeRay played by status patches
through the API server (KubeRay's controller and kubelets cannot run here)."""

from __future__ import annotations

import atexit
import base64
import gzip
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import yaml
from grpo_dev import fake_miles
from grpo_operator.render import names
from ray.job_submission import JobSubmissionClient

from tests.support.builders import EXAMPLES, merge

REPO = Path(__file__).resolve().parents[2]
FAKE_MILES = Path(fake_miles.__file__)
# Per-run knobs of the miles double, by run name (fake_miles --fake-knobs-dir); one directory per test process.
KNOBS_DIR = Path(tempfile.mkdtemp(prefix="grpo-fake-knobs-"))
atexit.register(shutil.rmtree, KNOBS_DIR, ignore_errors=True)
T = TypeVar("T")
REWARD_IMAGE = "registry.example/grpo-reward@sha256:" + "1" * 64
# The session's local Ray head runs with token auth on and this token (tests/operator/conftest.py). `manifest`
# gives every run a Secret holding it, made before the run, which the operator takes as the run's token (bring
# your own token) and sends to the head. Recognisable, so a test can grep for where it went.
RAY_TOKEN = f"grpo-canary-{secrets.token_hex(16)}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120.0, interval: float = 0.5) -> T:
    """Poll until `probe` returns something truthy; the timeout is a safety net, not an assertion on speed."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"gave up waiting for {what}; last seen: {last!r}")


def launcher_prefix(directory: Path) -> list[str]:
    """The real trainer launcher (output pump, GRPO_RUN_SUMMARY, failure file) around the miles double, as the
    Ray job entrypoint; its preflight is skipped (no GPU here) and its run config is a minimal one."""
    config = {
        "apiVersion": "grpo.dev/v1alpha1",
        "kind": "RunConfig",
        "run": {"name": "test", "namespace": "test"},
        "preflight": {
            "gpus": 0,
            "minFreeGpuMemoryGiB": 0.0,
            "shmMinGiB": 0.0,
            "fabric": {"type": "efa", "devices": 0},
            "gdrcopy": False,
            "checkpointDir": str(directory / "checkpoints"),
            "checkpointGiB": 0.0,
            "metricsPort": 0,
        },
    }
    path = directory / "run-config.json"
    path.write_text(json.dumps(config))
    return [
        sys.executable,
        "-m",
        "grpo_launcher",
        "run",
        "--config",
        str(path),
        "--skip-preflight",
        "--",
        sys.executable,
        str(FAKE_MILES),
        "--fake-knobs-dir",
        str(KNOBS_DIR),
    ]


class Operator:
    """The operator as a subprocess; `restart()` kills it hard and starts a new one."""

    def __init__(self, kubeconfig: Path, namespace: str, ray_url: str, log_dir: Path, **env: str) -> None:
        self.prometheus_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "GRPO_RAY_ADDRESS": ray_url,
            "GRPO_PROMETHEUS_PORT": str(self.prometheus_port),
            "GRPO_ENTRYPOINT_PREFIX": json.dumps(launcher_prefix(log_dir)),
            # Long enough that a run's last rollouts fall between two scrapes (the double, like miles, serves
            # nothing once it has exited): the end of a run must come from the launcher's run summary.
            "GRPO_RECONCILE_INTERVAL_SECONDS": "5",
            "GRPO_METRICS_PORT": "0",
            "GRPO_HTTP_TIMEOUT_SECONDS": "2",
            **env,
        }
        self.namespace = namespace
        self.args = ["--standalone", "--namespace", namespace]  # kopf's arguments; replaceable before start()
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.log_dir / f"operator-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grpo_operator", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop(signal.SIGKILL)
        self.start()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("operator-*.log")))


@contextmanager
def running_operator(
    control_plane: Any, namespace: str, ray_url: str, tmp_path: Path, *, ray_head: bool = True, **env: str
) -> Iterator[Operator]:
    """The operator for `namespace`; `ray_head=False` where `ray_url` is deliberately served by nothing (no job
    is ever submitted there, so none is left to stop)."""
    op = Operator(control_plane.kubeconfig, namespace, ray_url, tmp_path, **env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        if ray_head:
            stop_jobs(ray_url, namespace)


def stop_jobs(ray_url: str, namespace: str) -> None:
    """Stop the jobs of `namespace`'s runs still going on the session's Ray head once their operator is gone: a
    run the test left running (hundreds of rollouts, or a test that failed half way) keeps its job, and that
    job's trainer would take CPU from every test after it. The run itself stays, as the test left it."""
    client = jobs_client(ray_url)
    for job in client.list_jobs():
        if (job.metadata or {}).get("grpo.dev/namespace") == namespace and not job.status.is_terminal():
            client.stop_job(job.submission_id)  # False, not an error, where it ended meanwhile


def manifest(
    name: str,
    namespace: str,
    spec: dict[str, Any] | None = None,
    example: str = "quickstart",
    ray_token: str | None = RAY_TOKEN,
) -> str:
    """The run, after a Secret with the local head's token (`ray_token=None`: none; the operator makes one)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    spec = dict(spec or {})
    knobs = spec.pop(FAKE_KNOBS, None)
    if knobs is not None:
        (KNOBS_DIR / f"{name}.json").write_text(json.dumps(knobs))
    doc = merge(doc, {"spec": spec})
    doc["metadata"] = {"name": name, "namespace": namespace}
    if ray_token is None:
        return yaml.safe_dump(doc)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": names.ray_auth_secret(name), "namespace": namespace},
        "stringData": {names.AUTH_TOKEN_KEY: ray_token},
    }
    return yaml.safe_dump_all([secret, doc])


FAKE_KNOBS = "fakeMilesKnobs"  # a key `manifest` takes out of the spec patch: the double's knobs, not a field


def fake(*knobs: str, rollouts: int = 3, **spec: Any) -> dict[str, Any]:
    """A spec patch: `rollouts` rollouts of the stand-in trainer with the given `--fake-*` knobs (passed to the
    double through KNOBS_DIR by `manifest`: spec.extraArgs takes only miles's own flags)."""
    base = {"rollout": {"numRollout": rollouts}, FAKE_KNOBS: ["--fake-step-seconds", "0.4", *knobs]}
    return merge(base, spec)


def get_run(kubectl: Callable[..., Any], namespace: str, name: str) -> dict[str, Any]:
    out = kubectl("get", "grporun", name, "-n", namespace, "-o", "json").stdout
    data: dict[str, Any] = json.loads(out)
    return data


def bundle_texts(kubectl: Callable[..., Any], namespace: str, name: str) -> dict[str, str]:
    """An evidence bundle's ConfigMap: each gzip'd piece unpacked, and its index."""
    found = json.loads(kubectl("get", "configmap", name, "-n", namespace, "-o", "json").stdout)
    texts = {k: gzip.decompress(base64.b64decode(v)).decode() for k, v in (found.get("binaryData") or {}).items()}
    return {**texts, **found["data"]}


class NotYet(dict[str, Any]):
    """A run not in the phase waited for: falsy, so `wait_for` keeps polling, and shown as its status's summary
    when the wait gives up (which phase it was stuck in, and why)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        status = self.get("status") or {}
        conditions = [
            f"{c.get('type')}={c.get('status')}/{c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions") or []
        ]
        return (
            f"phase={status.get('phase')!r} reason={status.get('reason')!r} message={status.get('message')!r} "
            f"job={status.get('jobSubmissionId')!r} metrics={status.get('metrics')!r} conditions={conditions!r}"
        )


def phase_is(kubectl: Callable[..., Any], namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    """The run if its phase is one of `phases`, else a falsy `NotYet` holding it."""
    run = get_run(kubectl, namespace, name)
    return run if run.get("status", {}).get("phase") in phases else NotYet(run)


def play_kuberay_ready(kubectl: Callable[..., Any], namespace: str, run: str, workers: int = 1) -> None:
    """What KubeRay writes once the head and every worker pod are running."""
    cluster = names.ray_cluster(run)
    wait_for(
        f"RayCluster {cluster}",
        lambda: kubectl("get", "raycluster", cluster, "-n", namespace, check=False).returncode == 0,
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [
        {"type": t, "status": "True", "reason": r, "message": "", "lastTransitionTime": now}
        for t, r in (
            ("RayClusterProvisioned", "AllPodRunningAndReadyFirstTime"),
            ("HeadPodReady", "HeadPodRunningAndReady"),
        )
    ]
    status = {
        "state": "ready",
        "readyWorkerReplicas": workers,
        "desiredWorkerReplicas": workers,
        "conditions": conditions,
    }
    kubectl(
        "patch",
        "raycluster",
        cluster,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def jobs_client(ray_url: str) -> JobSubmissionClient:
    """A client of the local head, which runs with token auth on (the operator reads the token from the run's Secret)."""
    return JobSubmissionClient(ray_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"})


def jobs_of(ray_url: str, namespace: str, run: str) -> list[Any]:
    return [
        j
        for j in jobs_client(ray_url).list_jobs()
        if (j.metadata or {}).get("grpo.dev/run") == run and (j.metadata or {}).get("grpo.dev/namespace") == namespace
    ]


def play_kubelet_ready(kubectl: Any, namespace: str, selector: str) -> int:
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for pod in pods:
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "reward",
                    "image": REWARD_IMAGE,
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
        kubectl(
            "patch",
            "pod",
            pod["metadata"]["name"],
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
    return len(pods)
