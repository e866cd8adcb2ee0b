"""spec.recovery: a failure a fresh start can fix restarts the run from its checkpoint as a new attempt, at most
`maxRestarts` times (a failure after a planned stop of a worker pod, such as a drain, does not count); anything
else, or one failure too many, ends the run `Failed`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.status.decision import Decision, DeleteRayCluster, KeepLogs, StopJob, Submit
from grpo_operator.status.observation import Failure, GpuObservation, JobState, RunSummary

from tests.support.status import (
    CUDA_OOM,
    ECC,
    FABRIC,
    FAILED_WITH,
    LOGS,
    NODE_DEAD,
    REMOTE_ERROR,
    T0,
    WATCHDOG,
    WORKERS,
    attempt_sid,
    attempt_step,
    cond,
    healthy,
    job,
    running_then_failing,
    spec,
)

R = Reason


def test_a_fabric_class_failure_restarts_once_from_the_checkpoint_as_attempt_2_and_a_second_one_ends_failed() -> None:
    s = spec({"recovery": {"maxRestarts": 1}})
    running, restarting = running_then_failing(s, WATCHDOG, logs=LOGS)
    first = running.status.job_submission_id
    assert (restarting.status.phase, restarting.status.reason) == (Phase.PROVISIONING, R.RESTARTING)
    assert restarting.status.restarts == 1 and restarting.status.job_submission_id is None
    assert restarting.status.message is not None
    assert restarting.status.message.startswith(
        "restart 1 of recovery.maxRestarts 1, from the last checkpoint, after NCCLTimeout: rank 3"
    )
    assert restarting.has(KeepLogs) and not restarting.has(StopJob)  # the failed job's log tail is kept
    assert [e.reason for e in restarting.events] == [R.LOGS_KEPT, R.RESTARTED, R.ATTEMPT_ENDED]

    # the next reconcile submits the next attempt into the same RayCluster: a new id, attempt 2
    resubmit = attempt_step(restarting.status, s, 30)
    [submit] = [a for a in resubmit.actions if isinstance(a, Submit)]
    assert submit.submission_id != first and submit.submission_id.endswith("-a2")
    assert resubmit.status.attempt == 2 and resubmit.status.restarts == 1
    again = attempt_step(resubmit.status, s, 40, job=job(JobState.RUNNING, submission_id=submit.submission_id))
    assert again.status.phase is Phase.RUNNING and again.status.attempt == 2
    failed = attempt_step(
        again.status, s, 50, job=job(JobState.FAILED, FAILED_WITH + FABRIC, submission_id=submit.submission_id)
    )
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.FABRIC_ERROR)
    assert failed.status.message is not None and failed.status.message.endswith("(after 1 restart)")
    assert failed.status.restarts == 1 and not failed.has(Submit)


def test_without_recovery_a_fabric_failure_ends_failed() -> None:
    _, failed = running_then_failing(spec(), WATCHDOG)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.NCCL_TIMEOUT)
    assert failed.status.restarts is None


@pytest.mark.parametrize(
    ("line", "summary", "reason"),
    [
        pytest.param(CUDA_OOM, None, R.CUDA_OUT_OF_MEMORY, id="a GPU out of memory is not retried"),
        pytest.param(
            "FileNotFoundError: Prompt dataset path '/data/x.jsonl' does not exist.",
            None,
            R.INPUT_ERROR,
            id="a missing input is not retried",
        ),
        pytest.param(
            "OSError: [Errno 28] No space left on device",
            None,
            R.CHECKPOINT_WRITE_FAILED,
            id="a full disk is not retried",
        ),
        pytest.param(
            "preflight failed: /fsx not mounted", None, R.PREFLIGHT_FAILED, id="a failed preflight is not retried"
        ),
        pytest.param("RuntimeError: boom", None, R.JOB_FAILED, id="an unknown error is not retried"),
        pytest.param(
            WATCHDOG,
            RunSummary(exit_code=1, failure=Failure("RewardServiceFailed", "gave up")),
            "RewardServiceFailed",
            id="the failure file's reason wins over the log",
        ),
    ],
)
def test_failures_a_restart_cannot_fix_are_never_restarted(line: str, summary: RunSummary | None, reason: str) -> None:
    _, failed = running_then_failing(spec({"recovery": {"maxRestarts": 3}}), line, summary=summary)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, reason)
    assert not failed.status.restarts


def test_a_degenerate_output_stop_is_never_restarted() -> None:
    s = spec({"recovery": {"maxRestarts": 3}, "guards": {"consecutiveRollouts": 1}})
    submitted = attempt_step(None, s, 0)
    sid = attempt_sid(submitted.status)
    stop = attempt_step(
        submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3, repetition=0.9)
    )
    assert (stop.status.phase, stop.status.reason) == (Phase.FAILED, R.DEGENERATE_OUTPUT)
    assert StopJob(sid) in stop.actions
    # the stopped job's end (Ray may report it FAILED, with any line in its log) leaves the run as it ended
    after = attempt_step(stop.status, s, 20, job=job(JobState.FAILED, FAILED_WITH + WATCHDOG, submission_id=sid))
    assert (after.status.phase, after.status.reason) == (Phase.FAILED, R.DEGENERATE_OUTPUT)
    assert not after.has(Submit) and not after.status.restarts


def test_a_stall_stop_is_never_restarted() -> None:
    s = spec({"recovery": {"maxRestarts": 3}, "guards": {"stallTimeoutSeconds": 60, "startupGraceSeconds": 0}})
    submitted = attempt_step(None, s, 0)
    sid = attempt_sid(submitted.status)
    seen = attempt_step(submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3))
    stalled = attempt_step(seen.status, s, 100, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3))
    assert (stalled.status.phase, stalled.status.reason) == (Phase.FAILED, R.STALLED)
    after = attempt_step(stalled.status, s, 110, job=job(JobState.FAILED, FAILED_WITH + WATCHDOG, submission_id=sid))
    assert after.status.phase is Phase.FAILED and not after.has(Submit)


def test_a_restart_keeps_the_workers_off_the_node_the_evidence_blames_and_remakes_the_ray_cluster() -> None:
    s = spec({"recovery": {"maxRestarts": 2}})
    workers = (("10.0.1.9", "ip-10-0-1-9.ec2.internal"), ("10.0.1.7", "ip-10-0-1-7.ec2.internal"))
    _, restarting = running_then_failing(s, f"{ECC}\n{WATCHDOG}", worker_nodes=workers)  # its own ECC error on .9
    assert restarting.status.reason == R.RESTARTING and restarting.status.avoided_nodes == ["ip-10-0-1-9.ec2.internal"]
    assert restarting.has(DeleteRayCluster)
    assert restarting.status.message is not None
    assert restarting.status.message.startswith("restart 1 of recovery.maxRestarts 2, from the last checkpoint, after ")
    assert restarting.status.message.endswith(
        "; the next attempt's workers keep off node ip-10-0-1-9.ec2.internal (its own process printed the error)"
    )
    later = attempt_step(restarting.status, s, 30)  # the next attempt is submitted with the node still kept off
    assert later.has(Submit) and later.status.avoided_nodes == ["ip-10-0-1-9.ec2.internal"]


def test_a_failure_whose_line_names_no_worker_restarts_in_the_same_ray_cluster() -> None:
    s = spec({"recovery": {"maxRestarts": 1}})
    _, restarting = running_then_failing(s, WATCHDOG, worker_nodes=(("10.0.9.9", "elsewhere"),))
    assert restarting.status.reason == R.RESTARTING and restarting.status.avoided_nodes is None
    assert not restarting.has(DeleteRayCluster)


NODE_DIED = "The actor died because its node has died. Node Id: 5e1f"


def _stopped_then_failing(s: object, stopped_by: str, line: str, **kw: object) -> Decision:
    """Running at rollout 3; the worker pod is seen terminating (`stopped_by`, its DisruptionTarget reason); then
    it is gone and the job failed with `line`."""
    submitted = attempt_step(None, s, 0)
    sid = attempt_sid(submitted.status)
    held = GpuObservation(8, T0, 60)
    running = attempt_step(
        submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3), gpus=held
    )
    stopping = replace(held, stopped_by=stopped_by, stopped_at=T0 + timedelta(seconds=15))
    seen = attempt_step(
        running.status, s, 20, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3), gpus=stopping
    )
    gone = GpuObservation(0, None)
    return attempt_step(
        seen.status, s, 30, job=job(JobState.FAILED, FAILED_WITH + line, submission_id=sid), gpus=gone, **kw
    )


@pytest.mark.parametrize("stopped_by", ["EvictionByEvictionAPI", "PreemptionByScheduler", "Deleted"])
def test_a_failure_after_a_planned_stop_of_a_worker_restarts_without_counting_against_max_restarts(
    stopped_by: str,
) -> None:
    # A drain (or a scheduler's preemption, or a delete) stops the worker after its preStop save; Ray then fails
    # the job with a lost node. With the default maxRestarts 0 the run resumes from the save all the same.
    s = spec()
    restarting = _stopped_then_failing(s, stopped_by, NODE_DIED)
    assert (restarting.status.phase, restarting.status.reason) == (Phase.PROVISIONING, R.RESTARTING)
    assert restarting.status.restarts is None  # not one of spec.recovery.maxRestarts
    assert restarting.status.message is not None
    assert restarting.status.message.startswith(
        f"restart from the last checkpoint after a worker pod was stopped ({stopped_by}), not counted against "
        "recovery.maxRestarts: NodeLost: "
    )
    assert [e.reason for e in restarting.events if e.reason == R.RESTARTED] == [R.RESTARTED]
    resubmit = attempt_step(restarting.status, s, 40)
    [submit] = [a for a in resubmit.actions if isinstance(a, Submit)]
    assert submit.submission_id.endswith("-a2") and resubmit.status.attempt == 2
    # The next failure with no stop before it counts as usual: none is allowed, so the run fails.
    again = attempt_step(resubmit.status, s, 50, job=job(JobState.RUNNING, submission_id=submit.submission_id))
    failed = attempt_step(
        again.status, s, 60, job=job(JobState.FAILED, FAILED_WITH + NODE_DIED, submission_id=submit.submission_id)
    )
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.NODE_LOST)


@pytest.mark.parametrize("stopped_by", ["TerminationByKubelet", "DeletionByTaintManager"])
def test_a_failure_after_the_kubelet_or_taint_manager_stopped_a_worker_counts_like_any_other(stopped_by: str) -> None:
    # Node pressure or a node gone bad may come again: maxRestarts (0 here) bounds it.
    failed = _stopped_then_failing(spec(), stopped_by, NODE_DIED)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.NODE_LOST)


def test_a_planned_stop_keeps_no_node_off_limits_even_when_the_failure_line_names_it() -> None:
    workers = (("10.0.1.7", "ip-10-0-1-7.ec2.internal"),)
    restarting = _stopped_then_failing(spec(), "EvictionByEvictionAPI", WATCHDOG, worker_nodes=workers)
    assert restarting.status.reason == R.RESTARTING and restarting.status.avoided_nodes is None
    assert not restarting.has(DeleteRayCluster)


def test_a_non_retryable_failure_after_a_planned_stop_still_fails() -> None:
    failed = _stopped_then_failing(spec(), "EvictionByEvictionAPI", CUDA_OOM)
    assert failed.status.phase is Phase.FAILED and failed.status.reason == R.CUDA_OUT_OF_MEMORY


def test_a_stop_first_seen_in_the_reconcile_that_sees_the_failure_counts_as_planned_too() -> None:
    s = spec()
    submitted = attempt_step(None, s, 0)
    sid = attempt_sid(submitted.status)
    held = GpuObservation(8, T0, 60)
    running = attempt_step(
        submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=sid), metrics=healthy(3), gpus=held
    )
    stopping = replace(held, stopped_by="EvictionByEvictionAPI", stopped_at=T0 + timedelta(seconds=15))
    failing = job(JobState.FAILED, FAILED_WITH + NODE_DIED, submission_id=sid)
    restarting = attempt_step(running.status, s, 20, job=failing, gpus=stopping)
    assert (restarting.status.phase, restarting.status.reason) == (Phase.PROVISIONING, R.RESTARTING)


def _watchdogs(*ips: str) -> str:
    return "\n".join(WATCHDOG.replace("pid=4711, ip=10.0.1.7", f"pid={100 + i}, ip={ip}") for i, ip in enumerate(ips))


# (the failed job's log, the nodes the next attempt keeps off). Before, the node of the first line that matched was
# kept off, whoever printed it: a healthy peer for a remote error, the first waiter for a hang.
BLAMED = [
    pytest.param(REMOTE_ERROR.format(pid=4716, ip="10.0.1.7"), None, id="a peer's remote error keeps off no node"),
    pytest.param(_watchdogs("10.0.1.7", "10.0.1.8", "10.0.1.7", "10.0.1.8"), None, id="a hang on every node: none"),
    pytest.param(
        _watchdogs("10.0.1.7", "10.0.1.8", "10.0.1.8", "10.0.1.8"),
        ["node-b"],
        id="most timed-out processes on one node: that node, not the first line's",
    ),
    pytest.param(f"{ECC}\n{WATCHDOG}", ["node-c"], id="a rank's own ECC error before the hang it caused: its node"),
    pytest.param(
        ECC.replace(", ip=10.0.1.9", ""), ["node-d"], id="an ECC error on the driver's node (no ip=): the driver's"
    ),
    pytest.param(NODE_DEAD, ["node-b"], id="the node Ray marked dead"),
]


@pytest.mark.parametrize(("log", "avoided"), BLAMED)
def test_the_next_attempt_keeps_off_only_a_node_the_evidence_blames(log: str, avoided: list[str] | None) -> None:
    _, restarting = running_then_failing(spec({"recovery": {"maxRestarts": 1}}), log, worker_nodes=WORKERS)
    assert restarting.status.reason == R.RESTARTING and restarting.status.avoided_nodes == avoided
    assert restarting.has(DeleteRayCluster) is (avoided is not None)


def _second_failure(second: str) -> Decision:
    s = spec({"recovery": {"maxRestarts": 2}})
    _, first = running_then_failing(s, f"{ECC}\n{WATCHDOG}", worker_nodes=WORKERS)
    assert first.status.avoided_nodes == ["node-c"]
    assert cond(first, ConditionType.COMPLETE) == ("False", R.IN_PROGRESS)
    resubmit = attempt_step(first.status, s, 30)
    [submit] = [a for a in resubmit.actions if isinstance(a, Submit)]
    again = attempt_step(resubmit.status, s, 40, job=job(JobState.RUNNING, submission_id=submit.submission_id))
    failed = job(JobState.FAILED, FAILED_WITH + second, submission_id=submit.submission_id)
    return attempt_step(again.status, s, 50, job=failed, worker_nodes=WORKERS)


# (the second attempt's failure, the nodes the third keeps off, whether its RayCluster is made again). An avoidance
# lasts one attempt: before, a node once blamed stayed off for the rest of the run, and in a pool of the run's
# exact size no later attempt could be scheduled.
EXPIRY = [
    pytest.param(REMOTE_ERROR.format(pid=4716, ip="10.0.1.7"), None, False, id="no node blamed: none kept off"),
    pytest.param(ECC.replace("10.0.1.9", "10.0.1.8"), ["node-b"], True, id="another node blamed: only that one"),
]


@pytest.mark.parametrize(("second", "avoided", "remade"), EXPIRY)
def test_a_node_is_kept_off_for_the_attempt_after_its_failure_only(
    second: str, avoided: list[str] | None, remade: bool
) -> None:
    restarting = _second_failure(second)
    assert restarting.status.reason == R.RESTARTING and restarting.status.restarts == 2
    assert restarting.status.avoided_nodes == avoided and restarting.has(DeleteRayCluster) is remade


def _second_attempt_running(s: object) -> tuple[Decision, str]:
    """Attempt 1 failed after a drain of a worker pod that then stuck terminating (its node's kubelet gone), and
    restarted uncounted; attempt 2 runs at 50 s with that pod still observed."""
    stuck = GpuObservation(8, T0, 60, stopped_by="EvictionByEvictionAPI", stopped_at=T0 + timedelta(seconds=15))
    submitted = attempt_step(None, s, 0)
    sid = attempt_sid(submitted.status)
    running = attempt_step(
        submitted.status, s, 10, job=job(JobState.RUNNING, submission_id=sid), gpus=GpuObservation(8, T0)
    )
    seen = attempt_step(running.status, s, 20, job=job(JobState.RUNNING, submission_id=sid), gpus=stuck)
    restarting = attempt_step(
        seen.status, s, 30, job=job(JobState.FAILED, FAILED_WITH + NODE_DIED, submission_id=sid), gpus=stuck
    )
    assert restarting.status.reason == R.RESTARTING and restarting.status.restarts is None
    resubmit = attempt_step(restarting.status, s, 40, gpus=stuck)
    [submit] = [a for a in resubmit.actions if isinstance(a, Submit)]
    again = attempt_step(
        resubmit.status, s, 50, job=job(JobState.RUNNING, submission_id=submit.submission_id), gpus=stuck
    )
    return again, submit.submission_id


# (the pods the second attempt's failure sees, the run's phase and reason after it, with maxRestarts 0). Before, any
# terminating pod of the run made the failure a planned stop: one pod stuck Terminating left every later failure
# uncounted, restarting for ever.
OPEN_ATTEMPT_STOPS = [
    pytest.param(
        GpuObservation(8, T0, 60, stopped_by="EvictionByEvictionAPI", stopped_at=T0 + timedelta(seconds=15)),
        (Phase.FAILED, R.NODE_LOST),
        id="only the pod of the attempt before, still terminating: counted, none left",
    ),
    pytest.param(
        GpuObservation(8, T0, 60, stopped_by="EvictionByEvictionAPI", stopped_at=T0 + timedelta(seconds=55)),
        (Phase.PROVISIONING, R.RESTARTING),
        id="a pod of this attempt drained: not counted",
    ),
    pytest.param(
        GpuObservation(8, T0, 60, stopped_by="Deleted", stopped_at=T0 + timedelta(seconds=40, milliseconds=300)),
        (Phase.PROVISIONING, R.RESTARTING),
        id="a pod deleted within the second the attempt was submitted: this attempt's",
    ),
]


@pytest.mark.parametrize(("seen", "after"), OPEN_ATTEMPT_STOPS)
def test_only_a_planned_stop_of_the_open_attempt_leaves_its_failure_uncounted(
    seen: GpuObservation, after: tuple[Phase, str]
) -> None:
    s = spec()
    running, sid = _second_attempt_running(s)
    failed = attempt_step(
        running.status, s, 60, job=job(JobState.FAILED, FAILED_WITH + NODE_DIED, submission_id=sid), gpus=seen
    )
    assert (failed.status.phase, failed.status.reason) == after


def test_a_failure_first_seen_ended_is_judged_from_the_end_of_the_attempt_before() -> None:
    # The submission's status write was lost and the job ran and failed between two reconciles: the ledger's last
    # attempt is the one before, ended at the restart (30 s), and the pod it left terminating is not this attempt's.
    s = spec()
    stuck = GpuObservation(8, T0, 60, stopped_by="EvictionByEvictionAPI", stopped_at=T0 + timedelta(seconds=15))
    restarting = _stopped_then_failing(s, "EvictionByEvictionAPI", NODE_DIED)
    assert restarting.status.reason == R.RESTARTING
    unseen = job(JobState.FAILED, FAILED_WITH + NODE_DIED, submission_id=attempt_sid(restarting.status))
    failed = attempt_step(restarting.status, s, 60, job=unseen, gpus=stuck)
    assert (failed.status.attempt, failed.status.phase, failed.status.reason) == (2, Phase.FAILED, R.NODE_LOST)


OOM_AT = T0 + timedelta(seconds=15)
KILLED = ("pod x-gpu-worker-abcde container ray-worker on node node-b", OOM_AT)


def test_a_kubelet_oom_kill_during_the_attempt_is_host_memory_whatever_the_log_shows_and_blames_no_node() -> None:
    # the raylet died with its container: Ray marks the node dead, its peers see remote errors
    log = f"{NODE_DEAD}\n{REMOTE_ERROR.format(pid=4716, ip='10.0.1.7')}"
    s = spec({"recovery": {"maxRestarts": 1}})
    _, restarting = running_then_failing(s, log, worker_nodes=WORKERS, oom_killed=KILLED, logs=LOGS)
    assert (restarting.status.reason, restarting.status.restarts) == (R.RESTARTING, 1)
    assert restarting.status.message is not None
    assert (
        "after HostOutOfMemory: a pod ran out of host memory: the kubelet reports pod x-gpu-worker-abcde container "
        "ray-worker on node node-b OOMKilled at 2026-11-30T12:00:15Z (log tail: ConfigMap " in restarting.status.message
    )
    assert restarting.status.avoided_nodes is None and not restarting.has(DeleteRayCluster)


def test_an_oom_kill_with_no_restart_left_ends_the_run_host_out_of_memory() -> None:
    _, failed = running_then_failing(spec(), REMOTE_ERROR.format(pid=4716, ip="10.0.1.7"), oom_killed=KILLED)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.HOST_OUT_OF_MEMORY)
    assert (
        failed.status.message is not None and "container ray-worker on node node-b OOMKilled" in failed.status.message
    )


def test_an_oom_kill_of_an_attempt_before_says_nothing_of_this_attempts_failure() -> None:
    # attempt 1 was OOM-killed and restarted; the container's lastState keeps saying so through attempt 2
    s = spec({"recovery": {"maxRestarts": 1}})
    _, restarting = running_then_failing(s, NODE_DIED, oom_killed=KILLED)
    assert restarting.status.reason == R.RESTARTING
    resubmit = attempt_step(restarting.status, s, 30, oom_killed=KILLED)
    [submit] = [a for a in resubmit.actions if isinstance(a, Submit)]
    again = attempt_step(resubmit.status, s, 40, job=job(JobState.RUNNING, submission_id=submit.submission_id))
    failing = job(JobState.FAILED, FAILED_WITH + FABRIC, submission_id=submit.submission_id)
    failed = attempt_step(again.status, s, 50, job=failing, oom_killed=KILLED)
    assert (failed.status.phase, failed.status.reason) == (Phase.FAILED, R.FABRIC_ERROR)
