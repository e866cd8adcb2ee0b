"""The run's lifecycle: from the previous status, what one reconcile read (`Seen`) and what the run asks for
(`Intent`), the `Decision` (the next status and every action, in order); a reconcile without a plan (`NoPlan`) has
its own small decision, `unplanned`. Pure. One switch on the observed state; each concern is its own module: `admission`
(spec verdict, Kueue, readiness, submission), `attempts` (which job, suspend), `running` (metrics, guards),
`completion` (verified success, failure reasons, winding down). Phases: Pending -> Provisioning -> Running ->
Succeeded | Failed, and Suspended; a terminal phase never changes again."""

from __future__ import annotations

from datetime import datetime

from grpo_operator.api.status import TERMINAL_PHASES, ConditionType, GRPORunStatus, Reason
from grpo_operator.status import accounting, admission, attempts, completion, forensics, guards, running
from grpo_operator.status.conditions import Conditions
from grpo_operator.status.decision import (
    Action,
    ApplyChildren,
    CreateTokenSecret,
    Decision,
    Draft,
    Event,
    StopJob,
)
from grpo_operator.status.intent import Intent, NoPlan
from grpo_operator.status.observation import JobObservation, JobState, Seen

NOTHING_SEEN = Seen()  # what a reconcile without a plan reads: nothing


def _draft(prev: GRPORunStatus | None, seen: Seen, intent: Intent, now: datetime, conds: Conditions) -> Draft:
    attempt = attempts.current(prev, seen, now)
    memory = guards.remembered(prev, attempt.same)
    progress = running.progress(prev, seen, intent.spec, memory, now)
    draft = Draft(prev, seen, intent, now, conds, attempt, progress)
    draft.events.extend(Event("Warning", Reason.EVAL_NOT_SCORED, text) for text in progress.eval_warnings)
    draft.metrics_available = running.availability(draft)
    return draft


def _by_state(draft: Draft) -> Decision:
    seen = draft.seen
    if draft.intent.suspend:
        return attempts.suspend(draft)
    if seen.cluster is not None and seen.cluster.queue is not None:
        return admission.waiting_for_admission(draft, seen.cluster.queue)
    ready = admission.resources(draft)
    job = seen.job
    if job is None and attempts.job_seen(draft):
        return attempts.unreachable(draft) if seen.ray_unavailable is not None else completion.head_lost(draft)
    if job is None:
        return admission.before_submit(draft, ready)
    trip = running.health(draft)
    if job.state is JobState.PENDING:
        return admission.waiting_for_driver(draft)
    if job.state is JobState.RUNNING:
        return running.running(draft, trip)
    return completion.ended(draft, trip)


def decide(prev: GRPORunStatus | None, seen: Seen, intent: Intent, now: datetime) -> Decision:
    """The decision of a reconcile that has a plan: what it read (`seen`) judged against what the run asks for
    (`intent`)."""
    decision = forensics.requested(prev, seen, intent, now, _decide(prev, seen, intent, now))
    first = admission.altered_runtime_events(prev, intent.runtime_altered, held=False)
    return _recorded(prev, decision, seen, intent, now, first=first)


def unplanned(prev: GRPORunStatus | None, why: NoPlan, now: datetime) -> Decision:
    """The decision of a reconcile without a plan (the spec cannot run, its GRPORuntime is missing, the API server
    could not answer): nothing was read, so nothing is applied, submitted or stopped but by a terminal run's wind
    down."""
    decision = forensics.requested(prev, NOTHING_SEEN, None, now, _unplanned(prev, why, now))
    first = admission.altered_runtime_events(prev, why.runtime_altered, held=why.runtime_missing is not None)
    return _recorded(prev, decision, NOTHING_SEEN, None, now, first=first)


