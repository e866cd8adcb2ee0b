"""Whether a preempted or suspended attempt saved before its worker pods went, as the operator can observe it: the
next attempt's first rollout is the checkpoint it loaded + 1, so it saved when that checkpoint is at or after the
last rollout seen of the attempt before it was asked to stop; the time is from the attempt's end to its pods' GPUs released (the preStop
hooks' wait). Decided observation by observation through `lifecycle.decide`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from grpo_operator.api.status import AttemptAccount, Phase, Reason, RunPlan, SaveOutcome
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.status.decision import Decision, Event
from grpo_operator.status.observation import (
    ClusterObservation,
    GpuObservation,
    JobObservation,
    JobState,
    Resume,
)

from tests.support.builders import base, merge
from tests.support.status import PREEMPTED_BY_KUEUE, READY, T0, Moment, healthy, job, live, spec

SPEC = spec({"rollout": {"numRollout": 40}, "storage": {"checkpointOnSuspend": False}})
QUEUED = ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a")
NOT_READY = ClusterObservation(ready=False, message="waiting for KubeRay: 0/1 workers ready")
RUN, _ = parse_run(merge(base(), {"spec": {"rollout": {"numRollout": 40}}}))
assert RUN is not None
PLAN = make_plan(RUN)
# The pods' own grace: below the plan's, as when the operator's limit (GRPO_MAX_GRACE_SECONDS) lowered it.
GRACE = PLAN.preemption_grace.seconds - 100
HELD, NONE = GpuObservation(8, T0, GRACE), GpuObservation(0, None)


def at(minute: float, n: int, **kw: object) -> Moment:
    return Moment(now=T0 + timedelta(minutes=minute), created=T0, submission_id=f"grpo-x-{n}", plan=PLAN, **kw)  # type: ignore[arg-type]


def running(minute: float, n: int, rollout: int, resumed: int | None = None) -> Moment:
    """Attempt `n` running at `rollout`; `resumed`: its launcher's GRPO_RESUME line read now (-1: from nothing)."""
    state = job(JobState.RUNNING, submission_id=f"grpo-x-{n}")
    line = None if resumed is None else Resume(None if resumed < 0 else resumed, True)
    return at(minute, n, cluster=READY, gpus=HELD, job=state, metrics=healthy(rollout), resume=line)


def life(
    last: int,
    first: int,
    gone_minutes: float,
    *,
    suspend: bool = False,
    plan_after: RunPlan = PLAN,
    deleting: str | None = None,
    resumed: int | None = None,
) -> list[Decision]:
    """Attempt 1 runs to rollout `last`, is preempted (or suspended) at 25, its pods go `gone_minutes` later;
    attempt 2 starts at 45 and its first rollout seen is `first`. From the pods' going on, the reconciles plan
    with `plan_after` (as the operator does once attempt 1's step times are in). `deleting`: the worker pod is
    seen terminating (KubeRay deletes it) by the stop's own reconcile ("with") or by one before it ("before",
    the pod's update reaching the operator before the RayCluster's)."""
    stop = replace(running(25, 1, last), suspend=True) if suspend else at(25, 2, cluster=PREEMPTED_BY_KUEUE, gpus=HELD)
    terminating = replace(HELD, stopped_by="Deleted", stopped_at=T0 + timedelta(minutes=24, seconds=50))
    observations = [
        at(0, 1, cluster=NOT_READY, gpus=HELD),
        at(5, 1, cluster=READY, gpus=HELD),
        running(10, 1, 0),
        running(20, 1, last),
        *([replace(running(24.9, 1, last), gpus=terminating)] if deleting == "before" else []),
        replace(stop, gpus=terminating) if deleting else stop,
        at(25 + gone_minutes, 2, cluster=PREEMPTED_BY_KUEUE, gpus=NONE, suspend=suspend),
        at(40, 2, cluster=NOT_READY, gpus=HELD),
        at(45, 2, cluster=READY, gpus=HELD),
        running(50, 2, first, resumed=first - 1 if resumed is None else resumed),
    ]
    start = 6 if deleting == "before" else 5
    observations[start:] = [replace(obs, plan=plan_after) for obs in observations[start:]]
    return live(observations, run_spec=SPEC)


def first_attempt(decisions: list[Decision]) -> AttemptAccount:
    accounting = decisions[-1].status.accounting
    assert accounting is not None
    return accounting.attempts[0]


def save_events(decisions: list[Decision]) -> list[Event]:
    reasons = (Reason.SAVED_BEFORE_STOP, Reason.NOT_SAVED_BEFORE_STOP)
    return [e for d in decisions for e in d.events if e.reason in reasons]


