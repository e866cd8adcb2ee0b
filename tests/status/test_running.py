"""A running job: metrics availability, the guards (their state per attempt), stopping on a trip."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.decision import ApplyChildren, StopJob
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState, Seen, TrainerMetrics

from tests.support.status import READY, T0, at, cond, healthy, intent, job, run_through, spec

C = ConditionType
RUNNING = {"cluster": READY, "job": job(JobState.RUNNING)}


def _rollouts(reps: list[float], action: str = "Stop") -> tuple[Phase | None, str | None, int | None]:
    s = spec({"guards": {"maxRepetitionFrac": 0.5, "consecutiveRollouts": 3, "action": action}})
    obs = [at(T0 + timedelta(seconds=10 * i), **RUNNING, metrics=healthy(i, repetition=r)) for i, r in enumerate(reps)]
    d = run_through(intent(s), *obs)
    return d.status.phase, d.status.reason, d.status.guards.repetition_streak


@pytest.mark.parametrize(
    ("reps", "expected"),
    [
        pytest.param(
            [0.6, 0.0, 0.6, 0.0, 0.6], (Phase.RUNNING, "Running", 1), id="a healthy rollout between resets the streak"
        ),  # a healthy rollout in between resets the streak
        pytest.param(
            [0.6, 0.6, 0.0, 0.6, 0.6], (Phase.RUNNING, "Running", 2), id="a healthy rollout between two pairs"
        ),
        pytest.param(
            [0.0, 0.6, 0.6, 0.6], (Phase.FAILED, "DegenerateOutput", 3), id="three in a row after a healthy one trip it"
        ),
        pytest.param([0.6, 0.6], (Phase.RUNNING, "Running", 2), id="two in a row at the end have not yet tripped"),
    ],
)
def test_repetition_stops_only_after_consecutive_repetitive_rollouts(
    reps: list[float], expected: tuple[Phase, str, int]
) -> None:
    assert _rollouts(reps) == expected


def test_a_guard_trip_under_stop_fails_the_run_and_stops_its_job() -> None:
    s = spec({"guards": {"minReward": {"value": 0.1, "afterRollouts": 1}}})
    d = decide(None, Seen(**RUNNING, metrics=healthy(3, reward=0.0)), intent(s), T0)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.DEGENERATE_OUTPUT)
    assert d.actions == (ApplyChildren(), StopJob("grpo-x-1"))
    assert cond(d, C.JOB_RUNNING) == ("False", "Stopped") and d.warnings


def test_a_guard_trip_under_warn_keeps_the_job_running_and_warns() -> None:
    s = spec({"guards": {"action": "Warn", "minReward": {"value": 0.1, "afterRollouts": 1}}})
    d = decide(None, Seen(**RUNNING, metrics=healthy(3, reward=0.0)), intent(s), T0)
    assert (d.status.phase, d.status.reason) == (Phase.RUNNING, Reason.DEGENERATE_OUTPUT)
    assert not any(isinstance(a, StopJob) for a in d.actions) and d.warnings


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        pytest.param(
            {"metrics": TrainerMetrics()}, ("True", "NoRolloutYet"), id="the endpoint answers before the first rollout"
        ),
        pytest.param({"metrics": healthy(2)}, ("True", "Scraped"), id="a rollout scraped"),
        pytest.param({"metrics_error": "connection refused"}, ("False", "ScrapeFailed"), id="the endpoint refuses"),
        pytest.param({}, ("Unknown", "NotScraped"), id="no driver address yet"),
    ],
)
def test_metrics_availability_of_a_running_job(seen: dict[str, object], expected: tuple[str, str]) -> None:
    assert cond(decide(None, Seen(**RUNNING, **seen), intent(), T0), C.METRICS_AVAILABLE) == expected


def test_a_scrape_outage_past_the_stall_timeout_warns_once_and_keeps_its_transition_time() -> None:
    s = spec({"guards": {"stallTimeoutSeconds": 60}})
    first = decide(None, Seen(**RUNNING, metrics_error="refused"), intent(s), T0)
    outage = decide(first.status, Seen(**RUNNING, metrics_error="refused"), intent(s), T0 + timedelta(seconds=90))
    again = decide(outage.status, Seen(**RUNNING, metrics_error="refused"), intent(s), T0 + timedelta(seconds=120))
    assert cond(outage, C.METRICS_AVAILABLE) == ("False", "ScrapeOutage") and outage.warnings and not again.warnings
    times = [
        next(c for c in d.status.conditions if c.type == C.METRICS_AVAILABLE).last_transition_time
        for d in (first, outage)
    ]
    assert times[0] == times[1]


def test_a_lost_worker_is_provisioning_and_not_stopped() -> None:
    from grpo_operator.status.observation import ClusterObservation

    d = decide(
        None, Seen(cluster=ClusterObservation(False, "1/2 workers ready"), job=job(JobState.RUNNING)), intent(), T0
    )
    assert (d.status.phase, d.status.reason) == (Phase.PROVISIONING, Reason.PROVISIONING)
    assert d.actions == (ApplyChildren(),)


def test_a_warned_stall_stays_unhealthy_through_a_scrape_outage_that_follows() -> None:
    """Healthy says what the guards last judged from metrics read: an outage after a warned stall observes nothing
    new, so the run is not reported healthy again until a scrape shows progress."""
    s = spec({"guards": {"action": "Warn", "stallTimeoutSeconds": 60, "startupGraceSeconds": 0}})
    stalled = run_through(
        intent(s), at(**RUNNING, metrics=healthy(3)), at(T0 + timedelta(seconds=120), **RUNNING, metrics=healthy(3))
    )
    assert cond(stalled, C.HEALTHY) == ("False", "Stalled")
    outage = decide(stalled.status, Seen(**RUNNING, metrics_error="refused"), intent(s), T0 + timedelta(seconds=150))
    assert cond(outage, C.HEALTHY) == ("False", "Stalled")
    moving = decide(outage.status, Seen(**RUNNING, metrics=healthy(4)), intent(s), T0 + timedelta(seconds=180))
    assert cond(moving, C.HEALTHY) == ("True", "MetricsHealthy")
