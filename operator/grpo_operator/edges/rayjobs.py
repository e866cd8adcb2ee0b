"""The one module that talks to Ray: submit, look up and stop a run's job through the Ray Jobs API.

Submission is idempotent: the submission id is deterministic, and an existing job with that id is found
instead of submitted again, so an operator restarted mid-run never starts a second job.

Every call carries the run's Ray auth token as `Authorization: Bearer <token>`, the header Ray's token
middleware reads first, in the client's `headers` (docs/integrations/ray.md). The operator's own process never
sets RAY_AUTH_MODE: each run has its own token, so it goes per client, never through the process environment.
The token is never part of a message or a repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ray.job_submission import JobStatus, JobSubmissionClient

from grpo_operator.render import JobSubmission
from grpo_operator.status.observation import JobObservation, JobState


class RayUnavailable(RuntimeError):
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