@pytest.mark.parametrize(
    ("last", "first", "gone", "suspend", "outcome", "rollout", "seconds", "message"),
    [
        # the hook's save after rollout 7 reached the tracker before the pods went: resumed at 8, nothing lost
        pytest.param(
            7,
            8,
            0.7,
            False,
            SaveOutcome.SAVED,
            7,
            42,
            "attempt 1 saved rollout 7 in 42 s before preemption: attempt 2 resumed at rollout 8",
            id="the hook's save reached the tracker before the pods went",
        ),
        # the job ran on past the last rollout the operator saw, and saved there
        pytest.param(
            7,
            10,
            2,
            False,
            SaveOutcome.SAVED,
            9,
            120,
            "attempt 1 saved rollout 9 in 120 s before preemption: attempt 2 resumed at rollout 10",
            id="the job ran on past the last rollout seen and saved there",
        ),
        # no save: the next attempt loads the periodic checkpoint 5, rollouts 6 and 7 are redone
        pytest.param(
            7,
            6,
            10,
            False,
            SaveOutcome.NOT_SAVED,
            5,
            600,
            f"attempt 1 made no checkpoint after rollout 7 before "
            f"preemption (its pods went after 600 s, grace {GRACE} s): attempt 2 resumed from rollout 6, 2 rollout(s) "
            "lost",
            id="no save: the periodic checkpoint is loaded and rollouts redone",
        ),
        # no checkpoint at all: resumed from the start
        pytest.param(
            3,
            0,
            0,
            False,
            SaveOutcome.NOT_SAVED,
            -1,
            0,
            f"attempt 1 made no checkpoint after rollout 3 before "
            f"preemption (its pods went after 0 s, grace {GRACE} s): attempt 2 resumed from rollout 0, 4 rollout(s) "
            "lost",
            id="no checkpoint at all: resumed from the start",
        ),
        # spec.suspend shares the path
        pytest.param(
            7,
            8,
            1,
            True,
            SaveOutcome.SAVED,
            7,
            60,
            "attempt 1 saved rollout 7 in 60 s before suspending: attempt 2 resumed at rollout 8",
            id="a suspend shares the path",
        ),
    ],
)
def test_the_ended_attempt_records_its_save_before_its_pods_went_and_an_event_says_so(  # noqa: PLR0917
    last: int,
    first: int,
    gone: float,
    suspend: bool,
    outcome: SaveOutcome,
    rollout: int,
    seconds: int,
    message: str,
) -> None:
    decisions = life(last, first, gone, suspend=suspend)
    a1 = first_attempt(decisions)
    assert (a1.end_phase, a1.end_reason) == (Phase.SUSPENDED, Reason.SUSPENDED if suspend else Reason.PREEMPTED)
    assert a1.save is not None
    assert (a1.save.outcome, a1.save.rollout, a1.save.seconds, a1.save.grace_seconds) == (
        outcome,
        rollout,
        seconds,
        GRACE,
    )
    assert a1.rollouts_lost == max(0, last - rollout)
    [event] = save_events(decisions)
    assert event.message == message
    assert event.type == "Normal"  # posted under its own reason


def test_nothing_is_said_about_the_save_until_the_next_attempt_shows_which_checkpoint_it_loaded() -> None:
    decisions = life(7, 8, 1)[:-1]  # attempt 2 submitted, no rollout seen yet
    a1 = first_attempt(decisions)
    assert a1.pods_gone_seconds == 60 and a1.save is None
    assert save_events(decisions) == []


def test_a_later_reconcile_does_not_repeat_the_event_or_change_the_record() -> None:
    decisions = life(7, 6, 10)
    prev = decisions[-1].status
    again = live([running(55, 2, 7, resumed=6)], prev, SPEC)[-1]
    assert save_events([again]) == []
    assert again.status.accounting is not None and prev.accounting is not None
    assert again.status.accounting.attempts[0].save == prev.accounting.attempts[0].save


def test_rollout_times_are_sampled_from_the_advances_observed_per_attempt() -> None:
    # attempt 1: rollout 0 at 10, 7 at 20 -> 600 s / 7 rollouts = 86 s (rounded up)
    decisions = life(7, 8, 1)
    decisions.append(
        live([running(54, 2, 10, resumed=9)], decisions[-1].status, SPEC)[-1]
    )  # 8 at 50 -> 10 at 54: 120 s each
    accounting = decisions[-1].status.accounting
    assert accounting is not None
    assert [a.rollout_seconds for a in accounting.attempts] == [[86], [120]]


