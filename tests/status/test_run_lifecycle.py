"""The run lifecycle as a table: previous status + observation -> phase, conditions and actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import Phase
from grpo_operator.status.decision import ApplyChildren, Decision, DeleteRayCluster, RequestCheckpoint, StopJob, Submit
from grpo_operator.status.intent import NoPlan
from grpo_operator.status.lifecycle import decide, unplanned
from grpo_operator.status.observation import (
    ClusterObservation,
    Failure,
    JobState,
    RewardObservation,
    RunSummary,
    Seen,
    TrainerMetrics,
)

from tests.support.status import READY, REMOTE_REWARD, T0, Reading, at, cond, healthy, intent, job, spec, step

RUN = intent()
SUSPENDED_G2 = intent(spec({"suspend": True}), generation=2)


def test_an_invalid_spec_fails_with_validated_false_and_no_actions() -> None:
    d = unplanned(None, NoPlan(1, problems=("spec.rollout.batchSize: bad",)), T0)
    assert d.status.phase is Phase.FAILED and d.status.reason == "InvalidSpec"
    assert cond(d, "Validated") == ("False", "InvalidSpec")
    assert not (d.has(ApplyChildren) or d.has(Submit) or d.has(StopJob))


def test_a_new_run_is_pending_and_creates_its_children() -> None:
    d = step(None, RUN, at())
    assert d.status.phase is Phase.PENDING and d.has(ApplyChildren) and not d.has(Submit)
    assert d.status.progress == "0/100"


def test_a_cluster_with_unschedulable_pods_is_provisioning_in_the_schedulers_words() -> None:
    msg = "pod w-1 unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    d = step(None, RUN, at(cluster=ClusterObservation(ready=False, message=msg)))
    assert d.status.phase is Phase.PROVISIONING
    assert d.status.message == msg
    assert cond(d, "ResourcesReady") == ("False", "Provisioning")


def test_a_ready_cluster_gets_the_job_submitted() -> None:
    d = step(None, RUN, at(cluster=READY))
    assert d.has(Submit) and d.status.phase is Phase.PROVISIONING


def test_a_remote_reward_run_waits_for_the_reward_service() -> None:
    obs = at(cluster=READY, reward=RewardObservation(False, "NotReady", "no reward service replica is ready"))
    d = step(None, intent(spec(REMOTE_REWARD)), obs)
    assert not d.has(Submit) and d.status.phase is Phase.PROVISIONING
    assert cond(d, "RewardServiceReady") == ("False", "NotReady")


def test_a_running_job_with_healthy_metrics_is_running_with_progress() -> None:
    metrics = TrainerMetrics(rollout=36, raw_reward=0.53, repetition_frac=0.0)
    d = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=metrics))
    assert d.status.phase is Phase.RUNNING and d.status.progress == "37/100"
    assert d.status.metrics is not None and d.status.metrics.raw_reward == 0.53
    assert cond(d, "Healthy") == ("True", "MetricsHealthy")
    assert cond(d, "JobRunning") == ("True", "Running")


def test_repetition_for_consecutive_rollouts_stops_the_job_and_fails_the_run() -> None:
    degenerate = TrainerMetrics(rollout=0, raw_reward=0.4, repetition_frac=0.56)
    first = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=degenerate))
    assert first.status.phase is Phase.RUNNING  # one rollout is not yet a streak of two
    second_metrics = TrainerMetrics(rollout=1, raw_reward=0.4, repetition_frac=0.6)
    second = step(
        first,
        RUN,
        at(T0 + timedelta(minutes=1), cluster=READY, job=job(JobState.RUNNING), metrics=second_metrics),
    )
    assert second.status.phase is Phase.FAILED and second.status.reason == "DegenerateOutput"
    assert second.has(StopJob)
    assert cond(second, "Healthy") == ("False", "DegenerateOutput")


def test_the_same_rollout_scraped_twice_counts_once() -> None:
    metrics = TrainerMetrics(rollout=0, raw_reward=0.4, repetition_frac=0.9)
    obs = at(cluster=READY, job=job(JobState.RUNNING), metrics=metrics)
    d = step(step(step(None, RUN, obs), RUN, obs), RUN, obs)
    assert d.status.phase is Phase.RUNNING and d.status.guards.repetition_streak == 1


def test_warn_action_keeps_running_with_healthy_false() -> None:
    s = spec({"guards": {"action": "Warn", "consecutiveRollouts": 1}})
    metrics = TrainerMetrics(rollout=0, raw_reward=0.4, repetition_frac=0.9)
    d = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=metrics), intent(s), T0)
    assert d.status.phase is Phase.RUNNING and not d.has(StopJob) and d.warnings
    assert cond(d, "Healthy") == ("False", "DegenerateOutput")


def test_reward_at_the_floor_after_warmup_is_degenerate() -> None:
    metrics = TrainerMetrics(rollout=2, raw_reward=0.0, repetition_frac=0.0)
    d = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=metrics))
    assert d.status.phase is Phase.FAILED and "raw_reward 0 at or below" in (d.status.message or "")


def test_a_succeeded_job_with_degenerate_metrics_is_not_succeeded() -> None:
    metrics = TrainerMetrics(rollout=99, raw_reward=0.0, repetition_frac=0.56)
    d = step(None, RUN, at(cluster=READY, job=job(JobState.SUCCEEDED), metrics=metrics))
    assert d.status.phase is Phase.FAILED and d.status.reason == "DegenerateOutput"
    assert "succeeded but the output is degenerate" in (d.status.message or "")


def test_a_succeeded_job_with_healthy_metrics_succeeds_and_keeps_them() -> None:
    metrics = TrainerMetrics(rollout=99, raw_reward=0.53, repetition_frac=0.0)
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=metrics))
    done = step(running, RUN, at(cluster=READY, job=job(JobState.SUCCEEDED), metrics=None))
    assert done.status.phase is Phase.SUCCEEDED and done.status.progress == "100/100"
    assert done.status.metrics is not None and done.status.metrics.raw_reward == 0.53
    assert done.status.completion_time is not None


def test_no_progress_past_the_stall_timeout_is_a_stall() -> None:
    metrics = TrainerMetrics(rollout=3, raw_reward=0.5, repetition_frac=0.0)
    first = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=metrics))
    later = step(
        first,
        RUN,
        at(T0 + timedelta(seconds=3601), cluster=READY, job=job(JobState.RUNNING), metrics=metrics),
    )
    assert later.status.phase is Phase.FAILED and later.status.reason == "Stalled" and later.has(StopJob)


def test_a_failed_preflight_is_reported_in_its_own_words() -> None:
    message = "Job entrypoint command failed with exit code 3, last logs:\n...\npreflight failed: gpus: 7 visible, plan needs 8"
    d = step(None, RUN, at(cluster=READY, job=job(JobState.FAILED, message)))
    assert d.status.phase is Phase.FAILED and d.status.reason == "PreflightFailed"
    assert d.status.message == "preflight failed: gpus: 7 visible, plan needs 8"


def test_terminal_phases_never_change() -> None:
    done = step(
        None,
        RUN,
        at(
            cluster=READY,
            job=job(JobState.SUCCEEDED),
            metrics=TrainerMetrics(rollout=99, raw_reward=0.5, repetition_frac=0.0),
        ),
    )
    later = step(done, intent(generation=2), at(cluster=READY, job=job(JobState.FAILED, "boom")))
    # Only the generation processed moves, on the status and on each condition.
    conditions = [c.model_copy(update={"observed_generation": 1}) for c in later.status.conditions]
    assert later.status.model_copy(update={"observed_generation": 1, "conditions": conditions}) == done.status
    assert {c.observed_generation for c in later.status.conditions} == {2}


def test_suspend_stops_the_job_and_deletes_the_cluster() -> None:
    d = step(None, SUSPENDED_G2, at(cluster=READY, job=job(JobState.RUNNING)))
    assert d.status.phase is Phase.SUSPENDED and d.has(StopJob) and d.has(DeleteRayCluster)


@pytest.mark.parametrize("state", [JobState.RUNNING, JobState.PENDING])
def test_condition_transition_times_move_only_on_change(state: JobState) -> None:
    obs = at(cluster=READY, job=job(state))
    first = step(None, RUN, obs)
    second = step(first, RUN, at(T0 + timedelta(minutes=5), cluster=READY, job=job(state)))
    assert [c.last_transition_time for c in first.status.conditions] == [
        c.last_transition_time for c in second.status.conditions
    ]


def test_a_resumed_run_forgets_the_suspended_job() -> None:
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING)))
    suspended = step(running, SUSPENDED_G2, at(cluster=READY, job=job(JobState.RUNNING)))
    resumed = step(suspended, intent(generation=3), at())
    assert resumed.status.phase is Phase.PENDING and resumed.status.job_submission_id is None


def test_suspend_asks_for_a_checkpoint_and_stops_once_it_is_surely_saved() -> None:
    def obs(seconds: int, rollout: int, sentinel: JobState | None = None) -> Reading:
        return at(
            T0 + timedelta(seconds=seconds),
            cluster=READY,
            job=job(JobState.RUNNING),
            checkpoint_job=sentinel,
            metrics=TrainerMetrics(rollout=rollout, raw_reward=0.5, repetition_frac=0.0),
        )

    running = step(
        None,
        RUN,
        at(
            cluster=READY,
            job=job(JobState.RUNNING),
            metrics=TrainerMetrics(rollout=4, raw_reward=0.5, repetition_frac=0.0),
        ),
    )
    asked = step(running, SUSPENDED_G2, obs(0, 4))
    assert asked.has(RequestCheckpoint) and not asked.has(StopJob) and asked.status.reason == "Suspending"
    sentinel_pending = step(asked, SUSPENDED_G2, obs(10, 5, JobState.PENDING))
    assert not sentinel_pending.has(RequestCheckpoint) and sentinel_pending.status.suspend_requested_rollout is None
    sentinel_written = step(sentinel_pending, SUSPENDED_G2, obs(20, 5, JobState.SUCCEEDED))
    assert sentinel_written.status.suspend_requested_rollout == 5 and not sentinel_written.has(StopJob)
    saving = step(
        sentinel_written, SUSPENDED_G2, obs(30, 6, JobState.SUCCEEDED)
    )  # rollout 6's metrics come before its save
    assert saving.status.phase is Phase.RUNNING and not saving.has(StopJob)
    saved = step(saving, SUSPENDED_G2, obs(40, 7, JobState.SUCCEEDED))
    assert saved.status.phase is Phase.SUSPENDED and saved.has(StopJob) and saved.has(DeleteRayCluster)


def test_suspend_stops_without_a_checkpoint_when_the_sentinel_cannot_be_written() -> None:
    running = step(
        None,
        RUN,
        at(cluster=READY, job=job(JobState.RUNNING), metrics=TrainerMetrics(rollout=4, raw_reward=0.5)),
    )
    asked = step(
        running,
        SUSPENDED_G2,
        at(cluster=READY, job=job(JobState.RUNNING), metrics=TrainerMetrics(rollout=4, raw_reward=0.5)),
    )
    failed = step(
        asked,
        SUSPENDED_G2,
        at(
            cluster=READY,
            job=job(JobState.RUNNING),
            checkpoint_job=JobState.FAILED,
            metrics=TrainerMetrics(rollout=4, raw_reward=0.5),
        ),
    )
    assert failed.status.phase is Phase.SUSPENDED and failed.has(StopJob)


def test_suspend_without_checkpoint_stops_at_once() -> None:
    s = intent(spec({"suspend": True, "storage": {"checkpointOnSuspend": False}}), generation=2)
    metrics = TrainerMetrics(rollout=4, raw_reward=0.5, repetition_frac=0.0)
    d = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=metrics), s, T0)
    assert d.status.phase is Phase.SUSPENDED and d.has(StopJob) and not d.has(RequestCheckpoint)


# --- issue #12: what miles really does (radixark/miles dec268f7) -------------------------------------------------


def test_a_resume_after_a_suspend_longer_than_the_stall_timeout_is_a_new_attempt_not_a_stall() -> None:
    # miles restarts at checkpoint + 1 (backends/megatron_utils/actor.py:196): at or below the old rollout.
    s = spec({"guards": {"stallTimeoutSeconds": 600, "startupGraceSeconds": 300}})
    running = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(12)), intent(s), T0)
    suspended = decide(
        running.status,
        Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(12)),
        intent(spec({"suspend": True, "storage": {"checkpointOnSuspend": False}}), generation=2),
        T0,
    )
    assert suspended.status.phase is Phase.SUSPENDED
    later = T0 + timedelta(hours=2)
    pending = decide(suspended.status, Seen(cluster=READY), intent(s, generation=3, submission_id="grpo-x-g3"), later)
    assert pending.has(Submit)
    submitted = pending.status
    assert submitted.attempt == 2 and submitted.guards.last_rollout is None
    # The new job runs: model load inside the grace, then rollout 11 (checkpoint 10 + 1) <= the old 12.
    loading = decide(
        submitted,
        Seen(cluster=READY, job=job(JobState.RUNNING, submission_id="grpo-x-g3"), metrics=TrainerMetrics()),
        intent(s, generation=3),
        later + timedelta(seconds=30),
    )
    assert loading.status.phase is Phase.RUNNING, loading.status.message
    first = decide(
        loading.status,
        Seen(cluster=READY, job=job(JobState.RUNNING, submission_id="grpo-x-g3"), metrics=healthy(11)),
        intent(s, generation=3),
        later + timedelta(seconds=400),
    )
    assert first.status.phase is Phase.RUNNING and first.status.reason == "Running", first.status.message
    assert first.status.guards.last_rollout == 11 and first.status.attempt == 2
    assert first.status.guards.last_progress_time == "2026-11-30T14:06:40Z"


def test_a_new_attempt_waits_the_startup_grace_before_its_stall_clock_runs() -> None:
    s = intent(spec({"guards": {"stallTimeoutSeconds": 600, "startupGraceSeconds": 1200}}))

    def obs(sec: int) -> Reading:
        return at(T0 + timedelta(seconds=sec), cluster=READY, job=job(JobState.RUNNING), metrics=TrainerMetrics())

    d = step(None, s, obs(0))
    d = step(d, s, obs(1700))
    assert d.status.phase is Phase.RUNNING
    d = step(d, s, obs(1801))
    assert d.status.phase is Phase.FAILED and d.status.reason == "Stalled"


def test_a_succeeded_job_whose_last_rollouts_were_never_scraped_is_unverified_not_succeeded() -> None:
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(16)))
    assert running.status.progress == "17/100"
    done = step(running, RUN, at(T0 + timedelta(seconds=15), cluster=READY, job=job(JobState.SUCCEEDED)))
    assert done.status.phase is Phase.FAILED and done.status.reason == "Unverified"
    assert "17/100" in (done.status.message or "") and done.warnings
    assert cond(done, "Complete") == ("True", "Unverified")


def test_a_succeeded_job_never_scraped_at_all_is_unverified() -> None:
    done = step(None, RUN, at(cluster=READY, job=job(JobState.SUCCEEDED)))
    assert done.status.phase is Phase.FAILED and done.status.reason == "Unverified"
    assert done.status.progress == "0/100"


def test_the_end_of_run_summary_gives_the_real_last_rollout_and_verifies_success() -> None:
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(16)))
    summary = RunSummary(
        exit_code=0,
        last_rollout=99,
        rollouts=tuple(healthy(r) for r in range(90, 100)),
        provenance={"miles_commit": "dec268f7", "ray": "2.49.2"},
    )
    done = step(
        running,
        RUN,
        at(T0 + timedelta(seconds=15), cluster=READY, job=job(JobState.SUCCEEDED), summary=summary),
    )
    assert done.status.phase is Phase.SUCCEEDED and done.status.progress == "100/100"
    assert done.status.metrics is not None and done.status.metrics.source == "RunSummary"
    assert done.status.provenance is not None and done.status.provenance.miles_commit == "dec268f7"
    assert cond(done, "MetricsAvailable") == ("True", "RunSummary")


def test_degenerate_final_rollouts_seen_only_in_the_summary_fail_the_run() -> None:
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(96)))
    tail = tuple(TrainerMetrics(rollout=r, raw_reward=0.4, repetition_frac=0.6) for r in (97, 98, 99))
    summary = RunSummary(exit_code=0, last_rollout=99, rollouts=(healthy(96), *tail))
    done = step(
        running,
        RUN,
        at(T0 + timedelta(seconds=15), cluster=READY, job=job(JobState.SUCCEEDED), summary=summary),
    )
    assert done.status.phase is Phase.FAILED and done.status.reason == "DegenerateOutput"
    assert done.status.guards.repetition_streak == 3


def test_a_failure_file_reason_names_the_failure_in_one_line() -> None:
    message = "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\nTraceback\n  ...\nRuntimeError: boom"
    summary = RunSummary(exit_code=1, failure=Failure("RewardServiceFailed", "reward service answered 503 for 10 min"))
    d = step(None, RUN, at(cluster=READY, job=job(JobState.FAILED, message), summary=summary))
    assert d.status.reason == "RewardServiceFailed" and d.status.message == "reward service answered 503 for 10 min"
    plain = step(None, RUN, at(cluster=READY, job=job(JobState.FAILED, message)))
    assert plain.status.reason == "JobFailed"
    assert plain.status.message == "the Ray job failed with exit code 1: RuntimeError: boom"


def test_a_failing_scrape_is_metrics_unavailable_not_a_stall_and_a_long_outage_warns_once() -> None:
    s = intent(spec({"guards": {"stallTimeoutSeconds": 600, "startupGraceSeconds": 0}}))

    def obs(sec: int, metrics: TrainerMetrics | None = None, error: str | None = None) -> Reading:
        return at(
            T0 + timedelta(seconds=sec), cluster=READY, job=job(JobState.RUNNING), metrics=metrics, metrics_error=error
        )

    d = step(None, s, obs(0, healthy(3)))
    d = step(d, s, obs(60, error="connection refused"))
    assert cond(d, "MetricsAvailable") == ("False", "ScrapeFailed") and not d.warnings
    d = step(d, s, obs(700, error="connection refused"))
    assert d.status.phase is Phase.RUNNING and cond(d, "MetricsAvailable") == ("False", "ScrapeOutage")
    assert d.warnings and "could not be read" in d.warnings[0]
    d = step(d, s, obs(800, error="connection refused"))
    assert d.status.phase is Phase.RUNNING and not d.warnings  # warned once
    d = step(d, s, obs(900, healthy(9)))
    assert d.status.phase is Phase.RUNNING and cond(d, "MetricsAvailable") == ("True", "Scraped")


def test_conditions_persist_while_suspended_with_their_transition_times() -> None:
    running = step(None, RUN, at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(4)))
    s = intent(spec({"suspend": True, "storage": {"checkpointOnSuspend": False}}), generation=2)
    suspended = step(running, s, at(T0 + timedelta(minutes=5), cluster=READY, job=job(JobState.RUNNING)))
    types = {c.type for c in suspended.status.conditions}
    assert {"Healthy", "Complete", "RewardServiceReady", "Validated"} <= types
    before = {c.type: c.last_transition_time for c in running.status.conditions}
    after = {c.type: c.last_transition_time for c in suspended.status.conditions}
    assert after["Healthy"] == before["Healthy"] and after["JobRunning"] != before["JobRunning"]


def test_observed_generation_keeps_moving_after_a_terminal_phase() -> None:
    done = step(None, RUN, at(cluster=READY, job=job(JobState.SUCCEEDED), metrics=healthy(99)))
    later = decide(done.status, Seen(), intent(generation=4), T0)
    assert later.status.phase is Phase.SUCCEEDED and later.status.observed_generation == 4


def test_every_reason_decide_writes_is_one_the_readme_table_declares() -> None:
    from itertools import product

    from grpo_operator.api.status import CONDITION_REASONS
    from grpo_operator.api.status import PHASE_REASONS as REASONS

    guards = {"guards": {"stallTimeoutSeconds": 60, "startupGraceSeconds": 0}}
    intents = {False: intent(spec(guards)), True: intent(spec({**guards, "suspend": True}))}
    jobs = [None, *(job(state, "Job entrypoint command failed with exit code 1\nboom") for state in JobState)]
    metrics = [None, TrainerMetrics(), healthy(99), TrainerMetrics(rollout=5, raw_reward=0.0, repetition_frac=0.9)]
    seen = 0
    for j, m, suspend, error, cluster in product(
        jobs, metrics, (False, True), (None, "refused"), (None, READY, ClusterObservation(False, "waiting"))
    ):
        d: Decision | None = None
        for sec in (0, 30, 4000):
            d = step(
                d,
                intents[suspend],
                at(
                    T0 + timedelta(seconds=sec),
                    cluster=cluster,
                    job=j,
                    metrics=m,
                    metrics_error=error if m is None else None,
                ),
            )
            assert d.status.phase is not None and d.status.reason in REASONS[d.status.phase], d.status
            for c in d.status.conditions:
                assert c.reason in CONDITION_REASONS[c.type], c
            seen += 1
    assert seen > 500
