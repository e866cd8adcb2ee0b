"""`status.accounting` at its edges: the first reconcile of a run created earlier, a one-GPU pod, the minute
after which an idle reconcile writes, a job that ran and ended between two reconciles, attempts with no rollout,
a restart's attempt closed by the next one, a first attempt that fails, prices in cents, and the lists the CRD
bounds. Every expected number is worked out by hand from the observation times, as in `test_accounting`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from grpo_operator.api.status import Phase, Reason
from grpo_operator.status.decision import Decision
from grpo_operator.status.observation import GpuObservation, JobState, RunSummary

from tests.support.accounting import (
    GPUS,
    NONE,
    NOT_READY,
    QUEUED,
    UNTIL_150,
    admitted_and_run,
    at,
    held,
    running,
    sid,
    through,
)
from tests.support.status import FAILED_WITH, PREEMPTED_BY_KUEUE, READY, T0, WATCHDOG, Moment, healthy, job, spec


def test_the_first_reconcile_counts_the_time_since_the_run_was_created() -> None:
    [first] = through([Moment(now=T0 + timedelta(seconds=30), created=T0, cluster=QUEUED, gpus=NONE)])
    acc = first.status.accounting
    assert acc is not None and acc.queued_seconds == 30 and acc.updated_at == "2026-11-30T12:00:30Z"


def test_an_idle_reconcile_exactly_a_minute_later_writes_the_accounting() -> None:
    _, later = through(
        [
            at(0, cluster=QUEUED, gpus=NONE),
            Moment(now=T0 + timedelta(seconds=60), created=T0, cluster=QUEUED, gpus=NONE),
        ]
    )
    assert later.status.accounting is not None and later.status.accounting.queued_seconds == 60


def test_a_one_gpu_pod_bound_since_the_last_update_counts_from_its_binding() -> None:
    one = GpuObservation(1, T0 + timedelta(seconds=40))
    _, bound = through([at(0, cluster=NOT_READY, gpus=NONE), at(1, cluster=NOT_READY, gpus=one)])
    acc = bound.status.accounting
    assert acc is not None and acc.gpu_seconds == 20 and acc.gpus == 1


def _succeeded_through_rollout_19_at_minute_30() -> Moment:
    return at(
        30,
        submission_id=sid(1),
        cluster=READY,
        gpus=held(0),
        job=job(JobState.SUCCEEDED, submission_id=sid(1)),
        summary=RunSummary(exit_code=0, first_rollout=0, last_rollout=19, rollouts=(healthy(19),)),
    )


def test_a_job_that_ran_and_succeeded_between_two_reconciles_counts_every_rollout_of_its_summary() -> None:
    ended = _succeeded_through_rollout_19_at_minute_30()
    last = through([at(0, submission_id=sid(1), cluster=READY, gpus=held(0)), ended])[-1].status
    assert last.phase is Phase.SUCCEEDED and last.accounting is not None
    [attempt] = last.accounting.attempts
    assert (attempt.first_rollout, attempt.last_rollout, attempt.rollouts_completed) == (0, 19, 20)


def test_the_summarys_last_rollout_gives_a_rollout_time_sample_after_the_last_scrape() -> None:
    # rollout 10 scraped at minute 20; the summary read at 30 says the job went on to 19: 600 s over 9 rollouts.
    ended = _succeeded_through_rollout_19_at_minute_30()
    last = through([running(10, 1, 9), running(20, 1, 10), ended])[-1].status
    assert last.accounting is not None
    assert last.accounting.attempts[0].rollout_seconds == [600, 67]


def _no_rollout_then_resumed() -> list[Decision]:
    # attempt 1 runs from 20 without a rollout; Kueue preempts at 25; attempt 2 resumes at rollout 0 at 40.
    return through(
        [
            *admitted_and_run(1, 10, 9),
            at(20, submission_id=sid(1), cluster=READY, gpus=held(9), job=job(JobState.RUNNING, submission_id=sid(1))),
            at(25, submission_id=sid(2), cluster=PREEMPTED_BY_KUEUE, gpus=NONE),
            *admitted_and_run(2, 30, 29),
            running(40, 2, 0),
        ]
    )


def test_an_attempt_stopped_before_its_first_rollout_completed_none_and_lost_none() -> None:
    decisions = _no_rollout_then_resumed()
    acc = decisions[-1].status.accounting
    assert acc is not None
    a1 = acc.attempts[0]
    assert (a1.rollouts_completed, a1.rollouts_lost) == (0, 0)
    ended = [e.message for d in decisions for e in d.events if e.reason == Reason.ATTEMPT_ENDED]
    assert ended[0].startswith("attempt 1 ended (Suspended/Preempted):") and ", 0 rollout(s)," in ended[0]
    lost = [e.message for d in decisions for e in d.events if e.reason == Reason.ROLLOUTS_LOST]
    assert lost == ["attempt 1 lost 0 rollout(s): attempt 2 resumed at rollout 0, after the checkpoint it loaded"]


def test_a_suspended_attempts_pods_gone_time_stays_what_it_was_when_they_went() -> None:
    """Suspended at 60, its pods gone at 62: 120 s, not the half hour the run then stays suspended without GPUs."""
    decisions = through(UNTIL_150)
    acc = decisions[-1].status.accounting
    assert acc is not None and acc.attempts[0].pods_gone_seconds == 120
    notes = [e.message for d in decisions for e in d.events if e.reason == Reason.NOT_SAVED_BEFORE_STOP]
    assert notes[0].startswith(
        "attempt 1 made no checkpoint after rollout 11 before suspending (its pods went after 120 s"
    )


def _restarted(resumed_at: int) -> list[Decision]:
    """Attempt 1 scraped at rollout 3 at minute 20 fails with an NCCL timeout at 30 and restarts; attempt 2 is
    submitted at 35 and scraped at 40, resumed at `resumed_at`."""
    s = spec({"rollout": {"numRollout": 20}, "recovery": {"maxRestarts": 1}})
    fails = at(
        30,
        submission_id=sid(1),
        cluster=READY,
        gpus=held(0),
        job=job(JobState.FAILED, FAILED_WITH + WATCHDOG, submission_id=sid(1)),
    )
    submitted = at(35, submission_id=sid(2), cluster=READY, gpus=held(0))
    return through([running(20, 1, 3), fails, submitted, running(40, 2, resumed_at)], run_spec=s)


def test_a_restarted_attempt_ends_when_its_failure_is_seen_and_the_wait_for_the_next_belongs_to_the_next() -> None:
    decisions = _restarted(4)
    assert decisions[1].status.reason == Reason.RESTARTING
    acc = decisions[-1].status.accounting
    assert acc is not None
    a1, a2 = acc.attempts
    assert (a1.ended, a1.end_phase, a1.end_reason) == ("2026-11-30T12:30:00Z", Phase.PROVISIONING, Reason.RESTARTING)
    assert (a2.started, a2.ended) == ("2026-11-30T12:35:00Z", None)
    # 8 GPUs from 0: attempt 1 holds them until its failure at 30, attempt 2 from then (its resubmission at 35)
    assert (a1.gpu_seconds, a2.gpu_seconds) == (GPUS * 30 * 60, GPUS * 10 * 60)
    ended = [(i, e.message) for i, d in enumerate(decisions) for e in d.events if e.reason == Reason.ATTEMPT_ENDED]
    assert len(ended) == 1 and ended[0][0] == 1, ended
    assert ended[0][1].startswith("attempt 1 ended (Provisioning/Restarting): 4 GPU-hours on 8 GPUs"), ended


def test_a_job_the_status_had_not_seen_ends_the_attempt_it_tracked_when_it_is_first_seen() -> None:
    # attempt 1's job (rollout 2 at 20) gives way to a job the status never recorded (a lost status write): at 30
    decisions = through([running(10, 1, 0), running(20, 1, 2), running(30, 2, 3)])
    acc = decisions[-1].status.accounting
    assert acc is not None
    a1, a2 = acc.attempts
    assert (a1.ended, a2.started, a2.ended) == ("2026-11-30T12:30:00Z", "2026-11-30T12:30:00Z", None)
    ended = [e.message for e in decisions[-1].events if e.reason == Reason.ATTEMPT_ENDED]
    assert len(ended) == 1 and ended[0].startswith("attempt 1 ended"), ended


def test_a_first_attempt_that_fails_loses_all_its_gpu_time_and_its_cost_is_in_cents() -> None:
    # 8 GPUs bound at 0, the job running at 5 (rollout 0) and 10 (rollout 1), failed at 15: 8 x 900 s = 2 GPU-hours.
    fails = at(
        15,
        submission_id=sid(1),
        cluster=READY,
        gpus=held(0),
        job=job(JobState.FAILED, "exit code 1", submission_id=sid(1)),
    )
    observations = [
        at(0, submission_id=sid(1), cluster=READY, gpus=held(0)),
        running(5, 1, 0),
        running(10, 1, 1),
        fails,
    ]
    last = through([replace(o, gpu_hour_price_usd=4.333) for o in observations])[-1].status
    assert (last.phase, last.reason) == (Phase.FAILED, Reason.JOB_FAILED)
    acc = last.accounting
    assert acc is not None and acc.gpu_seconds == GPUS * 900
    assert acc.gpu_hours == acc.lost_gpu_hours == 2.0 and acc.goodput == 0.0
    assert acc.cost_usd == acc.lost_cost_usd == 8.67  # 2 x 4.333 = 8.666 USD


def test_a_run_on_its_65th_attempt_keeps_the_last_64_as_the_crd_allows() -> None:
    # Each minute a job the status has not seen (a lost status write, or a resume) opens the next attempt.
    last = through([running(minute, n, 0) for n, minute in enumerate(range(10, 75), start=1)])[-1].status
    assert last.accounting is not None
    assert [a.attempt for a in last.accounting.attempts] == list(range(2, 66))


def test_an_attempt_keeps_its_last_20_rollout_time_samples_as_the_crd_allows() -> None:
    last = through([running(minute, 1, minute - 10) for minute in range(10, 36)])[-1].status
    assert last.accounting is not None
    assert last.accounting.attempts[0].rollout_seconds == [60] * 20


def test_a_resume_that_redoes_more_rollouts_than_were_seen_loses_at_most_the_attempts_rollout_time() -> None:
    """Attempt 1's first scrape caught rollout 3 (the rollouts before went by between two scrapes); attempt 2
    resumed at 2, so 2 rollouts were lost of the 1 observed. The accounting (and so the reconcile) still holds:
    attempt 1 loses its 10 minutes of rollouts (8 x 600 s, 20 to its failure at 30), never more, and the run's
    goodput is 0, not negative."""
    decisions = _restarted(2)
    acc = decisions[-1].status.accounting
    assert acc is not None
    a1 = acc.attempts[0]
    assert (a1.rollouts_completed, a1.rollouts_lost, a1.lost_gpu_hours) == (1, 2, round(8 * 600 / 3600, 4))
    assert acc.goodput == 0.0
