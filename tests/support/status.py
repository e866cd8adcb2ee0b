"""Builders for the status tables: a spec from the base example with a patch, the `Intent` a test builds once, the
`Seen` each reconcile reads (`at(now, ...)`: a `Reading`), jobs and trainer metrics, and the failing job logs the
recovery, forensics and accounting tables share."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import ConditionType, GRPORunStatus, RunLogs, RunPlan
from grpo_operator.cli.loading import parse_run
from grpo_operator.render import names
from grpo_operator.status.decision import CaptureEvidence, Decision
from grpo_operator.status.intent import Intent
from grpo_operator.status.lifecycle import decide
from grpo_operator.status.observation import (
    ClusterObservation,
    JobObservation,
    JobState,
    KueueEviction,
    Seen,
    TrainerMetrics,
)

from tests.support.builders import base, merge

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
READY = ClusterObservation(ready=True)
# Kueue suspended the admitted RayCluster for a workload of higher priority: its Workload's Evicted condition, as
# Kueue v0.17 writes it (pkg/scheduler/preemption: "Preempted to accommodate a workload ...").
PREEMPTED_BY_KUEUE = ClusterObservation(
    ready=False,
    message="waiting for Kueue",
    queue="team-a",
    eviction=KueueEviction(
        "raycluster-x-ray-5f2c1",
        "Preempted",
        "Preempted to accommodate a workload (UID: 4c1e) due to prioritization in the ClusterQueue",
    ),
)
SID = "grpo-x-1"
# A remote reward scored by the run's own reward service (so the service must be ready before the job starts).
REMOTE_REWARD = {"reward": {"type": "remote", "remote": {"replicas": 1}}}


def spec(patch: dict[str, Any] | None = None) -> GRPORunSpec:
    run, problems = parse_run(merge(base(), {"spec": patch or {}}))
    assert run is not None, problems
    return run.spec


def intent(s: GRPORunSpec | None = None, *, suspend: bool = False, **kw: Any) -> Intent:
    """What a run of `s` (the base example by default; with spec.suspend set when `suspend`) asks for: generation 1,
    its job `SID`."""
    s = s if s is not None else spec()
    if suspend:
        s = s.model_copy(update={"suspend": True})
    values: dict[str, Any] = {"spec": s, "generation": 1, "submission_id": SID, **kw}
    return Intent(**values)


class Reading(NamedTuple):
    """What one reconcile read, and when."""

    seen: Seen
    now: datetime


def at(now: datetime = T0, **kw: Any) -> Reading:
    return Reading(Seen(**kw), now)


def step(prev: GRPORunStatus | Decision | None, want: Intent, reading: Reading) -> Decision:
    """The decision of one reconcile after `prev` (a status, or the decision that wrote it)."""
    before = prev.status if isinstance(prev, Decision) else prev
    return decide(before, reading.seen, want, reading.now)


def run_through(want: Intent, *readings: Reading, prev: GRPORunStatus | None = None) -> Decision:
    """Decide each reading in turn from the status the one before wrote."""
    decision: Decision | None = None
    for reading in readings:
        decision = decide(prev, reading.seen, want, reading.now)
        prev = decision.status
    assert decision is not None
    return decision


def job(state: JobState, message: str = "", submission_id: str = SID) -> JobObservation:
    return JobObservation(submission_id, state, message, driver_ip="10.0.0.5")


def healthy(rollout: int, repetition: float = 0.0, reward: float = 0.5) -> TrainerMetrics:
    return TrainerMetrics(rollout=rollout, raw_reward=reward, repetition_frac=repetition)


def cond(decision: Decision, type_: ConditionType | str) -> tuple[str, str]:
    c = next(c for c in decision.status.conditions if c.type == type_)
    return c.status, c.reason


@dataclass(frozen=True)
class Moment(Seen):
    """One reconcile in a whole run's life (the accounting tables): what was read, when, and the little the run
    asked for differently as its life went on (a suspend, each attempt's job id, the operator's price). `live`
    builds each distinct `Intent` once and decides the moments in turn."""

    now: datetime = T0
    submission_id: str = SID
    suspend: bool = False
    created: datetime | None = None
    gpu_hour_price_usd: float | None = None
    plan: RunPlan | None = None


_SEEN = tuple(f.name for f in fields(Seen))


def live(
    moments: list[Moment], prev: GRPORunStatus | None = None, run_spec: GRPORunSpec | None = None
) -> list[Decision]:
    """Decide each moment in turn from the status the one before wrote."""
    base_spec = run_spec if run_spec is not None else spec()
    intents: dict[tuple[Any, ...], Intent] = {}
    decisions = []
    for m in moments:
        key = (m.submission_id, m.suspend, m.created, m.gpu_hour_price_usd, id(m.plan))
        if key not in intents:
            s = base_spec.model_copy(update={"suspend": True}) if m.suspend else base_spec
            intents[key] = intent(
                s,
                submission_id=m.submission_id,
                created=m.created,
                gpu_hour_price_usd=m.gpu_hour_price_usd,
                plan=m.plan,
            )
        seen = Seen(**{name: getattr(m, name) for name in _SEEN})
        decisions.append(decide(prev, seen, intents[key], m.now))
        prev = decisions[-1].status
    return decisions


# --- failed jobs, as Ray and the launcher tell them: shared by the failure, recovery, forensics and accounting tables

FAILED_WITH = "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
WATCHDOG = (
    "(MegatronTrainRayActor pid=4711, ip=10.0.1.7) [rank3]:[E1201 10:00:00.000 ProcessGroupNCCL.cpp:632] [Rank 3]"
    " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=1048576,"
    " NumelOut=1048576, Timeout(ms)=1800000) ran for 1800083 milliseconds before timing out."
)
CUDA_OOM = (
    "(MegatronTrainRayActor pid=4712, ip=10.0.1.8) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
    " 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.06 GiB is free."
)
# torch >= 2.8 raises CUDA errors as torch.AcceleratorError with the runtime's cudaGetErrorString text.
ECC = "(MegatronTrainRayActor pid=4714, ip=10.0.1.9) torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered"
# What the peers of a rank that died print (NCCL's ncclRemoteError, through torch's DistBackendError).
REMOTE_ERROR = (
    "(MegatronTrainRayActor pid={pid}, ip={ip}) torch.distributed.DistBackendError: NCCL error in:"
    " ProcessGroupNCCL.cpp:3353, remote process exited or there was a network error, NCCL version 2.28.9"
)
NODE_DEAD = (
    "The node with node id: 5e1f and address: 10.0.1.8 and node name: 10.0.1.8 has been marked dead because"
    " the detector has missed too many heartbeats from it."
)
FABRIC = (
    "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network error"
)
# (pod IP, node) of the run's Ray workers and of the driver's node.
WORKERS = (("10.0.1.7", "node-a"), ("10.0.1.8", "node-b"), ("10.0.1.9", "node-c"), ("10.0.0.5", "node-d"))
# Where an ended job's log tail is kept.
LOGS = RunLogs(config_map="x-job-logs", key="log", submission_id=SID, bytes=10, truncated=False)


# --- attempts one after another, each reconcile's intent made as the controller makes it (its job id from the
# status before it: render/names.py `submission_id`)

UID = "0123456789abcdef"


def attempt_sid(prev: GRPORunStatus | None) -> str:
    return names.submission_id("x", UID, 1, prev)


def attempt_step(prev: GRPORunStatus | None, want: GRPORunSpec, at_second: int, **seen: Any) -> Decision:
    """The reconcile `at_second` after T0 of a run of `want` after `prev`, on a ready cluster unless said."""
    seen.setdefault("cluster", READY)
    return decide(prev, Seen(**seen), intent(want, submission_id=attempt_sid(prev)), T0 + timedelta(seconds=at_second))


def running_then_failing(want: GRPORunSpec, line: str, **seen: Any) -> tuple[Decision, Decision]:
    """Attempt 1 submitted, running at rollout 3, then failed with `line` in its log."""
    submitted = attempt_step(None, want, 0)
    running = attempt_step(
        submitted.status,
        want,
        10,
        job=job(JobState.RUNNING, submission_id=attempt_sid(submitted.status)),
        metrics=healthy(3),
    )
    sid = running.status.job_submission_id
    assert sid is not None
    failed = attempt_step(
        running.status, want, 20, job=job(JobState.FAILED, FAILED_WITH + line, submission_id=sid), **seen
    )
    return running, failed


# --- evidence bundles (the forensics tables): each reconcile names the ConfigMap of the next bundle as the
# controller does (render/names.py `forensics`: one more than the status lists)

BUNDLE = "x-forensics-1"


def running_job(patch: dict[str, Any] | None = None) -> Decision:
    """A run of the base example (with `patch`) whose job runs at rollout 3."""
    return decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), intent(spec(patch)), T0)


def again(
    prev: GRPORunStatus,
    at_second: int = 30,
    state: JobState = JobState.RUNNING,
    capture: str | None = None,
    **seen: Any,
) -> Decision:
    """The next reconcile of a run at rollout 3, its job `state`, with the user's capture request `capture`."""
    bundle = f"x-forensics-{len(prev.forensics or []) + 1}"
    want = intent(evidence_config_map=bundle, capture_request=capture)
    reading = Seen(cluster=READY, job=job(state), metrics=healthy(3), **seen)
    return decide(prev, reading, want, T0 + timedelta(seconds=at_second))


def captures(d: Decision) -> list[CaptureEvidence]:
    return [a for a in d.actions if isinstance(a, CaptureEvidence)]


def failed_with(line: str, patch: dict[str, Any] | None = None, **seen: Any) -> Decision:
    """A run at rollout 3 whose job then failed with `line` in its log (the tail kept in `LOGS`)."""
    want = intent(spec(patch), evidence_config_map=BUNDLE)
    running = decide(None, Seen(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(3)), want, T0)
    reading = Seen(cluster=READY, job=job(JobState.FAILED, FAILED_WITH + line), logs=LOGS, **seen)
    return decide(running.status, reading, want, T0 + timedelta(seconds=30))
