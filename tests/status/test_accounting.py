"""`status.accounting` over whole lives of a run, decided observation by observation through `lifecycle.decide`:
queue -> provision -> run -> suspend -> resume -> preempt -> resume -> succeed (and -> fail). Every expected
number is worked out by hand below from the observation times, the GPUs the bound pods hold and the rollouts
seen; none is read back from the code."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from grpo_operator.api.status import GRPORunStatus, Phase, Reason
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.validation import check
from grpo_operator.status.observation import (
    GpuObservation,
)

from tests.support.accounting import (
    A1,
    A1_GOOD,
    A1_LOST,
    A2,
    A2_GOOD,
    A2_LOST,
    FAILS,
    GPUS,
    NONE,
    NOT_READY,
    QUEUED,
    SUCCEEDS,
    UNTIL_150,
    at,
    sid,
    through,
)
from tests.support.builders import base, merge
from tests.support.status import T0


def test_a_run_queued_suspended_preempted_and_resumed_twice_that_succeeds_accounts_every_second_and_gpu() -> None:
    decisions = through([*UNTIL_150, SUCCEEDS])
    last = decisions[-1].status
    assert last.phase is Phase.SUCCEEDED
    acc = last.accounting
    assert acc is not None
    # phases: Pending 0-10 and 90-95; Provisioning 10-20, 95-105, 140-150; Running 20-60, 105-125, 150-170;
    # Suspended 60-90 and 125-140. 170 minutes in all.
    assert (acc.queued_seconds, acc.provisioning_seconds) == (15 * 60, 30 * 60)
    assert (acc.running_seconds, acc.suspended_seconds) == (80 * 60, 45 * 60)
    assert acc.time_to_first_rollout_seconds == 20 * 60  # created at 0, first rollout seen at 20
    a1, a2, a3 = acc.attempts
    assert [a.attempt for a in acc.attempts] == [1, 2, 3]
    assert [a.submission_id for a in acc.attempts] == [sid(1), sid(2), sid(3)]
    assert [(a.started, a.first_rollout_time, a.ended) for a in acc.attempts] == [
        ("2026-11-30T12:15:00Z", "2026-11-30T12:20:00Z", "2026-11-30T13:00:00Z"),
        ("2026-11-30T13:40:00Z", "2026-11-30T13:45:00Z", "2026-11-30T14:05:00Z"),
        ("2026-11-30T14:25:00Z", "2026-11-30T14:30:00Z", "2026-11-30T14:50:00Z"),
    ]
    assert [a.time_to_first_rollout_seconds for a in acc.attempts] == [300, 300, 300]
    assert [(a.end_phase, a.end_reason) for a in acc.attempts] == [
        (Phase.SUSPENDED, Reason.SUSPENDED),
        (Phase.SUSPENDED, Reason.PREEMPTED),
        (Phase.SUCCEEDED, Reason.SUCCEEDED),
    ]
    assert [a.gpus for a in acc.attempts] == [8, 8, 8]
    assert [a.gpu_seconds for a in acc.attempts] == [A1, A2, 3360 + 2400 + 9600]
    assert [(a.first_rollout, a.last_rollout, a.rollouts_completed) for a in acc.attempts] == [
        (0, 11, 12),
        (10, 14, 5),
        (13, 19, 7),
    ]
    assert [a.rollouts_lost for a in acc.attempts] == [2, 2, None]
    assert (a1.lost_gpu_hours, a2.lost_gpu_hours, a3.lost_gpu_hours) == (
        round(A1_LOST / 3600, 4),
        round(A2_LOST / 3600, 4),
        round(5760 / 3600, 4),
    )
    total = A1 + A2 + 15360
    assert acc.gpu_seconds == total == 56160 and acc.gpu_hours == 15.6
    assert acc.lost_gpu_hours == round((A1_LOST + A2_LOST + 5760) / 3600, 4)
    assert acc.goodput == round((A1_GOOD + A2_GOOD + 9600) / total, 4)
    assert acc.unattributed_gpu_seconds == 0


def test_the_same_run_failing_in_its_third_attempt_loses_all_of_that_attempts_gpu_time() -> None:
    decisions = through([*UNTIL_150, FAILS])
    last = decisions[-1].status
    assert (last.phase, last.reason) == (Phase.FAILED, Reason.JOB_FAILED)
    acc = last.accounting
    assert acc is not None
    assert (acc.queued_seconds, acc.provisioning_seconds, acc.running_seconds, acc.suspended_seconds) == (
        15 * 60,
        30 * 60,
        70 * 60,
        45 * 60,
    )
    a3 = acc.attempts[-1]
    assert (a3.end_phase, a3.end_reason, a3.ended) == (Phase.FAILED, Reason.JOB_FAILED, "2026-11-30T14:40:00Z")
    assert a3.gpu_seconds == 3360 + 2400 + 4800
    assert (a3.rollouts_completed, a3.rollouts_lost) == (1, 1)
    assert a3.lost_gpu_hours == round(10560 / 3600, 4)
    total = A1 + A2 + 10560
    assert acc.gpu_seconds == total
    assert acc.lost_gpu_hours == round((A1_LOST + A2_LOST + 10560) / 3600, 4)
    assert acc.goodput == round((A1_GOOD + A2_GOOD) / total, 4)


def test_with_a_price_per_gpu_hour_the_run_reports_its_cost_and_lost_cost_and_without_one_no_cost() -> None:
    # 15.6 GPU-hours (56160 GPU-seconds, worked out above) at 4.5 USD; lost 3200 + 10560 + 5760 GPU-seconds.
    priced = through([replace(obs, gpu_hour_price_usd=4.5) for obs in [*UNTIL_150, SUCCEEDS]])[-1].status.accounting
    assert priced is not None
    assert priced.cost_usd == 70.2
    assert priced.lost_cost_usd == round(round(19520 / 3600, 4) * 4.5, 2) == 24.4
    unpriced = through([*UNTIL_150, SUCCEEDS])[-1].status.accounting
    assert unpriced is not None and (unpriced.cost_usd, unpriced.lost_cost_usd) == (None, None)
    assert "cost" not in json.dumps(unpriced.model_dump(by_alias=True, exclude_none=True)).lower()
    wire = priced.model_dump(by_alias=True, exclude_none=True)
    assert (wire["costUSD"], wire["lostCostUSD"]) == (70.2, 24.4)


def test_a_terminal_runs_accounting_stays_as_it_ended_once_its_pods_are_gone() -> None:
    gone = replace(SUCCEEDS, now=SUCCEEDS.now + timedelta(minutes=1), gpus=NONE)
    decisions = through([*UNTIL_150, SUCCEEDS, gone, replace(gone, now=SUCCEEDS.now + timedelta(hours=5))])
    assert decisions[-1].status.accounting == decisions[-2].status.accounting


def test_the_gpus_a_failed_runs_pods_still_hold_are_counted_until_they_are_gone() -> None:
    """A worker's preStop hook waiting after the run failed (a stale marker, a save that cannot come) holds its
    GPUs: the ledger counts that time (teardownGpuSeconds, lost) until the pods are gone, and no longer."""
    ended = through([*UNTIL_150, FAILS])[-1].status.accounting
    assert ended is not None and ended.gpus == GPUS
    later = [replace(FAILS, now=FAILS.now + timedelta(minutes=m)) for m in (5, 11)]
    gone = replace(FAILS, now=FAILS.now + timedelta(minutes=12), gpus=NONE)
    after = [replace(gone, now=FAILS.now + timedelta(hours=3))]
    decisions = through([*UNTIL_150, FAILS, *later, gone, *after])
    acc = decisions[-1].status.accounting
    assert acc is not None and decisions[-1].status.phase is Phase.FAILED
    assert acc.teardown_gpu_seconds == GPUS * 12 * 60
    assert acc.gpu_seconds == ended.gpu_seconds + GPUS * 12 * 60 and acc.gpus == 0
    assert acc.lost_gpu_hours == round(ended.lost_gpu_hours + GPUS * 12 * 60 / 3600, 4)
    assert acc.attempts[-1].pods_gone_seconds == 12 * 60
    assert decisions[-2].status.accounting == acc  # gone: nothing more accrues


def test_a_restarted_operator_reading_the_status_back_records_the_same_values() -> None:
    """The numbers live in the status: deciding from its JSON round trip (what a new process reads), with a
    reconcile missed while the operator was down, ends where the uninterrupted operator ends."""
    straight = through([*UNTIL_150, SUCCEEDS])[-1].status
    first = through(UNTIL_150[:4])[-1].status  # up to the first rollout
    reread = GRPORunStatus.model_validate_json(json.dumps(first.model_dump(mode="json", by_alias=True)))
    rest = [o for o in UNTIL_150[4:] if o.now != T0 + timedelta(minutes=50)]  # down at 50
    resumed = through([*rest, SUCCEEDS], prev=reread)[-1].status
    assert resumed.accounting is not None and straight.accounting is not None
    assert resumed.accounting.model_dump(exclude={"attempts"}) == straight.accounting.model_dump(exclude={"attempts"})
    # The rollout-time samples follow the advances observed: the missed reconcile merges two into one sample.
    samples = {"rollout_seconds"}
    assert [a.model_dump(exclude=samples) for a in resumed.accounting.attempts] == [
        a.model_dump(exclude=samples) for a in straight.accounting.attempts
    ]


def test_gpu_hours_count_the_gpus_the_bound_pods_request_not_the_plans() -> None:
    """The plan asks for a whole run's GPUs; only the pods actually bound count (here 4 of them, for an hour)."""
    run, _ = parse_run(merge(base(), {}))
    assert run is not None
    plan = check(run).plan
    assert plan is not None and plan.total_gpus != 4
    bound = GpuObservation(4, T0)
    decisions = through(
        [
            at(0, plan=plan, cluster=NOT_READY, gpus=bound),
            at(60, plan=plan, cluster=NOT_READY, gpus=bound),
        ]
    )
    acc = decisions[-1].status.accounting
    assert acc is not None and acc.gpu_seconds == 4 * 3600 and acc.gpu_hours == 4.0
    assert acc.unattributed_gpu_seconds == 4 * 3600  # no attempt yet: the first one takes them


