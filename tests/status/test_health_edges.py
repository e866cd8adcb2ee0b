"""Healthy while the next attempt's driver waits: the guards' verdict on the attempt before (a stall that restarted
it) is not this one's, so Healthy is Unknown from the submission on, and a new driver is not reported healthy
before a scrape shows it."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Reason
from grpo_operator.status.observation import JobState

from tests.status.runs import cond, healthy, job, spec
from tests.status.test_failures import WATCHDOG
from tests.status.test_recovery import FAILED_WITH, _sid, _step

C = ConditionType


def test_a_warned_stall_is_not_the_verdict_on_the_restarted_attempt_whose_driver_is_pending() -> None:
    s = spec(
        {
            "guards": {"action": "Warn", "stallTimeoutSeconds": 60, "startupGraceSeconds": 0},
            "recovery": {"maxRestarts": 1},
        }
    )
    submitted = _step(None, s, 0)
    first = _sid(submitted.status)
    seen = _step(submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=first), metrics=healthy(3))
    stalled = _step(seen.status, s, 100, job=job(JobState.RUNNING, submission_id=first), metrics=healthy(3))
    assert cond(stalled, C.HEALTHY) == ("False", "Stalled")
    failed = _step(stalled.status, s, 110, job=job(JobState.FAILED, FAILED_WITH + WATCHDOG, submission_id=first))
    assert failed.status.reason == Reason.RESTARTING
    resubmitted = _step(failed.status, s, 120)
    second = _sid(resubmitted.status)
    assert second != first
    assert cond(resubmitted, C.HEALTHY) == ("Unknown", "NoMetrics")
    pending = _step(resubmitted.status, s, 130, job=job(JobState.PENDING, submission_id=second))
    assert cond(pending, C.HEALTHY) == ("Unknown", "NoMetrics")
    assert cond(pending, C.METRICS_AVAILABLE) == ("Unknown", "NotRunning")
