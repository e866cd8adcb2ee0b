"""The job ended: `Succeeded` only when verified (the Ray job SUCCEEDED, the final rollout's metrics were observed,
by scrape or in the launcher's end-of-run summary, and they pass the guards, whatever `guards.action` says), else
`Failed` with the reason: Unverified, the guard's, the failure file's, PreflightFailed, JobFailed or JobStopped.
A failed job's evidence is captured before anything else can take its RayCluster (`status.forensics`). A terminal
run then only winds down: stop the job if it still runs, keep its log tail, delete the RayCluster."""

from __future__ import annotations

import re

from grpo_operator.api.status import ConditionType, GRPORunStatus, Phase, Reason, RunLogs
from grpo_operator.status import failures, forensics, recovery
from grpo_operator.status.conditions import restamped
from grpo_operator.status.decision import Action, Decision, DeleteRayCluster, Draft, Event, KeepLogs, StopJob
from grpo_operator.status.guards import Trip
from grpo_operator.status.observation import JobState, RunSummary, Seen

C, R = ConditionType, Reason
PREFLIGHT_MARK = "preflight failed:"
_EXIT = re.compile(r"exit code (-?\d+)")
_JOB_RUNNING_REASON = {JobState.SUCCEEDED: R.SUCCEEDED, JobState.FAILED: R.FAILED, JobState.STOPPED: R.STOPPED}


def last_line(message: str) -> str:
    """The last line of the job's output that says something: not the launcher's own bookkeeping."""
    for line in reversed(message.splitlines()):
        text = " ".join(line.split())
        bookkeeping = "GRPO_RUN_SUMMARY" in text or "last available logs" in text
        if text and not bookkeeping and not text.startswith("[info] miles exited"):
            return text[:500]
    return ""


def job_failure(message: str, summary: RunSummary | None, logs: RunLogs | None, log_text: str = "") -> tuple[str, str]:
    """The Failed reason and ONE line saying why: the failure file's reason when a component inside miles wrote
    one, the preflight's own line, the failure class the log shows (`status.failures`), else the exit code and
    the job's last line of output."""
    where = f" (log tail: ConfigMap {logs.config_map})" if logs is not None else ""
    if summary is not None and summary.failure is not None:
        return summary.failure.reason, f"{summary.failure.message}{where}"
    for line in reversed(message.splitlines()):
        if PREFLIGHT_MARK in line:
            return R.PREFLIGHT_FAILED, line[line.index(PREFLIGHT_MARK) :].strip()
    failure = failures.classify(log_text or message)
    if failure is not None:
        return failure.reason, f"{failure.message}{where}"
    found = _EXIT.search(message)
    code = summary.exit_code if summary is not None and summary.exit_code is not None else None
    if code is None and found:
        code = int(found.group(1))
    head = f"the Ray job failed with exit code {code}" if code is not None else "the Ray job failed"
    last = last_line(message)
    return R.JOB_FAILED, f"{head}: {last}{where}" if last else f"{head}{where}"


def _after(draft: Draft, message: str) -> str:
    done = recovery.used(draft)
    return f"{message} (after {done} restart{'s' if done > 1 else ''})" if done else message


def _failed(draft: Draft, reason: str, message: str) -> Decision:
    draft.conds.set(C.COMPLETE, True, reason, message)
    draft.warn(message)
    return draft.decide(Phase.FAILED, reason, message)


def _succeeded(draft: Draft, trip: Trip | None) -> Decision:
    """Verified or not: a trip fails it under either guard action, a missing final rollout makes it Unverified."""
    if trip is not None:
        what = "the held-out score regressed" if trip.reason is R.EVAL_REGRESSED else "the output is degenerate"
        return _failed(draft, trip.reason, f"the Ray job succeeded but {what}: {trip.message}")
    metrics, progress = draft.progress.metrics, draft.progress.text
    if metrics is None or metrics.rollout != draft.progress.total - 1:
        last = f"the last rollout observed is {progress}" if metrics is not None else "no rollout metrics were observed"
        how = "" if draft.seen.summary is not None else " and its log has no end-of-run summary"
        return _failed(draft, R.UNVERIFIED, f"the Ray job succeeded but the end cannot be verified: {last}{how}")
    missing = export_missing(draft)
    if missing is not None:
        return _failed(draft, R.EXPORT_MISSING, missing)
    draft.conds.set(C.COMPLETE, True, R.SUCCEEDED, f"{progress} rollouts")
    return draft.decide(Phase.SUCCEEDED, R.SUCCEEDED, f"completed {progress} rollouts")


