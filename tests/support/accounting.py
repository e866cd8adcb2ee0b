"""A whole run's life for the accounting tables (tests/status/test_accounting*.py, test_preemption_save.py): queue
-> provision -> run -> suspend -> resume -> preempt -> resume, minute by minute, with the GPU-seconds each attempt
held worked out by hand from the moments' times and the GPUs the bound pods hold."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.status.decision import Decision
from grpo_operator.status.observation import ClusterObservation, GpuObservation, JobState, Resume, RunSummary

from tests.support.status import PREEMPTED_BY_KUEUE, READY, T0, Moment, healthy, job, live, spec

QUEUED = ClusterObservation(ready=False, message="waiting for Kueue", queue="team-a")
NOT_READY = ClusterObservation(ready=False, message="waiting for KubeRay: 0/1 workers ready")
SPEC = spec({"rollout": {"numRollout": 20}, "storage": {"checkpointOnSuspend": False}})
GPUS = 8  # one worker pod of the quickstart run, bound to a p5en node


def at(minute: int, **kw: object) -> Moment:
    return Moment(now=T0 + timedelta(minutes=minute), created=T0, **kw)  # type: ignore[arg-type]


def held(bound_minute: int) -> GpuObservation:
    return GpuObservation(GPUS, T0 + timedelta(minutes=bound_minute))


NONE = GpuObservation(0, None)


def sid(n: int) -> str:
    return f"grpo-x-{n}"


def running(minute: int, n: int, rollout: int) -> Moment:
    return at(
        minute,
        submission_id=sid(n),
        cluster=READY,
        gpus=held(0),
        job=job(JobState.RUNNING, submission_id=sid(n)),
        metrics=healthy(rollout),
    )


def admitted_and_run(n: int, start: int, bound: int) -> list[Moment]:
    """Provision (pods bound at `bound`), submit attempt n at start+5, its first rollout at start+10."""
    return [
        at(start, submission_id=sid(n), cluster=NOT_READY, gpus=held(bound)),
        at(start + 5, submission_id=sid(n), cluster=READY, gpus=held(bound)),
    ]


# queue 0-10; pods bound at 9; submit 1 at 15; rollout 0 at 20, 9 at 50, 11 at 60 when spec.suspend stops it;
# pods gone at 62; resumed at 90 (no cluster yet), pods bound at 93, provisioning at 95, submit 2 at 100; it
# resumes at rollout 10 (checkpoint 9) at 105, reaches 14 at 120; Kueue preempts at 125 (pods gone); readmitted
# at 140 (pods bound at 138), submit 3 at 145, resumes at rollout 13 (checkpoint 12) at 150.
UNTIL_150 = [
    at(0, cluster=QUEUED, gpus=NONE),
    *admitted_and_run(1, 10, 9),
    running(20, 1, 0),
    running(50, 1, 9),
    replace(running(60, 1, 11), suspend=True),
    at(62, submission_id=sid(2), suspend=True, gpus=NONE),
    at(90, submission_id=sid(2), gpus=NONE),
    *admitted_and_run(2, 95, 93),
    replace(running(105, 2, 10), resume=Resume(9, True)),
    running(120, 2, 14),
    at(125, submission_id=sid(3), cluster=PREEMPTED_BY_KUEUE, gpus=NONE),
    *admitted_and_run(3, 140, 138),
    replace(running(150, 3, 13), resume=Resume(12, True)),
]
SUCCEEDS = at(
    170,
    submission_id=sid(3),
    cluster=READY,
    gpus=held(138),
    job=job(JobState.SUCCEEDED, submission_id=sid(3)),
    summary=RunSummary(exit_code=0, first_rollout=13, last_rollout=19, rollouts=(healthy(19),)),
)
FAILS = at(
    160,
    submission_id=sid(3),
    cluster=READY,
    gpus=held(138),
    job=job(JobState.FAILED, "exit code 1", submission_id=sid(3)),
)

# GPU-seconds per attempt, by hand (8 GPUs throughout):
#   attempt 1 takes what the pods held before it: bound 9-10 (8x60) + 10-15 (8x300) = 2880; then 15-20: 2400
#     -> 5280 before its first rollout; 20-60: 8x2400 = 19200 of rollouts 0..11 (12), 2 of them lost (attempt 2
#     resumed at 10): their share 19200x2/12 = 3200; held 24480.
#   attempt 2 takes 60-62 (pods terminating, 960) + bound 93-95 (960) + 95-100 (2400) = 4320; 100-105: 2400 ->
#     6720 before its first rollout (lost: a resume); 105-125: 9600 of rollouts 10..14 (5), 2 lost (attempt 3
#     resumed at 13): 9600x2/5 = 3840; held 16320.
#   attempt 3 takes bound 138-140 (960) + 140-145 (2400) = 3360; 145-150: 2400 -> 5760 before its first rollout
#     (lost: a resume); then 150-170 of rollouts 13..19: 9600 (Succeeded), or 150-160: 4800 (Failed: all lost).
A1, A2 = 24480, 16320
A1_LOST, A1_GOOD = 3200, 19200 - 3200
A2_LOST, A2_GOOD = 3840 + 6720, 9600 - 3840


def through(moments: list[Moment], prev: GRPORunStatus | None = None, run_spec: GRPORunSpec = SPEC) -> list[Decision]:
    return live(moments, prev, run_spec)
