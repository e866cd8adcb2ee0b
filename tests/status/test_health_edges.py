"""Healthy while the next attempt's driver waits: the guards' verdict on the attempt before (a stall that restarted
it) is not this one's, so Healthy is Unknown from the submission on, and a new driver is not reported healthy
before a scrape shows it."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Reason
from grpo_operator.status.observation import JobState

from tests.support.status import FAILED_WITH, WATCHDOG, attempt_sid, attempt_step, cond, healthy, job, spec

C = ConditionType


def test_a_warned_stall_is_not_the_verdict_on_the_restarted_attempt_whose_driver_is_pending() -> None:
    s = spec(
        {
            "guards": {"action": "Warn", "stallTimeoutSeconds": 60, "startupGraceSeconds": 0},
            "recovery": {"maxRestarts": 1},
        }
    )
    submitted = attempt_step(None, s, 0)
    first = attempt_sid(submitted.status)
    seen = attempt_step(submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=first), metrics=healthy(3))
    stalled = attempt_step(seen.status, s, 100, job=job(JobState.RUNNING, submission_id=first), metrics=healthy(3))
    assert cond(stalled, C.HEALTHY) == ("False", "Stalled")
    failed = attempt_step(stalled.status, s, 110, job=job(JobState.FAILED, FAILED_WITH + WATCHDOG, submission_id=first))
    assert failed.status.reason == Reason.RESTARTING
    resubmitted = attempt_step(failed.status, s, 120)
    second = attempt_sid(resubmitted.status)
    assert second != first
    assert cond(resubmitted, C.HEALTHY) == ("Unknown", "NoMetrics")
    pending = attempt_step(resubmitted.status, s, 130, job=job(JobState.PENDING, submission_id=second))
    assert cond(pending, C.HEALTHY) == ("Unknown", "NoMetrics")
    assert cond(pending, C.METRICS_AVAILABLE) == ("Unknown", "NotRunning")