def export_missing(draft: Draft) -> str | None:
    """Why a requested Hugging Face export cannot be credited: the launcher did not find it whole."""
    if not draft.spec.export.huggingface:
        return None
    out = draft.progress.outputs
    if out is not None and out.huggingface_verified:
        return None
    where = f" at {out.huggingface_path}" if out is not None and out.huggingface_path else ""
    return (
        f"spec.export.huggingface is true but the launcher found no complete Hugging Face export{where} (config.json "
        "and non-empty weight files); miles logs 'Failed to save HuggingFace format' when its export fails"
    )


def ended(draft: Draft, trip: Trip | None) -> Decision:
    """The job ended this reconcile (or before): the terminal phase, and its log tail kept."""
    job, seen = draft.seen.job, draft.seen
    assert job is not None
    draft.conds.set(C.JOB_RUNNING, False, _JOB_RUNNING_REASON[job.state], last_line(job.message))
    keep = keep_logs(draft.prev, seen)
    draft.events.extend(keep[1])
    if job.state is JobState.SUCCEEDED:
        decision = _succeeded(draft, trip)
    elif job.state is JobState.STOPPED:
        decision = _failed(draft, R.JOB_STOPPED, "the Ray job was stopped outside the operator")
    else:
        reason, message = recovery.host_oom(draft) or job_failure(job.message, seen.summary, seen.logs, seen.log_text)
        capture, bundles = forensics.after_failure(draft, reason)
        decision = recovery.restart(draft, reason, message) or _failed(draft, reason, _after(draft, message))
        status = decision.status.model_copy(update={"forensics": bundles})
        decision = Decision(status, capture + decision.actions, decision.events)
    return Decision(decision.status, keep[0] + decision.actions, decision.events)


def head_lost(draft: Draft) -> Decision:
    """The Ray head answers, but the job the status saw is not in its table: the head was lost (its pod deleted,
    evicted or restarted; without GCS fault tolerance the job record goes with it), and the job's driver with it.
    A failed attempt like any other: a counted restart from the last checkpoint, or `Failed` past maxRestarts."""
    prev = draft.prev
    assert prev is not None
    message = (
        f"the Ray head answers but has no job {prev.job_submission_id}: the head was lost (its pod deleted, evicted "
        "or restarted) and the job with it"
    )
    draft.conds.set(C.JOB_RUNNING, False, R.FAILED, message)
    return recovery.restart(draft, R.HEAD_LOST, message) or _failed(draft, R.HEAD_LOST, _after(draft, message))


def keep_logs(prev: GRPORunStatus | None, seen: Seen) -> tuple[tuple[Action, ...], tuple[Event, ...]]:
    """Keep the log tail read this reconcile unless the status already says it is kept."""
    logs = seen.logs
    if logs is None or (prev is not None and prev.logs == logs):
        return (), ()
    kept = (
        f"the log tail of Ray job {logs.submission_id} ({logs.bytes} bytes{', truncated' if logs.truncated else ''})"
        f" is kept in ConfigMap {logs.config_map}, key {logs.key}"
    )
    return (KeepLogs(logs.submission_id),), (Event("Normal", R.LOGS_KEPT, kept),)


def wind_down(prev: GRPORunStatus, seen: Seen, generation: int) -> Decision:
    """A terminal run keeps its status (only the generation processed and where the logs are move) and gives its
    GPUs back: stop the job while it runs, then keep its log tail unless that is done, then delete the cluster."""
    status = prev.model_copy(
        update={
            "observed_generation": generation,
            "conditions": restamped(prev.conditions, generation),
            "logs": seen.logs or prev.logs,
        }
    )
    job = seen.job
    if job is not None and job.state.active:
        return Decision(status, (StopJob(job.submission_id),))
    if seen.cluster is None:
        return Decision(status)
    actions, events = keep_logs(prev, seen) if prev.logs is None else ((), ())
    return Decision(status, (*actions, DeleteRayCluster()), events)
