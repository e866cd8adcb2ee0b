"""The reconciler's unit tier: a `FakeKube` and a `FakeRay` that stand where `edges.kube.Kube` and
`edges.rayjobs.RayJobs` stand, so a reconcile runs whole (observe, decide, carry out, write the status) in
milliseconds, as KubeRay's fake client and httpx's MockTransport let their controllers run. What they play is only
what the edges' contract says (edges/errors.py): FakeKube records every call in order and can answer a kind with
the API server's refusals (403, 409, 422, 5xx) as `ApiException`s, which the real `Kube.record` then reads as it
reads the server's; FakeRay keeps jobs by submission id and can be unreachable. What only the real API server or
Ray shows stays in tests/integration and tests/e2e."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.reconciler import Outcome, Reconciler
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.edges.rayjobs import RayUnavailable
from grpo_operator.render import JobSubmission, names
from grpo_operator.status.observation import JobObservation, JobState
from kubernetes.client.exceptions import ApiException

from tests.support.builders import base, merge

NAMESPACE, NAME, UID = "team", "x", "0f1e2d3c-0000-4000-8000-000000000001"
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def api_error(status: int, message: str) -> ApiException:
    """What the kubernetes client raises for an API server answer of `status`, with the server's Status body."""
    error = ApiException(status=status, reason=message)
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return error


