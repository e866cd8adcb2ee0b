"""The one module that talks to Ray: submit, look up and stop a run's job through the Ray Jobs API.

Submission is idempotent: the submission id is deterministic, and an existing job with that id is found
instead of submitted again, so an operator restarted mid-run never starts a second job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.job_submission import JobStatus, JobSubmissionClient

from grpo_operator.render import JobSubmission
from grpo_operator.status.observation import JobObservation, JobState


class RayUnavailable(RuntimeError):
    """The Ray head's Jobs API cannot be reached (yet)."""


@dataclass
class RayJobs:
    address: str

    def _client(self) -> JobSubmissionClient:
        try:
            return JobSubmissionClient(self.address)
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
        client.submit_job(
            entrypoint=job.entrypoint,
            submission_id=job.submission_id,
            runtime_env=job.runtime_env,
            entrypoint_resources=job.entrypoint_resources,
            metadata=job.metadata,
        )
        return JobObservation(job.submission_id, JobState.PENDING, "submitted")

    def stop(self, submission_id: str) -> bool:
        try:
            return bool(self._client().stop_job(submission_id))
        except RuntimeError:
            return False


def _observe(submission_id: str, info: Any) -> JobObservation:
    status = info.status.value if isinstance(info.status, JobStatus) else str(info.status)
    driver = getattr(info, "driver_info", None)
    driver_ip = getattr(driver, "node_ip_address", None) if driver is not None else None
    return JobObservation(
        submission_id=submission_id,
        state=JobState(status),
        message=info.message or "",
        driver_ip=driver_ip,
    )