def test_the_save_names_the_grace_its_pods_had_not_the_one_planned() -> None:
    """The plan's grace before the attempt, the next plan's after it: neither is the pods' (GRACE, observed)."""
    later = PLAN.model_copy(
        update={"preemption_grace": PLAN.preemption_grace.model_copy(update={"seconds": GRACE + 200})}
    )
    a1 = first_attempt(life(8, 6, 10, plan_after=later))
    assert a1.grace_seconds == GRACE
    assert a1.save is not None and a1.save.grace_seconds == GRACE


RECOVERING = spec({"rollout": {"numRollout": 40}, "recovery": {"maxRestarts": 1}})
# What Ray says once the worker's preStop hook stopped its Ray (presave --stop-ray): a retryable NodeLost.
NODE_DIED = "The actor died because its node has died. Node Id: 5e1f"


def stopped_life(
    last: int, first: int, gone_seconds: int, stopped_by: str | None, *, lingering: bool = False
) -> list[Decision]:
    """Attempt 1 runs to rollout `last`; at 20:30 its worker pod is seen stopping (`stopped_by`, since 20:25; None:
    it is not, the node just died), its job still running; `gone_seconds` after 20:25 the pod is gone and Ray says
    the node died; the run restarts, attempt 2 is submitted at 40 and first shows rollout `first` at 45.
    `lingering`: the stopped pod is still terminating through attempt 2's start (its replacement on another node)."""
    since = T0 + timedelta(minutes=20, seconds=25)
    stopping = GpuObservation(8, T0, GRACE, stopped_by, since if stopped_by else None)
    gone = T0 + timedelta(minutes=20, seconds=25 + gone_seconds)
    died = job(JobState.FAILED, NODE_DIED, submission_id="grpo-x-1")
    later = replace(stopping, gpus=16) if lingering else HELD
    observations = [
        at(0, 1, cluster=NOT_READY, gpus=HELD),
        at(5, 1, cluster=READY, gpus=HELD),
        running(10, 1, 0),
        running(20, 1, last),
        replace(running(20.5, 1, last), gpus=stopping),
        replace(at(0, 2, cluster=NOT_READY, gpus=stopping if lingering else NONE, job=died), now=gone),
        at(40, 2, cluster=READY, gpus=later),
        running(45, 2, first, resumed=first - 1),
    ]
    observations[-1] = replace(observations[-1], gpus=later)
    decisions = live(observations, run_spec=RECOVERING)
    assert decisions[-1].status.attempt == 2, decisions[-1].status
    return decisions


@pytest.mark.parametrize(
    ("stopped_by", "last", "first", "gone", "outcome", "message"),
    [
        # a drain: the hook's save after rollout 7 reached the tracker before the pod went, 38 s after the eviction
        pytest.param(
            "EvictionByEvictionAPI",
            7,
            8,
            38,
            SaveOutcome.SAVED,
            "attempt 1 saved rollout 7 in 38 s before eviction: attempt 2 resumed at rollout 8",
            id="a drain's eviction saved before the pod went",
        ),
        pytest.param(
            "PreemptionByScheduler",
            7,
            9,
            50,
            SaveOutcome.SAVED,
            "attempt 1 saved rollout 8 in 50 s before preemption by the scheduler: attempt 2 resumed at rollout 9",
            id="a scheduler's preemption saved before the pod went",
        ),
        # `kubectl delete pod`, and the hook's wait ran out: resumed from the start
        pytest.param(
            "Deleted",
            7,
            0,
            GRACE,
            SaveOutcome.NOT_SAVED,
            f"attempt 1 made no checkpoint after rollout 7 before deletion (its pods went after {GRACE} s, grace "
            f"{GRACE} s): attempt 2 resumed from rollout 0, 8 rollout(s) lost",
            id="a kubectl delete whose hook ran out of time saved nothing",
        ),
    ],
)
def test_an_attempt_whose_worker_pod_was_stopped_records_its_save_and_an_event_says_why_it_stopped(  # noqa: PLR0917
    stopped_by: str, last: int, first: int, gone: int, outcome: SaveOutcome, message: str
) -> None:
    decisions = stopped_life(last, first, gone, stopped_by)
    a1 = first_attempt(decisions)
    assert (a1.stopped_by, a1.stopped_at, a1.pods_gone_seconds) == (stopped_by, "2026-11-30T12:20:25Z", gone)
    assert a1.save is not None
    assert (a1.save.outcome, a1.save.rollout, a1.save.seconds, a1.save.grace_seconds) == (
        outcome,
        first - 1,
        gone,
        GRACE,
    )
    [event] = save_events(decisions)
    assert event.message == message


