"""The run's lifecycle: from the previous status and what one reconcile observed, the `Decision` (the next status
and every action, in order). Pure. One switch on the observed state; each concern is its own module: `admission`
(spec verdict, Kueue, readiness, submission), `attempts` (which job, suspend), `running` (metrics, guards),
`completion` (verified success, failure reasons, winding down). Phases: Pending -> Provisioning -> Running ->
Succeeded | Failed, and Suspended; a terminal phase never changes again."""

from __future__ import annotations

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import TERMINAL_PHASES, ConditionType, GRPORunStatus, Reason
from grpo_operator.status import accounting, admission, attempts, completion, forensics, running
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
from grpo_operator.status.observation import JobObservation, JobState, Observation


def _draft(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec, conds: Conditions) -> Draft:
    attempt = attempts.current(prev, obs)
    progress = running.progress(prev, obs, spec, attempts.guard_state(prev, attempt))
    draft = Draft(prev, obs, spec, conds, attempt, progress)
    draft.events.extend(Event("Warning", Reason.EVAL_NOT_SCORED, text) for text in progress.eval_warnings)
    draft.metrics_available = running.availability(draft)
    return draft


def _by_state(draft: Draft) -> Decision:
    obs = draft.obs
    if obs.suspend:
        return attempts.suspend(draft)
    if obs.cluster is not None and obs.cluster.queue is not None:
        return admission.waiting_for_admission(draft, obs.cluster.queue)
    ready = admission.resources(draft)
    job = obs.job
    if job is None and attempts.job_seen(draft):
        return attempts.unreachable(draft) if obs.ray_unavailable is not None else completion.head_lost(draft)
    if job is None:
        return admission.before_submit(draft, ready)
    trip = running.health(draft)
    if job.state is JobState.PENDING:
        return admission.waiting_for_driver(draft)
    if job.state is JobState.RUNNING:
        return running.running(draft, trip)
    return completion.ended(draft, trip)


def decide(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec | None) -> Decision:
    decision = forensics.requested(prev, obs, _decide(prev, obs, spec))
    # The runtime a run was first planned against stays its runtime (planning/runtime.py runtime_from_record), with
    # its digest as it was (the reconciler seals what it writes). Set before the accounting, which writes only when
    # the rest of the status changed. A copy that failed its digest reaches here only while it is held (the
    # reconciler passes a prev without it otherwise): kept as it was found.
    held = prev.runtime if prev is not None else None
    digest = prev.runtime_digest if prev is not None and held is not None else None
    status = decision.status.model_copy(update={"runtime": held or obs.runtime, "runtime_digest": digest})
    ledger, events = accounting.account(prev, obs, status)
    events = admission.altered_runtime_events(prev, obs) + decision.events + events
    return Decision(status.model_copy(update={"accounting": ledger}), decision.actions, events)


def _decide(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec | None) -> Decision:
    if obs.runtime_missing is not None and obs.runtime_altered is not None and prev is not None:
        return admission.runtime_held(prev, obs, Conditions(prev, obs.generation, obs.now))
    if prev is not None and prev.phase in TERMINAL_PHASES:
        return completion.wind_down(prev, obs)
    conds = Conditions(prev, obs.generation, obs.now)
    if obs.runtime_missing is not None:
        return admission.runtime_missing(obs, conds)
    if obs.api_unavailable is not None:
        return admission.api_unavailable(prev, obs, conds)
    if spec is not None and obs.problems and admission.started(prev):
        return _edit_refused(prev, obs, spec, conds)
    if obs.problems or spec is None:
        return admission.invalid(prev, obs, conds)
    conds.set(ConditionType.VALIDATED, True, Reason.VALID, "spec passed validation and fits")
    decision = _by_state(_draft(prev, obs, spec, conds))
    # The token Secret before any child (the Ray pods start only with it); the children kept in place unless
    # suspended (the apply of an unchanged child is not sent: edges/kubecache.py).
    first: tuple[Action, ...] = () if obs.token_secret else (CreateTokenSecret(),)
    if not obs.suspend:
        first = (*first, ApplyChildren())
    return Decision(decision.status, first + decision.actions, decision.events)


def _edit_refused(prev: GRPORunStatus | None, obs: Observation, spec: GRPORunSpec, conds: Conditions) -> Decision:
    """An edit that cannot run, made after the run started: the attempt that runs goes on as it was rendered
    (nothing is applied from the edit) and is observed and judged as before; `Validated=False` says why, and no
    attempt is submitted from the edit (admission.before_submit). Fixing or reverting the edit is all it takes."""
    text = "; ".join(obs.problems)
    said = [c for c in (prev.conditions if prev is not None else None) or [] if c.type == ConditionType.VALIDATED]
    changed = not (said and said[0].status == "False" and said[0].observed_generation == obs.generation)
    conds.set(ConditionType.VALIDATED, False, Reason.INVALID_SPEC, text)
    decision = _by_state(_draft(prev, obs, spec, conds))  # without the ApplyChildren a valid spec's decision leads with
    warned = (
        Event(
            "Warning",
            Reason.INVALID_SPEC,
            f"generation {obs.generation} cannot run: {text}; the running "
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
