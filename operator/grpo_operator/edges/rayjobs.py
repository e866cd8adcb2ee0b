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
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import requests
from ray.job_submission import JobStatus, JobSubmissionClient

from grpo_operator.edges.errors import Unavailable
from grpo_operator.edges.stackslog import StacksRead, stacks_pieces
from grpo_operator.render import JobSubmission
from grpo_operator.status.observation import JobObservation, JobState

# The whole capture's deadline by default (the operator's GRPO_CAPTURE_BUDGET_SECONDS): it runs before a stop.
CAPTURE_BUDGET_SECONDS = 60.0
PER_REQUEST_SECONDS = 30.0
# The stacks job: what of the budget is kept for stopping it and reading its log, and how often it is looked at.
STACKS_STOP_SECONDS = 3.0
OVERRUN_SECONDS = 1.0
STACKS_POLL_SECONDS = 0.5


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
                entrypoint_resources=job.entrypoint_resources or None,
                metadata=job.metadata,
                entrypoint_num_cpus=job.entrypoint_num_cpus,
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

    def evidence(
        self,
        submission_id: str,
        log_lines: int = 2000,
        budget_seconds: float = CAPTURE_BUDGET_SECONDS,
        *,
        stacks: JobSubmission | None = None,
        py_spy: bool = False,
    ) -> dict[str, str]:
        """What Ray knows of a running job, piece by piece (docs/integrations/ray.md, "Evidence"): the job, its
        actors and tasks and the placement groups (the state API), the driver's log tail, and, through the job
        `stacks` (render/job.py `stacks_job`), every node's Python stacks, NCCL flight-recorder dumps and Ray log
        tails, no ptrace needed. With `py_spy` (the runtime grants ptrace) the dashboard's py-spy stack of the
        driver and of each live actor too. The requests go out together under one deadline, `budget_seconds` from
        the start (a dead node's agent must not hold the stop that follows): a piece that cannot be read, or not
        within the budget, says why instead, and `missing.txt` lists them. Only an unreachable head raises."""
        deadline = time.monotonic() + budget_seconds
        try:
            info = self._client().get_job_info(submission_id)
        except RuntimeError as exc:
            raise RayUnavailable(str(exc)) from None
        pieces = {"job.json": _json(_job_facts(submission_id, info))}
        with _Gather(deadline) as gather:
            stacks_read = gather.start(lambda t: self._stacks_job(stacks, t)) if stacks is not None else None
            got = gather.all(self._state_pieces(submission_id, info, log_lines, py_spy))
            sections = [got.pop("stack driver")] if py_spy else []
            pieces.update(got)
            if py_spy:
                sections += gather.all(self._actor_stacks(got["actors.json"])).values()
            extra: dict[str, str] = {}
            if stacks_read is not None:
                read = gather.finish("stacks", stacks_read)
                if read is not None:
                    found = stacks_pieces(read)
                    sections += found.stacks
                    extra = found.pieces
                    gather.missing += found.missing
            missing = gather.missing
        pieces["stacks.txt"] = "\n".join(sections)
        if missing:
            pieces["missing.txt"] = "".join(f"{what}: {why}\n" for what, why in missing)
        pieces.update(extra)  # after stacks.txt and missing.txt: a full bundle leaves logs out first
        return pieces

    def _state_pieces(
        self, submission_id: str, info: Any, log_lines: int, py_spy: bool
    ) -> dict[str, Callable[[float], str]]:
        driver = getattr(info, "driver_info", None)
        job_id = getattr(info, "job_id", None) or ""
        by_job = {"filter_keys": "job_id", "filter_predicates": "=", "filter_values": job_id}
        node_id, node_ip = getattr(info, "driver_node_id", None), getattr(driver, "node_ip_address", None)
        where = {"node_id": str(node_id)} if node_id else {"node_ip": str(node_ip)} if node_ip else {}
        # By node id where Ray gives one: an address can be a dead node's too (a pod's IP reused after a restart).
        driver_node = {"node_id": str(node_id)} if node_id else {"ip": str(node_ip)} if node_ip else {}
        calls: dict[str, Callable[[float], str]] = {
            "actors.json": lambda t: _json(self._state("actors", {"detail": "true", "limit": "1000", **by_job}, t)),
            "tasks-summary.json": lambda t: _json(self._state("tasks/summarize", by_job, t)),
            "placement-groups.json": lambda t: _json(
                self._state("placement_groups", {"detail": "true", "limit": "1000"}, t)
            ),
            "driver.log": lambda t: self._text(
                "/api/v0/logs/file", {"submission_id": submission_id, "lines": str(log_lines), **where}, t
            ),
        }
        if py_spy:
            calls["stack driver"] = lambda t: self._stack("driver", getattr(driver, "pid", None), driver_node, t)
        return calls

    def _actor_stacks(self, actors_json: str) -> dict[str, Callable[[float], str]]:
        actors = json.loads(actors_json) if actors_json.startswith(("[", "{")) else {}
        targets: dict[str, Callable[[float], str]] = {}
        for actor in _rows(actors):
            if actor.get("state") == "ALIVE" and actor.get("node_id"):
                name = f"actor-{actor.get('class_name')}-{str(actor.get('actor_id', ''))[:8]}"
                pid, node = actor.get("pid"), {"node_id": str(actor["node_id"])}
                targets[name] = self._stack_of(name, pid, node)
        return targets

    def _stacks_job(self, job: JobSubmission, timeout: float) -> StacksRead:
        """Submit the stacks job (or find this bundle's, submitted by a capture that was retried), wait until it
        ends or `timeout` is nearly spent, stop it if it still runs, and read its log."""
        until = time.monotonic() + timeout - STACKS_STOP_SECONDS
        self.submit(job)
        client = self._client()
        try:
            info = client.get_job_info(job.submission_id)
            while not JobStatus(info.status).is_terminal() and time.monotonic() < until:
                time.sleep(STACKS_POLL_SECONDS)
                info = client.get_job_info(job.submission_id)
            status = JobStatus(info.status)
            if not status.is_terminal():
                client.stop_job(job.submission_id)
                status = JobStatus.STOPPED
            log = str(client.get_job_logs(job.submission_id))
        except RuntimeError as exc:
            raise RayUnavailable(str(exc)) from None
        return StacksRead(status.value, str(getattr(info, "message", "") or ""), log)

    def _get(self, path: str, params: dict[str, str], timeout: float = 30.0) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            return requests.get(f"{self.address.rstrip('/')}{path}", params=params, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            raise RayUnavailable(f"Ray dashboard at {self.address} unreachable: {type(exc).__name__}") from None

    def _state(self, resource: str, params: dict[str, str], timeout: float = 30.0) -> Any:
        answer = self._get(f"/api/v0/{resource}", params, timeout)
        try:
            body = answer.json()
        except ValueError:
            return {"error": f"HTTP {answer.status_code}: {answer.text[:2000]}"}
        return body.get("data", {}).get("result", body) if isinstance(body, dict) else body

    def _text(self, path: str, params: dict[str, str], timeout: float = 30.0) -> str:
        answer = self._get(path, params, timeout)
        return answer.text if answer.ok else f"HTTP {answer.status_code}: {answer.text[:2000]}"

    def _stack_of(self, name: str, pid: object, node: dict[str, str]) -> Callable[[float], str]:
        return lambda timeout: self._stack(name, pid, node, timeout)

    def _stack(self, name: str, pid: object, node: dict[str, str], timeout: float = 30.0) -> str:
        if not pid or not node:
            return f"== {name}: no pid or node known\n"
        dump = self._text("/worker/traceback", {"pid": str(pid), **node, "native": "0"}, timeout)
        return f"== {name} (pid {pid} on {next(iter(node.values()))})\n{dump}\n"


T = TypeVar("T")


class _Gather:
    """Requests run side by side, each given what is left of one deadline (at most 30 s); what has not answered
    by the deadline, or failed, is named in `missing` and its piece says so. Threads still waiting are left to
    their own timeout (the executor is not waited for)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.missing: list[tuple[str, str]] = []
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="grpo-capture")

    def __enter__(self) -> _Gather:
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def start(self, call: Callable[[float], T]) -> Future[T]:
        """One call given the whole of what is left (no 30 s cap), collected later with `finish`."""
        return self._pool.submit(call, max(0.1, self.deadline - time.monotonic()))

    def finish(self, what: str, future: Future[T]) -> T | None:
        """The result of a `start`ed call by the deadline, or None with `what` named in `missing`."""
        wait([future], timeout=max(0.0, self.deadline - time.monotonic()))
        if not future.done():
            self.missing.append((what, "not collected within the capture's budget"))
        elif (error := future.exception()) is not None:
            self.missing.append((what, f"{type(error).__name__}: {error}"))
        else:
            return future.result()
        return None

    def all(self, calls: dict[str, Callable[[float], str]]) -> dict[str, str]:
        left = max(0.0, self.deadline - time.monotonic())
        # A request's own timeout ends a moment after the deadline, never on it: one that has not answered by the
        # deadline is then reliably "not collected", not a race between its timeout error and the wait.
        futures = {
            what: self._pool.submit(call, min(PER_REQUEST_SECONDS, left + OVERRUN_SECONDS))
            for what, call in calls.items()
        }
        wait(futures.values(), timeout=left)
        out: dict[str, str] = {}
        for what, future in futures.items():
            if not future.done():
                why = "not collected within the capture's budget"
            elif (error := future.exception()) is not None:
                why = f"{type(error).__name__}: {error}"
            else:
                out[what] = future.result()
                continue
            self.missing.append((what, why))
            out[what] = f"== {what}: {why}\n" if what.startswith("stack ") or what.startswith("actor-") else why
        return out


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