def test_an_attempt_whose_node_died_under_it_records_no_save() -> None:
    """No pod was stopped (the node went away): nothing asked miles for a save, and no save is claimed."""
    a1 = first_attempt(stopped_life(7, 8, 30, None))
    assert a1.stopped_by is None and a1.save is None


@pytest.mark.parametrize("suspend", [False, True])
@pytest.mark.parametrize("deleting", ["with", "before"])
def test_the_pods_kuberay_deletes_for_a_preemption_or_a_suspend_keep_its_words(suspend: bool, deleting: str) -> None:
    """A suspended or preempted attempt's pods go because it stopped: the event names the preemption or the
    suspend, not the delete, even when the pod's termination reached the operator first."""
    decisions = life(7, 8, 1, suspend=suspend, deleting=deleting)
    a1 = first_attempt(decisions)
    assert a1.end_phase is Phase.SUSPENDED
    # Seen before the stop, the delete is the attempt's (its pod was deleted); seen with it, the attempt had ended.
    assert a1.stopped_by == ("Deleted" if deleting == "before" else None)
    [event] = save_events(decisions)
    why = "suspending" if suspend else "preemption"
    assert event.message.startswith("attempt 1 saved rollout 7 in ") and f"before {why}: " in event.message


def test_a_pod_of_the_attempt_before_still_stopping_is_not_the_next_attempts_stop() -> None:
    decisions = stopped_life(7, 8, 30, "EvictionByEvictionAPI", lingering=True)
    accounting = decisions[-1].status.accounting
    assert accounting is not None
    a1, a2 = accounting.attempts
    assert a1.stopped_by == "EvictionByEvictionAPI" and a2.stopped_by is None


def until_stopped(last: int, stopped_by: str) -> tuple[list[Moment], GpuObservation, JobObservation]:
    """Attempt 1 from its start to rollout `last` at 20; its worker pod as seen stopping (`stopped_by`, since
    20:25); its job as Ray says once that pod's Ray stopped."""
    stopping = GpuObservation(8, T0, GRACE, stopped_by, T0 + timedelta(minutes=20, seconds=25))
    before = [
        at(0, 1, cluster=NOT_READY, gpus=HELD),
        at(5, 1, cluster=READY, gpus=HELD),
        running(10, 1, 0),
        running(20, 1, last),
    ]
    return before, stopping, job(JobState.FAILED, NODE_DIED, submission_id="grpo-x-1")


def test_a_stopped_pod_still_going_when_its_failure_restarts_the_run_is_timed_until_it_is_gone() -> None:
    """The deleted worker's Ray stops and the job fails at 21:00 while the pod is still terminating (its preStop
    saved rollout 7); the run restarts and the pod is gone at 22:00, 95 s after its stop at 20:25: the attempt that
    ended at the failure still gets its pod's going and the save's time."""
    before, stopping, died = until_stopped(7, "Deleted")
    observations = [
        *before,
        replace(running(20.5, 1, 7), gpus=stopping),
        at(21, 2, cluster=READY, gpus=stopping, job=died),
        at(22, 2, cluster=NOT_READY, gpus=NONE),
        at(40, 2, cluster=READY, gpus=HELD),
        running(45, 2, 8, resumed=7),
    ]
    decisions = live(observations, run_spec=RECOVERING)
    assert decisions[5].status.reason == Reason.RESTARTING
    a1 = first_attempt(decisions)
    assert (a1.ended, a1.stopped_by, a1.pods_gone_seconds) == ("2026-11-30T12:21:00Z", "Deleted", 95)
    [event] = save_events(decisions)
    assert event.message == "attempt 1 saved rollout 7 in 95 s before deletion: attempt 2 resumed at rollout 8"