def _recorded(
    prev: GRPORunStatus | None,
    decision: Decision,
    seen: Seen,
    intent: Intent | None,
    now: datetime,
    *,
    first: tuple[Event, ...],
) -> Decision:
    """The decision with what every status records: the runtime the run was planned against and the accounting;
    `first`, the events said before the decision's own."""
    # The runtime a run was first planned against stays its runtime (planning/runtime.py runtime_from_record), with
    # its digest as it was (the reconciler seals what it writes). Set before the accounting, which writes only when
    # the rest of the status changed. A copy that failed its digest reaches here only while it is held (the
    # reconciler passes a prev without it otherwise): kept as it was found.
    held = prev.runtime if prev is not None else None
    digest = prev.runtime_digest if prev is not None and held is not None else None
    planned = intent.runtime if intent is not None else None
    status = decision.status.model_copy(update={"runtime": held or planned, "runtime_digest": digest})
    ledger, events = accounting.account(prev, seen, intent, status, now)
    return Decision(
        status.model_copy(update={"accounting": ledger}), decision.actions, first + decision.events + events
    )


def _unplanned(prev: GRPORunStatus | None, why: NoPlan, now: datetime) -> Decision:
    if why.runtime_missing is not None and why.runtime_altered is not None and prev is not None:
        return admission.runtime_held(prev, why, Conditions(prev, why.generation, now))
    if prev is not None and prev.phase in TERMINAL_PHASES:
        return completion.wind_down(prev, NOTHING_SEEN, why.generation)
    conds = Conditions(prev, why.generation, now)
    if why.runtime_missing is not None:
        return admission.runtime_missing(why, conds)
    if why.api_unavailable is not None:
        return admission.api_unavailable(prev, why, conds)
    return admission.invalid(prev, why, conds, now)


def _decide(prev: GRPORunStatus | None, seen: Seen, intent: Intent, now: datetime) -> Decision:
    if prev is not None and prev.phase in TERMINAL_PHASES:
        return completion.wind_down(prev, seen, intent.generation)
    conds = Conditions(prev, intent.generation, now)
    if intent.edit_problems:
        if not admission.started(prev):  # nothing runs that the edit could leave running
            return admission.invalid(prev, NoPlan(intent.generation, intent.edit_problems), conds, now)
        return _edit_refused(prev, seen, intent, now, conds)
    conds.set(ConditionType.VALIDATED, True, Reason.VALID, "spec passed validation and fits")
    decision = _by_state(_draft(prev, seen, intent, now, conds))
    # The token Secret before any child (the Ray pods start only with it); the children kept in place unless
    # suspended (the apply of an unchanged child is not sent: edges/kubecache.py).
    first: tuple[Action, ...] = () if seen.token_secret else (CreateTokenSecret(),)
    if not intent.suspend:
        first = (*first, ApplyChildren())
    return Decision(decision.status, first + decision.actions, decision.events)


def _edit_refused(prev: GRPORunStatus | None, seen: Seen, intent: Intent, now: datetime, conds: Conditions) -> Decision:
    """An edit that cannot run, made after the run started: the attempt that runs goes on as it was rendered
    (nothing is applied from the edit) and is observed and judged as before; `Validated=False` says why, and no
    attempt is submitted from the edit (admission.before_submit). Fixing or reverting the edit is all it takes."""
    text = "; ".join(intent.edit_problems)
    said = [c for c in (prev.conditions if prev is not None else None) or [] if c.type == ConditionType.VALIDATED]
    changed = not (said and said[0].status == "False" and said[0].observed_generation == intent.generation)
    conds.set(ConditionType.VALIDATED, False, Reason.INVALID_SPEC, text)
    decision = _by_state(_draft(prev, seen, intent, now, conds))  # without the ApplyChildren a valid spec leads with
    warned = (
        Event(
            "Warning",
            Reason.INVALID_SPEC,
            f"generation {intent.generation} cannot run: {text}; the running "
            "attempt goes on as it was, and no new attempt starts until the edit is fixed or reverted",
        ),
    )
    return Decision(decision.status, decision.actions, decision.events + (warned if changed else ()))


def on_delete(prev: GRPORunStatus | None, job: JobObservation | None) -> Decision | None:
    """The run is being deleted: stop its job while it runs (the children follow by owner reference)."""
    if prev is None:
        return None
    stop = (StopJob(job.submission_id),) if job is not None and job.state.active else ()
    return Decision(prev, stop)