class FakeKube(Kube):
    """The API server as the reconciler sees it: the run, its RayCluster, its pods; every call in `calls`."""

    def __init__(self, run: dict[str, Any]) -> None:  # no client: every call that would use one is played here
        self.cache = KubeCache()
        self.run = run
        self.cluster: dict[str, Any] | None = None
        self.pods: list[Any] = []
        self.applied: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse: dict[str, ApiException] = {}  # a part of a child's name -> the error its apply answers
        self.runtimes: dict[str, dict[str, Any]] = {}  # GRPORuntimes by name; none: the built-in default

    # the run
    def get_run(self, namespace: str, run: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.run)

    def get_run_fresh(self, namespace: str, run: str) -> dict[str, Any] | None:
        return self.get_run(namespace, run)

    def runtime(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.runtimes.get(name))  # none: the built-in AWS types are the default runtime

    def patch_status(
        self, namespace: str, run: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        self.calls.append(("patch_status", run))
        return None  # the test carries the Outcome's status to the next reconcile

    # children
    def apply(self, manifest: dict[str, Any]) -> None:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        self.calls.append(("apply", f"{kind}/{name}"))
        for part, error in self.refuse.items():
            if part in name:
                raise error
        self.applied[(kind, name)] = manifest

    def create(self, manifest: dict[str, Any]) -> bool:
        self.apply(manifest)
        return True

    def pod_template_problems(self, namespace: str, children: list[dict[str, Any]]) -> list[str]:
        return []

    def dry_run_problems(self, children: list[dict[str, Any]]) -> list[str]:
        return []

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        return self.cluster

    def delete_ray_cluster(self, namespace: str, run: str) -> bool:
        self.calls.append(("delete_ray_cluster", run))
        self.cluster = None
        return True

    def run_pods(self, namespace: str, run: str) -> list[Any]:
        return self.pods

    def reward_deployment(self, namespace: str, run: str) -> Any:
        return None

    def ray_auth_token(self, namespace: str, run: str, uid: str | None, *, create: bool = True) -> str | None:
        return "token"

    def kueue_workloads(self, namespace: str, cluster: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def status_key(self, namespace: str, name: str) -> bytes:
        return b"k" * 32  # the operator's key that seals status.runtime (planning/runtimeseal.py)


@dataclass
class FakeRay:
    """The Ray Jobs API of the run's head: jobs by submission id; `unavailable` makes every call raise as the real
    client does when the head cannot be reached."""

    jobs: dict[str, JobObservation] = field(default_factory=dict)
    logs_of: dict[str, str] = field(default_factory=dict)
    unavailable: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    token: str | None = "token"
    captures: list[tuple[str, JobSubmission | None, bool]] = field(default_factory=list)  # evidence's arguments
    evidence_pieces: dict[str, str] = field(default_factory=dict)  # what evidence returns beside job.json

    def _reach(self, what: str, submission_id: str) -> None:
        self.calls.append((what, submission_id))
        if self.unavailable is not None:
            raise RayUnavailable(self.unavailable)

    def find(self, submission_id: str) -> JobObservation | None:
        self._reach("find", submission_id)
        return self.jobs.get(submission_id)

    def submit(self, job: JobSubmission) -> JobObservation:
        self._reach("submit", job.submission_id)
        found = JobObservation(job.submission_id, JobState.PENDING)
        self.jobs[job.submission_id] = found
        return found

    def stop(self, submission_id: str) -> bool:
        self._reach("stop", submission_id)
        job = self.jobs.get(submission_id)
        if job is not None:
            self.jobs[submission_id] = JobObservation(submission_id, JobState.STOPPED)
        return job is not None

    def logs(self, submission_id: str) -> str:
        self._reach("logs", submission_id)
        return self.logs_of.get(submission_id, "")

    def evidence(
        self,
        submission_id: str,
        log_lines: int = 2000,
        budget_seconds: float = 60.0,
        *,
        stacks: JobSubmission | None = None,
        py_spy: bool = False,
    ) -> dict[str, str]:
        self._reach("evidence", submission_id)
        self.captures.append((submission_id, stacks, py_spy))
        return {"job.json": json.dumps({"submission_id": submission_id}), **self.evidence_pieces}


def run_body(spec: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    body = merge(base(), {"spec": spec or {}})
    body["metadata"] = {
        "name": NAME,
        "namespace": NAMESPACE,
        "uid": UID,
        "generation": generation,
        "creationTimestamp": T0.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return body


READY_CLUSTER = {
    "metadata": {"name": names.ray_cluster(NAME), "uid": "c1"},
    "spec": {},
    "status": {"state": "ready", "readyWorkerReplicas": 1},
}


@dataclass
class FakeScraper:
    """The trainer's metrics endpoint: miles's gauges at `rollout` (None: the endpoint answers without them)."""

    rollout: int | None = None

    def fetch(self, url: str, timeout: float) -> str:
        if self.rollout is None:
            return ""
        return f'miles_metric_rollout_step{{run_name="{NAME}"}} {self.rollout}\n'


@dataclass
class Harness:
    """A reconciler over FakeKube and FakeRay, with a clock the test moves; `step` reconciles once and carries the
    status it wrote into the run, as the API server would."""

    kube: FakeKube
    ray: FakeRay
    scraper: FakeScraper = field(default_factory=FakeScraper)
    now: datetime = T0
    outcomes: list[Outcome] = field(default_factory=list)

    def reconciler(self) -> Reconciler:
        settings = OperatorSettings(ray_address="http://127.0.0.1:9")
        return Reconciler(
            kube=self.kube,
            settings=settings,
            clock=lambda: self.now,
            ray_for=lambda *_: self.ray,  # type: ignore[arg-type]
            scraper=self.scraper,  # type: ignore[arg-type]
        )

    def step(self, minutes: float = 1.0) -> Outcome:
        self.now += timedelta(minutes=minutes)
        outcome = self.reconciler().reconcile(self.kube.run)
        self.kube.run["status"] = outcome.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.outcomes.append(outcome)
        return outcome


def harness(spec: dict[str, Any] | None = None) -> Harness:
    return Harness(FakeKube(run_body(spec)), FakeRay())


def running(h: Harness, rollout: int) -> Outcome:
    """Bring the run to Running at `rollout`: the cluster ready, the submitted job running on a driver node."""
    h.kube.cluster = READY_CLUSTER
    h.scraper.rollout = rollout
    outcome = h.step()
    for submission_id in list(h.ray.jobs):
        h.ray.jobs[submission_id] = JobObservation(submission_id, JobState.RUNNING, driver_ip="10.0.0.5")
    return h.step() if outcome.status.phase != "Running" else outcome
