"""Healthy while the next attempt's driver waits: it reads no metrics, so the guards' last verdict stands (as
through a scrape outage, `test_running.py`), and a new driver is not reported healthy before a scrape shows it."""

from __future__ import annotations

from grpo_operator.api.status import ConditionType, Reason
from grpo_operator.status.observation import JobState

from tests.status.runs import cond, healthy, job, spec
from tests.status.test_failures import WATCHDOG
from tests.status.test_recovery import FAILED_WITH, _sid, _step

C = ConditionType


def test_a_warned_stall_stays_unhealthy_while_the_restarted_attempts_driver_is_pending() -> None:
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
    pending = _step(resubmitted.status, s, 130, job=job(JobState.PENDING, submission_id=second))
    assert cond(pending, C.HEALTHY) == ("False", "Stalled")
    assert cond(pending, C.METRICS_AVAILABLE) == ("Unknown", "NotRunning")
