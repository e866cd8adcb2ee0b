"""The one module that talks to Ray: submit, look up and stop a run's job through the Ray Jobs API.

Submission is idempotent: the submission id is deterministic, and an existing job with that id is found
instead of submitted again, so an operator restarted mid-run never starts a second job.

Every call carries the run's Ray auth token as `Authorization: Bearer <token>`, the header Ray's token
middleware reads first, in the client's `headers` (docs/integrations/ray.md). The operator's own process never
sets RAY_AUTH_MODE: each run has its own token, so it goes per client, never through the process environment.
The token is never part of a message or a repr.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from ray.job_submission import JobStatus, JobSubmissionClient

from grpo_operator.edges.errors import Unavailable
from grpo_operator.render import JobSubmission
from grpo_operator.status.observation import JobObservation, JobState


class RayUnavailable(Unavailable):
    """The Ray head's Jobs API cannot be reached (yet)."""


@dataclass
class RayJobs:
    address: str
    token: str | None = field(default=None, repr=False)

    def _client(self) -> JobSubmissionClient:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            return JobSubmissionClient(self.address, headers=headers)
        except Exception as exc:  # ray raises ConnectionError/RuntimeError variants for an unreachable head
            raise RayUnavailable(f"Ray Jobs API at {self.address} unreachable: {exc}") from None

    def find(self, submission_id: str) -> JobObservation | None:
        client = self._client()
        try:
            info = client.get_job_info(submission_id)
        except RuntimeError as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return None
            raise RayUnavailable(str(exc)) from None
        return _observe(submission_id, info)

    def submit(self, job: JobSubmission) -> JobObservation:
        existing = self.find(job.submission_id)
        if existing is not None:
            return existing
        client = self._client()
        try:
            client.submit_job(
                entrypoint=job.entrypoint,
                submission_id=job.submission_id,
                runtime_env=job.runtime_env,
                entrypoint_resources=job.entrypoint_resources,
                metadata=job.metadata,
            )
        except RuntimeError as exc:  # another submit of the same id won the race: that job is the one
            found = self.find(job.submission_id) if "already exists" in str(exc) else None
            if found is None:
                raise RayUnavailable(str(exc)) from None
            return found
        return JobObservation(job.submission_id, JobState.PENDING, "submitted")

    def stop(self, submission_id: str) -> bool:
        try:
            return bool(self._client().stop_job(submission_id))
        except RuntimeError:
            return False

    def logs(self, submission_id: str) -> str:
        """The job's whole log (driver stdout and stderr) as the Jobs API serves it."""
        try:
            return str(self._client().get_job_logs(submission_id))
        except RuntimeError as exc:
            raise RayUnavailable(str(exc)) from None

    def evidence(self, submission_id: str, log_lines: int = 2000) -> dict[str, str]:
        """What Ray knows of a running job, piece by piece (docs/integrations/ray.md, "Evidence"): the job, its
        actors and tasks and the placement groups (the state API), the Python stack of the driver and of each
        live actor (the dashboard's py-spy traceback), the driver's log tail. A piece that cannot be read says
        why instead; only an unreachable head raises."""
        try:
            info = self._client().get_job_info(submission_id)
        except RuntimeError as exc:
            raise RayUnavailable(str(exc)) from None
        driver = getattr(info, "driver_info", None)
        job_id = getattr(info, "job_id", None) or ""
        pieces = {"job.json": _json(_job_facts(submission_id, info))}
        by_job = {"filter_keys": "job_id", "filter_predicates": "=", "filter_values": job_id}
        actors = self._state("actors", {"detail": "true", "limit": "1000", **by_job})
        pieces["actors.json"] = _json(actors)
        pieces["tasks-summary.json"] = _json(self._state("tasks/summarize", by_job))
        pieces["placement-groups.json"] = _json(self._state("placement_groups", {"detail": "true", "limit": "1000"}))
        node_id, node_ip = getattr(info, "driver_node_id", None), getattr(driver, "node_ip_address", None)
        where = {"node_id": str(node_id)} if node_id else {"node_ip": str(node_ip)} if node_ip else {}
        # By node id where Ray gives one: an address can be a dead node's too (a pod's IP reused after a restart).
        driver_node = {"node_id": str(node_id)} if node_id else {"ip": str(node_ip)} if node_ip else {}
        targets = [("driver", getattr(driver, "pid", None), driver_node)]
        for actor in _rows(actors):
            if actor.get("state") == "ALIVE" and actor.get("node_id"):
                name = f"actor-{actor.get('class_name')}-{str(actor.get('actor_id', ''))[:8]}"
                targets.append((name, actor.get("pid"), {"node_id": str(actor["node_id"])}))
        pieces["stacks.txt"] = "\n".join(self._stack(*target) for target in targets)
        pieces["driver.log"] = self._text(
            "/api/v0/logs/file", {"submission_id": submission_id, "lines": str(log_lines), **where}
        )
        return pieces

    def _get(self, path: str, params: dict[str, str]) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            return requests.get(f"{self.address.rstrip('/')}{path}", params=params, headers=headers, timeout=30)
        except requests.RequestException as exc:
            raise RayUnavailable(f"Ray dashboard at {self.address} unreachable: {type(exc).__name__}") from None

    def _state(self, resource: str, params: dict[str, str]) -> Any:
        answer = self._get(f"/api/v0/{resource}", params)
        try:
            body = answer.json()
        except ValueError:
            return {"error": f"HTTP {answer.status_code}: {answer.text[:2000]}"}
        return body.get("data", {}).get("result", body) if isinstance(body, dict) else body

    def _text(self, path: str, params: dict[str, str]) -> str:
        answer = self._get(path, params)
        return answer.text if answer.ok else f"HTTP {answer.status_code}: {answer.text[:2000]}"

    def _stack(self, name: str, pid: object, node: dict[str, str]) -> str:
        if not pid or not node:
            return f"== {name}: no pid or node known\n"
        dump = self._text("/worker/traceback", {"pid": str(pid), **node, "native": "0"})
        return f"== {name} (pid {pid} on {next(iter(node.values()))})\n{dump}\n"


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=str)


def _rows(listing: Any) -> list[dict[str, Any]]:
    rows = listing.get("result", []) if isinstance(listing, dict) else []
    return [r for r in rows if isinstance(r, dict)]


def _job_facts(submission_id: str, info: Any) -> dict[str, Any]:
    """The job's state and driver, not its runtime env or entrypoint (what the submitter chose, which may name
    paths and settings a reader of the bundle need not see)."""
    driver = getattr(info, "driver_info", None)
    return {
        "submission_id": submission_id,
        "job_id": getattr(info, "job_id", None),
        "status": info.status.value if isinstance(info.status, JobStatus) else str(info.status),
        "message": (getattr(info, "message", "") or "")[-4000:],
        "start_time": getattr(info, "start_time", None),
        "driver": {
            "pid": getattr(driver, "pid", None),
            "node_ip_address": getattr(driver, "node_ip_address", None),
        },
    }


def _observe(submission_id: str, info: Any) -> JobObservation:
    status = info.status.value if isinstance(info.status, JobStatus) else str(info.status)
    driver = getattr(info, "driver_info", None)
    driver_ip = getattr(driver, "node_ip_address", None) if driver is not None else None
    return JobObservation(
        submission_id=submission_id,
        state=JobState(status),
        message=info.message or "",
        driver_ip=driver_ip,
        submitted_at=_from_ms(getattr(info, "start_time", None)),
    )


def _from_ms(value: object) -> datetime | None:
    """Ray's timestamps are Unix milliseconds."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)
