"""What a run cost and where its time went (`status.accounting`): time per phase, the GPU-seconds its bound pods
held, each attempt's start, first rollout and end, the rollouts a later attempt had to redo, and goodput. Pure
and incremental: every reconcile adds the time since `updatedAt` (at the GPUs then held, in the phase then
current) to the totals in the previous status, so the values live in the status and a restarted operator, or
another replica, carries on from them. GPU-seconds come from the pods (their GPU requests while bound, from the
time they were bound), never from the spec. A later attempt's first rollout is the checkpoint it loaded + 1,
which says how many rollouts the attempt before it lost (the launcher's summary gives the exact first rollout).
With the operator's price per GPU-hour for the run's instance type, the GPU-hours and lost GPU-hours in USD."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime

from grpo_operator.api.status import (
    KUEUE_EVICTIONS,
    TERMINAL_PHASES,
    AttemptAccount,
    AttemptSave,
    GRPORunStatus,
    Phase,
    Reason,
    RunAccounting,
    SaveOutcome,
    StopReason,
)
from grpo_operator.status.decision import Event
from grpo_operator.status.intent import Intent
from grpo_operator.status.observation import JobState, Seen, parse_rfc3339, rfc3339

_BUCKET = {
    None: "queued_seconds",
    Phase.PENDING: "queued_seconds",
    Phase.PROVISIONING: "provisioning_seconds",
    Phase.RUNNING: "running_seconds",
    Phase.SUSPENDED: "suspended_seconds",
}
MAX_ATTEMPTS = 64
MAX_ROLLOUT_SAMPLES = 20
# A reconcile that changes nothing else leaves the accounting as it is (no status write) until this much time has
# passed: the time is not lost, the next update adds everything since `updatedAt`.
REFRESH_SECONDS = 60


def _hours(seconds: int) -> float:
    return round(seconds / 3600, 4)


def _seconds(later: datetime, earlier: datetime) -> int:
    return max(0, int((later - earlier).total_seconds()))


@dataclass
class _Ledger:
    """The accounting being brought up to date in one reconcile (a copy of the previous status's)."""

    run: RunAccounting
    closed: list[AttemptAccount] = field(default_factory=list)

    @property
    def open(self) -> AttemptAccount | None:
        last = self.run.attempts[-1] if self.run.attempts else None
        return last if last is not None and last.ended is None else None

    def hold(self, gpu_seconds: int) -> None:
        """GPU time held: the run's, and the open attempt's (the next attempt's, when none is open)."""
        self.run.gpu_seconds += gpu_seconds
        current = self.open
        if current is None:
            self.run.unattributed_gpu_seconds += gpu_seconds
        else:
            current.gpu_seconds += gpu_seconds


def _start(prev: GRPORunStatus | None, created: datetime | None, now: datetime) -> _Ledger:
    old = prev.accounting if prev is not None else None
    if old is not None:
        return _Ledger(old.model_copy(deep=True))
    since = min(now, created.replace(microsecond=0)) if created is not None else now
    return _Ledger(RunAccounting(updated_at=rfc3339(since)))


def _accrue(ledger: _Ledger, prev: GRPORunStatus | None, seen: Seen, now: datetime) -> None:
    """The time since the last update: in the phase then current, at the GPUs then held; then the GPUs held now
    (pods bound since the last update count from their binding)."""
    run = ledger.run
    since = parse_rfc3339(run.updated_at) or now
    elapsed = _seconds(now, since)
    bucket = _BUCKET[prev.phase if prev is not None else None]
    setattr(run, bucket, getattr(run, bucket) + elapsed)
    ledger.hold(run.gpus * elapsed)
    pods = seen.gpus
    if pods is not None:
        if run.gpus == 0 and pods.gpus > 0 and pods.bound_at is not None:
            ledger.hold(pods.gpus * _seconds(now, max(pods.bound_at.replace(microsecond=0), since)))
        run.gpus = pods.gpus
    run.updated_at = rfc3339(now)


def _close(ledger: _Ledger, status: GRPORunStatus, now: datetime) -> None:
    current = ledger.open
    if current is not None:
        current.ended, current.end_phase, current.end_reason = rfc3339(now), status.phase, status.reason
        ledger.closed.append(current)


def _pod_grace(ledger: _Ledger, seen: Seen) -> None:
    """The open attempt's grace: its pods' own, as observed (the plan's figure may be lowered by the operator's
    limit when the pods are rendered, and a later plan holds the ended attempt's step times)."""
    current, pods = ledger.open, seen.gpus
    if current is not None and pods is not None and pods.grace_seconds is not None:
        current.grace_seconds = pods.grace_seconds


def _open(ledger: _Ledger, status: GRPORunStatus, now: datetime) -> None:
    """A new attempt (a submission, or a job the status had not seen) takes the GPU time held since the last."""
    number = status.attempt or 0
    if number <= (ledger.run.attempts[-1].attempt if ledger.run.attempts else 0):
        return
    _close(ledger, status, now)
    fresh = AttemptAccount(
        attempt=number,
        submission_id=status.job_submission_id,
        started=rfc3339(now),
        gpu_seconds=ledger.run.unattributed_gpu_seconds,
    )
    ledger.run.unattributed_gpu_seconds = 0
    ledger.run.attempts = [*ledger.run.attempts, fresh][-MAX_ATTEMPTS:]


def _rollouts(seen: Seen, submission_id: str | None) -> tuple[int, ...]:
    """The rollout ids this reconcile observed of the job `submission_id`: its scrape, or its ended job's summary."""
    job = seen.job
    if job is None or job.submission_id != submission_id:
        return ()
    if job.state is JobState.RUNNING and seen.metrics is not None and seen.metrics.rollout is not None:
        return (seen.metrics.rollout,)
    summary = seen.summary if not job.state.active else None
    if summary is None:
        return ()
    return tuple(r for r in (summary.first_rollout, summary.last_rollout) if r is not None)


def _progress(ledger: _Ledger, seen: Seen, now: datetime) -> None:
    current = ledger.open
    if current is None:
        return
    current.gpus = max(current.gpus, ledger.run.gpus)
    rollouts = _rollouts(seen, current.submission_id)
    if not rollouts:
        return
    if current.first_rollout_time is None:
        current.first_rollout_time = rfc3339(now)
        current.gpu_seconds_to_first_rollout = current.gpu_seconds
        current.time_to_first_rollout_seconds = _seconds(now, parse_rfc3339(current.started) or now)
    current.first_rollout = min(rollouts) if current.first_rollout is None else min(current.first_rollout, *rollouts)
    _rollout_time(current, max(rollouts), now)
    current.last_rollout = max(rollouts) if current.last_rollout is None else max(current.last_rollout, *rollouts)


def _rollout_time(attempt: AttemptAccount, rollout: int, now: datetime) -> None:
    """A sample of the seconds per rollout when the rollout advanced since the last one observed."""
    if attempt.last_rollout is None:
        attempt.last_rollout_time = rfc3339(now)
        return
    if rollout <= attempt.last_rollout:
        return
    since = parse_rfc3339(attempt.last_rollout_time)
    if since is not None:
        per_rollout = math.ceil(_seconds(now, since) / (rollout - attempt.last_rollout))
        attempt.rollout_seconds = [*attempt.rollout_seconds, per_rollout][-MAX_ROLLOUT_SAMPLES:]
    attempt.last_rollout_time = rfc3339(now)


def _lost_rollouts(ledger: _Ledger) -> list[Event]:
    """Each attempt's lost rollouts; an event when a later attempt first tells the loss."""
    events = []
    attempts = ledger.run.attempts
    for attempt, after in zip(attempts, [*attempts[1:], None], strict=False):
        first, last = attempt.first_rollout, attempt.last_rollout
        attempt.rollouts_completed = 0 if first is None or last is None else last - first + 1
        if attempt.end_phase is Phase.FAILED:
            attempt.rollouts_lost = attempt.rollouts_completed
        elif after is not None and after.first_rollout is not None:
            was = attempt.rollouts_lost
            attempt.rollouts_lost = 0 if last is None else max(0, last - (after.first_rollout - 1))
            if was is None and attempt not in ledger.closed:
                events.append(
                    Event(
                        "Normal",
                        Reason.ROLLOUTS_LOST,
                        f"attempt {attempt.attempt} lost {attempt.rollouts_lost} rollout(s): attempt {after.attempt} "
                        f"resumed at rollout {after.first_rollout}, after the checkpoint it loaded",
                    )
                )
    return events


def _stops(ledger: _Ledger, seen: Seen, now: datetime, seen_before: int | None) -> None:
    """A worker pod of the open attempt stopped while it ran (a drain's eviction, a preemption by the scheduler, a
    delete): why and when, the rollout observed before it (`seen_before`: what this reconcile scraped may have come
    after), and, once no stopped pod holds GPUs any more, the time its preStop save and exit took (measured after
    the attempt ended too: the failure a stop causes can be seen before the pod is gone)."""
    last, pods = (ledger.run.attempts[-1] if ledger.run.attempts else None), seen.gpus
    if last is None or pods is None:
        return
    started = parse_rfc3339(last.started)
    if last.ended is None and last.stopped_by is None and pods.stopped_by is not None:
        at = min(now, (pods.stopped_at or now).replace(microsecond=0))
        if started is not None and at < started:
            return  # a pod of the attempt before, still going
        last.stopped_by, last.stopped_at = pods.stopped_by, rfc3339(at)
        if last.stop_rollout is None:
            last.stop_rollout = seen_before
    since = parse_rfc3339(last.stopped_at)
    if since is not None and pods.stopped_by is None and last.pods_gone_seconds is None:
        last.pods_gone_seconds = _seconds(now, since)


def _pods_gone(ledger: _Ledger, now: datetime) -> None:
    """The time from the last attempt's end to its worker pods' GPUs released (their preStop hooks' wait)."""
    last = ledger.run.attempts[-1] if ledger.run.attempts else None
    ended = parse_rfc3339(last.ended) if last is not None else None
    if last is None or ended is None or last.pods_gone_seconds is not None or ledger.run.gpus:
        return
    last.pods_gone_seconds = _seconds(now, ended)


def _asked(attempt: AttemptAccount) -> int | None:
    """The rollout an attempt's save must reach: the last observed before it was asked to stop, else its last."""
    return attempt.stop_rollout if attempt.stop_rollout is not None else attempt.last_rollout


def _suspend_asked(ledger: _Ledger, status: GRPORunStatus, seen_before: int | None) -> None:
    """A suspend that asks miles for a checkpoint: the rollout observed before it asked."""
    current = ledger.open
    if current is not None and status.suspend_requested_time is not None and current.stop_rollout is None:
        current.stop_rollout = seen_before


def _resumed(ledger: _Ledger, seen: Seen) -> None:
    """The checkpoint the open attempt resumed from, as its launcher's GRPO_RESUME line said (read once)."""
    current, resume, job = ledger.open, seen.resume, seen.job
    if current is None or resume is None or job is None or job.submission_id != current.submission_id:
        return
    if current.resumed_from is None:
        current.resumed_from = -1 if resume.iteration is None else resume.iteration
        current.resumed_data_state = resume.data_state


def _saves(ledger: _Ledger) -> list[Event]:
    """A suspended or preempted attempt, or one whose worker pod was stopped, saved when the next one resumed (its
    launcher's GRPO_RESUME line, never a scrape, which can come late) from a checkpoint at or after the last rollout
    observed before it was asked to stop (else its last); an event when a later attempt first tells it."""
    events = []
    attempts = ledger.run.attempts
    for attempt, after in itertools.pairwise(attempts):
        asked, resumed = _asked(attempt), after.resumed_from
        stopped = attempt.end_phase is Phase.SUSPENDED or attempt.stopped_by is not None
        if not stopped or attempt.save is not None or asked is None or resumed is None:
            continue
        # miles trains on after the save it was asked for (train.py:120-126) until its pod goes: the rollouts it
        # finishes meanwhile are lost (rolloutsLost), the save is still the one asked for.
        attempt.save = AttemptSave(
            outcome=SaveOutcome.SAVED if resumed >= asked else SaveOutcome.NOT_SAVED,
            rollout=resumed,
            seconds=attempt.pods_gone_seconds,
            grace_seconds=attempt.grace_seconds,
            data_state=after.resumed_data_state if resumed >= 0 else None,
        )
        if attempt not in ledger.closed:
            events.append(_save_event(attempt, attempt.save, after))
    return events


# What stopped a worker pod (attempts[].stoppedBy), as the save event says it.
STOPPED_BY: dict[str, str] = {
    StopReason.EVICTION: "eviction",
    StopReason.PREEMPTION: "preemption by the scheduler",
    StopReason.TAINT: "a NoExecute taint",
    StopReason.KUBELET: "termination by the kubelet",
    StopReason.POD_GC: "garbage collection",
    StopReason.DELETED: "deletion",
}


def _save_event(attempt: AttemptAccount, save: AttemptSave, after: AttemptAccount) -> Event:
    if attempt.end_phase is not Phase.SUSPENDED and attempt.stopped_by is not None:
        why = STOPPED_BY.get(attempt.stopped_by, attempt.stopped_by)
    elif attempt.end_reason == Reason.PREEMPTED:
        why = "preemption"
    elif attempt.end_reason in KUEUE_EVICTIONS:
        why = f"Kueue's eviction ({attempt.end_reason})"
    else:
        why = "suspending"
    took = "" if save.seconds is None else f" in {save.seconds} s"
    if save.outcome is SaveOutcome.SAVED:
        lacking = (
            "" if save.data_state is not False else " (without its rollout data state: prompts restart at sample 0)"
        )
        return Event(
            "Normal",
            Reason.SAVED_BEFORE_STOP,
            f"attempt {attempt.attempt} saved rollout {save.rollout}{took} before {why}: attempt {after.attempt} "
            f"resumed at rollout {save.rollout + 1}{lacking}",
        )
    gone = "" if save.seconds is None else f"its pods went after {save.seconds} s"
    grace = "" if save.grace_seconds is None else f"grace {save.grace_seconds} s"
    detail = ", ".join(x for x in (gone, grace) if x)
    # Told when the next attempt's launcher names its checkpoint, which can come before its first rollout (and so
    # before rolloutsLost is known): the rollouts after that checkpoint are the ones redone.
    last = attempt.last_rollout
    lost = 0 if last is None else max(0, last - save.rollout)
    return Event(  # Normal, as the other accounting notes: the reconciler posts those under their own reason
        "Normal",
        Reason.NOT_SAVED_BEFORE_STOP,
        f"attempt {attempt.attempt} made no checkpoint after rollout {_asked(attempt)} before {why}"
        + (f" ({detail})" if detail else "")
        + f": attempt {after.attempt} resumed from rollout {save.rollout + 1}, {lost} rollout(s) lost",
    )


def _split(attempt: AttemptAccount) -> tuple[int, int]:
    """(lost, productive) GPU-seconds of an attempt. Productive: its GPU time after its first rollout, less its
    lost rollouts' share; lost: that share, plus a resume's time to first rollout, or all of a Failed attempt's."""
    held = attempt.gpu_seconds
    if attempt.end_phase is Phase.FAILED:
        return held, 0
    warmup = held if attempt.gpu_seconds_to_first_rollout is None else attempt.gpu_seconds_to_first_rollout
    rollout_time = held - warmup
    lost, completed = attempt.rollouts_lost or 0, attempt.rollouts_completed
    # A resume can redo rollouts that went by before the attempt's first scrape: more than were observed.
    share = round(rollout_time * min(lost, completed) / completed) if completed else 0
    return share + (warmup if attempt.attempt > 1 else 0), rollout_time - share


def _totals(run: RunAccounting, created: datetime | None, price: float | None) -> None:
    lost_total = productive_total = 0
    for attempt in run.attempts:
        lost, productive = _split(attempt)
        attempt.gpu_hours, attempt.lost_gpu_hours = _hours(attempt.gpu_seconds), _hours(lost)
        lost_total, productive_total = lost_total + lost, productive_total + productive
    lost_total += run.teardown_gpu_seconds  # held after the run ended: no rollout came of it
    run.gpu_hours, run.lost_gpu_hours = _hours(run.gpu_seconds), _hours(lost_total)
    run.goodput = round(productive_total / run.gpu_seconds, 4) if run.gpu_seconds else None
    run.cost_usd = round(run.gpu_hours * price, 2) if price is not None else None
    run.lost_cost_usd = round(run.lost_gpu_hours * price, 2) if price is not None else None
    first = next((a.first_rollout_time for a in run.attempts if a.first_rollout_time is not None), None)
    seen = parse_rfc3339(first)
    if seen is not None and created is not None:
        run.time_to_first_rollout_seconds = _seconds(seen, created.replace(microsecond=0))


def _ended(attempt: AttemptAccount) -> Event:
    lost = (
        "not known until the next attempt's first rollout" if attempt.rollouts_lost is None else attempt.rollouts_lost
    )
    return Event(
        "Normal",
        Reason.ATTEMPT_ENDED,
        f"attempt {attempt.attempt} ended ({attempt.end_phase}/{attempt.end_reason}): {attempt.gpu_hours:g} "
        f"GPU-hours on {attempt.gpus} GPUs, {attempt.rollouts_completed} rollout(s), lost rollouts: {lost}, "
        f"lost GPU-hours: {attempt.lost_gpu_hours:g}",
    )


def _pricing(intent: Intent | None) -> tuple[datetime | None, float | None]:
    """When the run was created and the operator's price per GPU-hour; neither without an intent (no plan)."""
    return (intent.created, intent.gpu_hour_price_usd) if intent is not None else (None, None)


def _unchanged(prev: GRPORunStatus | None, seen: Seen, status: GRPORunStatus, now: datetime) -> bool:
    """Nothing but time moved since the last update, and not much of it."""
    old = prev.accounting if prev is not None else None
    if prev is None or old is None or (seen.gpus is not None and seen.gpus.gpus != old.gpus):
        return False
    since = parse_rfc3339(old.updated_at) or now
    same = status.model_copy(update={"accounting": None}) == prev.model_copy(update={"accounting": None})
    return same and _seconds(now, since) < REFRESH_SECONDS


def _teardown(
    prev: GRPORunStatus, seen: Seen, status: GRPORunStatus, now: datetime, intent: Intent | None
) -> RunAccounting | None:
    """An ended run's ledger stays as it ended but for the GPUs its pods still hold: their preStop hooks run after
    the end (a save that cannot come, a stale marker, the kubelet's teardown), so that time is counted, as
    `teardownGpuSeconds` (in gpuSeconds, and lost), until the pods are gone."""
    old = prev.accounting
    if (
        old is None
        or seen.gpus is None
        or (old.gpus == 0 and seen.gpus.gpus == 0)
        or _unchanged(prev, seen, status, now)
    ):
        return old
    ledger = _Ledger(old.model_copy(deep=True))
    run = ledger.run
    held = run.gpus * _seconds(now, parse_rfc3339(run.updated_at) or now)
    run.gpu_seconds += held
    run.teardown_gpu_seconds += held
    run.gpus, run.updated_at = seen.gpus.gpus, rfc3339(now)
    _pods_gone(ledger, now)
    _totals(run, *_pricing(intent))
    return RunAccounting.model_validate(run.model_dump())


def account(
    prev: GRPORunStatus | None, seen: Seen, intent: Intent | None, status: GRPORunStatus, now: datetime
) -> tuple[RunAccounting | None, tuple[Event, ...]]:
    """The accounting of `status`, the status this reconcile decided, and its events. A terminal run's stays as
    it was when it ended, but for the GPU time its pods hold until they are gone (`_teardown`)."""
    now = now.replace(microsecond=0)
    if prev is not None and prev.phase in TERMINAL_PHASES:
        return _teardown(prev, seen, status, now, intent), ()
    if _unchanged(prev, seen, status, now):
        return prev.accounting if prev is not None else None, ()
    ledger = _start(prev, _pricing(intent)[0], now)
    _accrue(ledger, prev, seen, now)
    _open(ledger, status, now)
    _pod_grace(ledger, seen)
    seen_before = ledger.open.last_rollout if ledger.open is not None else None
    _suspend_asked(ledger, status, seen_before)
    _progress(ledger, seen, now)
    _resumed(ledger, seen)
    if status.phase is Phase.SUSPENDED or status.phase in TERMINAL_PHASES:
        _close(ledger, status, now)
    _stops(ledger, seen, now, seen_before)  # after the close: a suspended or ended attempt's pods go on purpose
    current = ledger.open
    if current is not None and status.job_submission_id != current.submission_id:
        _close(ledger, status, now)  # a restart forgot its job; after its stops, since one may be why it failed
    _pods_gone(ledger, now)
    events = _lost_rollouts(ledger)
    events += _saves(ledger)
    _totals(ledger.run, *_pricing(intent))
    run = RunAccounting.model_validate(ledger.run.model_dump())
    return run, (*events, *(_ended(a) for a in ledger.closed))