def test_each_attempts_end_and_its_lost_rollouts_are_told_in_events() -> None:
    decisions = through(UNTIL_150)
    ended = [e.message for d in decisions for e in d.events if e.reason == Reason.ATTEMPT_ENDED]
    lost = [e.message for d in decisions for e in d.events if e.reason == Reason.ROLLOUTS_LOST]
    assert ended[0] == (
        "attempt 1 ended (Suspended/Suspended): 6.8 GPU-hours on 8 GPUs, 12 rollout(s), lost rollouts: not known "
        "until the next attempt's first rollout, lost GPU-hours: 0"
    )
    assert lost == [
        "attempt 1 lost 2 rollout(s): attempt 2 resumed at rollout 10, after the checkpoint it loaded",
        "attempt 2 lost 2 rollout(s): attempt 3 resumed at rollout 13, after the checkpoint it loaded",
    ]


def test_a_reconcile_that_changes_nothing_else_writes_no_accounting_until_a_minute_passed_and_loses_no_time() -> None:
    queued = [at(0, cluster=QUEUED, gpus=NONE), at(0, cluster=QUEUED, gpus=NONE)]
    first, idle = through(queued)
    assert idle.status == first.status  # nothing to write
    later = through([replace(queued[0], now=T0 + timedelta(seconds=50))], prev=idle.status)[-1]
    assert later.status.accounting == first.status.accounting
    refreshed = through([replace(queued[0], now=T0 + timedelta(seconds=70))], prev=later.status)[-1]
    assert refreshed.status.accounting is not None and refreshed.status.accounting.queued_seconds == 70
