"""Before a guard stops a job, its evidence is captured: the capture comes first among the actions, the bundle
is listed in status.forensics with its time and trigger and announced in an event; a guard that only warns
captures nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import Phase, Reason
from grpo_operator.status.decision import CaptureEvidence, StopJob
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import JobState, Seen

from tests.support.status import BUNDLE, READY, SID, T0, healthy, intent, job, spec


def _stalled(action: str) -> object:
    s = intent(
        spec({"guards": {"stallTimeoutSeconds": 60, "startupGraceSeconds": 0, "action": action}}),
        evidence_config_map=BUNDLE,
    )
    running = Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3))
    first = decide(None, running, s, T0)
    return decide(first.status, running, s, T0 + timedelta(seconds=100))


def test_a_stall_under_stop_captures_the_evidence_before_it_stops_the_job() -> None:
    d = _stalled("Stop")
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.STALLED)  # type: ignore[attr-defined]
    actions = [a for a in d.actions if isinstance(a, CaptureEvidence | StopJob)]  # type: ignore[attr-defined]
    assert actions == [CaptureEvidence(SID, BUNDLE, Reason.STALLED), StopJob(SID)]
    [bundle] = d.status.forensics  # type: ignore[attr-defined]
    assert (bundle.trigger, bundle.config_map, bundle.submission_id, bundle.time) == (
        "Stalled",
        BUNDLE,
        SID,
        "2026-11-30T12:01:40Z",
    )
    assert Reason.EVIDENCE_CAPTURED in [e.reason for e in d.events]  # type: ignore[attr-defined]


def test_a_degenerate_stop_captures_too_and_the_terminal_run_keeps_the_list() -> None:
    s = spec({"guards": {"consecutiveRollouts": 1}})
    d = decide(
        None,
        Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3, repetition=0.9)),
        intent(s, evidence_config_map=BUNDLE),
        T0,
    )
    assert d.status.reason == Reason.DEGENERATE_OUTPUT and d.actions[-2:] == (
        CaptureEvidence(SID, BUNDLE, Reason.DEGENERATE_OUTPUT),
        StopJob(SID),
    )
    after = decide(d.status, Seen(cluster=READY, job=job(JobState.STOPPED)), intent(s), T0)
    assert after.status.forensics == d.status.forensics and not any(
        isinstance(a, CaptureEvidence) for a in after.actions
    )


@pytest.mark.parametrize("action", ["Warn"])
def test_a_guard_that_only_warns_captures_nothing(action: str) -> None:
    d = _stalled(action)
    assert not any(isinstance(a, CaptureEvidence) for a in d.actions)  # type: ignore[attr-defined]
    assert d.status.forensics is None  # type: ignore[attr-defined]