def test_rollouts_miles_finishes_after_the_save_it_was_asked_for_are_lost_and_the_save_is_still_saved() -> None:
    """miles trains on after the sentinel's save (train.py:120-126) until its pod goes: rollout 7 was first seen
    with the stop (so after it, maybe), the hook's save took rollout 7, and rollout 8 finished before Ray stopped.
    The save reached what was seen before the stop: Saved; rollout 8 is lost, and said so."""
    before, stopping, died = until_stopped(6, "EvictionByEvictionAPI")
    observations = [
        *before,
        replace(running(20.5, 1, 7), gpus=stopping),
        replace(running(20.7, 1, 8), gpus=stopping),
        at(21, 2, cluster=READY, gpus=NONE, job=died),
        at(40, 2, cluster=READY, gpus=HELD),
        running(45, 2, 8, resumed=7),
    ]
    decisions = live(observations, run_spec=RECOVERING)
    a1 = first_attempt(decisions)
    assert (a1.stop_rollout, a1.last_rollout, a1.rollouts_lost) == (6, 8, 1)
    assert a1.save is not None and (a1.save.outcome, a1.save.rollout) == (SaveOutcome.SAVED, 7)
    [event] = save_events(decisions)
    assert event.message == "attempt 1 saved rollout 7 in 35 s before eviction: attempt 2 resumed at rollout 8"
    lost = [e.message for d in decisions for e in d.events if e.reason == Reason.ROLLOUTS_LOST]
    assert lost == ["attempt 1 lost 1 rollout(s): attempt 2 resumed at rollout 8, after the checkpoint it loaded"]
    # A checkpoint from before what was seen at the stop is no save: the hook's wait ran out.
    observations[-1] = running(45, 2, 6, resumed=5)
    decisions = live(observations, run_spec=RECOVERING)
    a1 = first_attempt(decisions)
    assert a1.save is not None and (a1.save.outcome, a1.save.rollout) == (SaveOutcome.NOT_SAVED, 5)
    [event] = save_events(decisions)
    assert event.message.startswith("attempt 1 made no checkpoint after rollout 6 before eviction"), event.message
    assert event.message.endswith("attempt 2 resumed from rollout 6, 3 rollout(s) lost"), event.message
    # The launcher's line is read before attempt 2's first rollout (rolloutsLost not known yet): the event, told
    # once then, still counts the rollouts after the checkpoint it resumed from.
    observations[-1:] = [
        at(
            44, 2, cluster=READY, gpus=HELD, job=job(JobState.RUNNING, submission_id="grpo-x-2"), resume=Resume(5, True)
        ),
        running(45, 2, 6),
    ]
    [event] = save_events(live(observations, run_spec=RECOVERING))
    assert event.message.endswith("attempt 2 resumed from rollout 6, 3 rollout(s) lost"), event.message


def test_a_suspend_that_asked_for_a_checkpoint_is_saved_though_it_stopped_a_rollout_after_it() -> None:
    """checkpointOnSuspend: asked with rollout 5 seen, miles saves after rollout 6 and the job is stopped once
    rollout 7 reports (then the save is surely written); attempt 2 resumes at 7. The save asked for was made;
    rollout 7 is lost."""
    asking = spec({"rollout": {"numRollout": 40}, "storage": {"checkpointOnSuspend": True}})
    observations = [
        at(0, 1, cluster=NOT_READY, gpus=HELD),
        at(5, 1, cluster=READY, gpus=HELD),
        running(10, 1, 0),
        running(20, 1, 5),
        replace(running(21, 1, 5), suspend=True),
        replace(running(21.5, 1, 5), suspend=True, checkpoint_job=JobState.SUCCEEDED),
        replace(running(22, 1, 6), suspend=True),
        replace(running(23, 1, 7), suspend=True),
        at(24, 2, cluster=QUEUED, gpus=NONE, suspend=True),
        at(40, 2, cluster=NOT_READY, gpus=HELD),
        at(45, 2, cluster=READY, gpus=HELD),
        running(50, 2, 7, resumed=6),
    ]
    decisions = live(observations, run_spec=asking)
    assert decisions[7].status.phase is Phase.SUSPENDED, decisions[7].status
    a1 = first_attempt(decisions)
    assert (a1.stop_rollout, a1.last_rollout, a1.rollouts_lost) == (5, 7, 1)
    assert a1.save is not None and (a1.save.outcome, a1.save.rollout) == (SaveOutcome.SAVED, 6)
    [event] = save_events(decisions)
    assert event.message == "attempt 1 saved rollout 6 in 60 s before suspending: attempt 2 resumed at rollout 7"


def test_a_late_first_scrape_claims_no_save_the_launcher_said_was_not_there() -> None:
    """Attempt 2's launcher said miles resumes from checkpoint 5 (its GRPO_RESUME line); the first scrape came at
    rollout 9, after miles had already redone 6-8. The save is judged from the line: none after rollout 7."""
    save = life(7, 9, 10, resumed=5)[-1].status.accounting.attempts[0].save  # type: ignore[union-attr]
    assert save is not None and (save.outcome, save.rollout) == (SaveOutcome.NOT_SAVED, 5), save
