"""What one reconcile read about a run's children, its Ray job and its trainer (`Seen`): plain values, no I/O. The
reconciler fills them in from the API server, the Ray Jobs API and the metrics endpoints; `status.lifecycle`
turns them, with what the run asks for (`status.intent.Intent`), into a decision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from grpo_operator.api.status import Reason, RunLogs


class JobState(StrEnum):
    """Ray's JobStatus values."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def active(self) -> bool:
        return self in (JobState.PENDING, JobState.RUNNING)


@dataclass(frozen=True)
class KueueEviction:
    """The Evicted condition of the Kueue Workload of a run's RayCluster, in Kueue's words."""

    workload: str
    reason: str  # Preempted, PodsReadyTimeout, ClusterQueueStopped, Deactivated, DeactivatedDueTo..., ...
    message: str = ""


@dataclass(frozen=True)
class ClusterObservation:
    ready: bool
    message: str = ""
    queue: str | None = None  # the Kueue LocalQueue the suspended RayCluster waits in for admission
    eviction: KueueEviction | None = None  # why Kueue suspended it again, when its Workload says so
    # "pod <name> on node <node>: preflight failed: <check>: <why>" of a worker whose preflight init container failed
    preflight_failure: str = ""


@dataclass(frozen=True)
class RewardObservation:
    ready: bool
    reason: Reason = Reason.READY
    message: str = ""


@dataclass(frozen=True)
class JobObservation:
    submission_id: str
    state: JobState
    message: str = ""
    driver_ip: str | None = None
    submitted_at: datetime | None = None  # Ray's own record of the job's start (its JobInfo.start_time)


@dataclass(frozen=True)
class GpuObservation:
    """The GPUs the run's pods hold: the GPU requests of its pods bound to a node and not finished, when the
    earliest of them was bound (its PodScheduled condition), the shortest grace period among them (what
    bounds a save before they go), and the first of them to be stopped while bound, as the API server reports them."""

    gpus: int = 0
    bound_at: datetime | None = None
    grace_seconds: int | None = None
    # The earliest of them that is terminating: why, in Kubernetes's words (its DisruptionTarget condition's
    # reason, e.g. EvictionByEvictionAPI for a drain; Deleted without one), and since when.
    stopped_by: str | None = None
    stopped_at: datetime | None = None


@dataclass(frozen=True)
class EvalReading:
    """One evaluation of one eval set as miles logs it (`eval/<name>`, `-truncated_ratio`, `-none_reward_ratio`)."""

    name: str
    rollout: int  # miles's eval/step: the rollout after which it evaluated
    score: float | None = None
    truncated_ratio: float | None = None
    none_reward_ratio: float | None = None


@dataclass(frozen=True)
class Outputs:
    """What the launcher found the run wrote: the tracker's last checkpoint and the Hugging Face export."""

    checkpoint_iteration: int | None = None
    checkpoint_path: str | None = None
    huggingface_path: str | None = None
    huggingface_verified: bool | None = None


@dataclass(frozen=True)
class TrainerMetrics:
    """The gauges miles's Prometheus collector serves (`miles_metric_<key>`), for one run."""

    rollout: int | None = None  # None: the endpoint answered without gauges (miles has logged no rollout yet)
    raw_reward: float | None = None
    repetition_frac: float | None = None
    truncated_ratio: float | None = None
    step_time_seconds: float | None = None
    evals: tuple[EvalReading, ...] = ()  # the latest evaluation of each eval set the gauges hold


@dataclass(frozen=True)
class Failure:
    """Why a component inside miles ended the run on purpose (the launcher's failure file)."""

    reason: str
    message: str


@dataclass(frozen=True)
class RunSummary:
    """The launcher's end-of-run record (`grpo_operator.status.summary` describes the line it comes from)."""

    exit_code: int | None = None
    first_rollout: int | None = None
    last_rollout: int | None = None
    rollouts: tuple[TrainerMetrics, ...] = ()
    provenance: dict[str, str] = field(default_factory=dict)
    failure: Failure | None = None
    evals: tuple[EvalReading, ...] = ()  # every evaluation the launcher saw miles log, in order
    outputs: Outputs | None = None

    @property
    def last(self) -> TrainerMetrics | None:
        return self.rollouts[-1] if self.rollouts else None


@dataclass(frozen=True)
class Resume:
    """The launcher's `GRPO_RESUME` line of the job running now: the checkpoint miles resumes from."""

    iteration: int | None  # the tracker's iteration under --load (miles starts at it + 1); None: from nothing
    data_state: bool  # whether the rollout data state of that iteration is there (else prompts restart at sample 0)


@dataclass(frozen=True)
class Seen:
    """What one reconcile read of the run's children, its Ray job and its trainer, and nothing else: what the run
    asks for and what the operator made of it are `status.intent.Intent`. Absent: not read this reconcile."""

    token_secret: bool = True  # the run's Ray auth token Secret exists
    cluster: ClusterObservation | None = None
    reward: RewardObservation | None = None
    job: JobObservation | None = None
    ray_unavailable: str | None = None  # why the Ray Jobs API could not be asked for the job (then `job` is unknown)
    # While Kueue holds an evicted run: the job of the attempt the eviction ended (status.accounting's last attempt),
    # still running where its pods keep their grace; stopped once they are gone (status/admission.py).
    evicted_job: JobObservation | None = None
    checkpoint_job: JobState | None = None
    metrics: TrainerMetrics | None = None
    metrics_error: str | None = None  # the trainer's metrics endpoint could not be read this time
    summary: RunSummary | None = None  # read from the job's log once the job ended
    resume: Resume | None = None  # read from the running job's log until the status records it
    logs: RunLogs | None = None  # where the ended job's log tail, read this reconcile, is kept
    log_text: str = field(default="", repr=False)  # that tail itself (bounded as kept), for `status.failures`
    trainer_image: str | None = None
    trainer_image_id: str | None = None
    gpus: GpuObservation | None = None  # None: not observed this reconcile (the GPUs held are taken as unchanged)
    worker_nodes: tuple[tuple[str, str], ...] = ()  # (pod IP, node name) of each Ray worker pod
    # The latest container of the run's pods the kernel killed for memory ("pod <p> container <c> on node <n>", and
    # when it ended), as the kubelet reports it: its state or last state `terminated.reason: OOMKilled`.
    oom_killed: tuple[str, datetime] | None = None
    # Since when the RayCluster's longest-waiting pod is unschedulable (its PodScheduled condition False,
    # Unschedulable); None while none is, or while the RayCluster is being deleted.
    unschedulable_since: datetime | None = None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
