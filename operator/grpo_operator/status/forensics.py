"""Evidence bundles: each capture of a job's evidence (before a guard stops it, after it failed, and when a user
asks with the `grpo.dev/capture` annotation) as the action that takes it, the bundle `status.forensics` lists and
the event naming its ConfigMap. Pure. A request is handled once per annotation value: the last value handled is
kept in `status.captureHandled`, so neither a later reconcile nor a restarted operator captures it twice, and a
request never changes the run's phase or stops its job."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from grpo_operator.api.status import TERMINAL_PHASES, EvidenceBundle, GRPORunStatus, Reason
from grpo_operator.status import failures
from grpo_operator.status.decision import Action, CaptureEvidence, Decision, DeleteRayCluster, Draft, Event, StopJob
from grpo_operator.status.intent import Intent
from grpo_operator.status.observation import JobObservation, Seen, rfc3339

R = Reason
MAX_BUNDLES = 16  # status.forensics keeps at most this many
CAPTURE_ANNOTATION = "grpo.dev/capture"


def kept(status: GRPORunStatus | None) -> list[EvidenceBundle]:
    return list(status.forensics or []) if status is not None else []


def capture(
    bundles: list[EvidenceBundle],
    job: JobObservation | None,
    trigger: str,
    when: str,
    *,
    name: str,
    now: datetime,
    pieces: tuple[tuple[str, str], ...] = (),
) -> tuple[tuple[CaptureEvidence, ...], list[EvidenceBundle] | None, tuple[Event, ...]]:
    """The capture of the observed job's evidence into the ConfigMap `name`, the bundles with it listed, and its
    event; nothing when there is no job, no ConfigMap name, or the list is full."""
    if job is None or not name or len(bundles) >= MAX_BUNDLES:
        return (), bundles or None, ()
    bundle = EvidenceBundle(time=rfc3339(now), trigger=trigger, submission_id=job.submission_id, config_map=name)
    text = f"evidence of Ray job {job.submission_id} ({trigger}) is kept in ConfigMap {name}, {when}"
    action = CaptureEvidence(job.submission_id, name, trigger, pieces)
    return (action,), [*bundles, bundle], (Event("Normal", R.EVIDENCE_CAPTURED, text),)


def after_failure(draft: Draft, reason: str) -> tuple[tuple[CaptureEvidence, ...], list[EvidenceBundle] | None]:
    """The capture of a job that failed with `reason`, before its RayCluster goes; an NCCL or fabric failure adds
    the log's NCCL lines with their context. Once per job: the decision that captures ends the run (and a terminal
    run only winds down) or restarts it, which tracks the next attempt's job id from then on."""
    job, bundles = draft.seen.job, kept(draft.prev)
    assert job is not None
    lines = failures.fabric_lines(draft.seen.log_text or job.message, reason)
    pieces = (("nccl.log", lines),) if lines else ()
    name, now = draft.intent.evidence_config_map, draft.now
    actions, listed, events = capture(bundles, job, reason, "after it failed", name=name, now=now, pieces=pieces)
    draft.events.extend(events)
    return actions, listed


def _skipped(decision: Decision, status: GRPORunStatus, why: str) -> Decision:
    event = Event("Normal", R.CAPTURE_SKIPPED, why)
    return Decision(status, decision.actions, (*decision.events, event))


def _before_stop(actions: tuple[Action, ...], capture: tuple[Action, ...]) -> tuple[Action, ...]:
    """`capture` placed before the first action that ends the job's processes."""
    at = next((i for i, a in enumerate(actions) if isinstance(a, StopJob | DeleteRayCluster)), len(actions))
    return (*actions[:at], *capture, *actions[at:])


def requested(
    prev: GRPORunStatus | None, seen: Seen, intent: Intent | None, now: datetime, decision: Decision
) -> Decision:
    """The decision with the user's capture request (`intent.capture_request`, the annotation's value) handled: a
    running job's evidence captured without stopping it, or an event saying why not; once per value. Without an
    intent (no plan this reconcile) the request waits: the status keeps the value it handled last."""
    value = intent.capture_request if intent is not None else None
    handled = prev.capture_handled if prev is not None else None
    if not value or value == handled:
        return replace(decision, status=decision.status.model_copy(update={"capture_handled": handled}))
    status = decision.status.model_copy(update={"capture_handled": value})
    job, asked = seen.job, f"{CAPTURE_ANNOTATION}={value}"
    if decision.has(CaptureEvidence):  # a guard or a failure captured this reconcile: that bundle answers it
        return replace(decision, status=status)
    if status.phase in TERMINAL_PHASES or job is None or not job.state.active:
        return _skipped(decision, status, f"{asked}: nothing captured, the run has no running Ray job ({status.phase})")
    bundles = kept(status)
    if len(bundles) >= MAX_BUNDLES:
        full = f"{asked}: nothing captured, status.forensics holds {MAX_BUNDLES} bundles already"
        return _skipped(decision, status, f"{full}; delete and recreate the run to capture more")
    assert intent is not None
    when = f"on request ({asked}); the job keeps running"
    actions, listed, events = capture(bundles, job, R.CAPTURE_REQUESTED, when, name=intent.evidence_config_map, now=now)
    if not actions:
        return _skipped(decision, status, f"{asked}: nothing captured, the run's bundle name is not known yet")
    status = status.model_copy(update={"forensics": listed})
    return Decision(status, _before_stop(decision.actions, actions), (*decision.events, *events))
