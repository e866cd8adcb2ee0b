"""`GRPORun.status`, the run plan and the status vocabulary: every key, phase, reason and condition type the
operator writes is declared here (the API server silently prunes undeclared status keys, and a reason typed as a
bare string elsewhere would be a new reason by typo). `PHASE_REASONS` and `CONDITION_REASONS` say which reasons
each phase and condition can carry; README's status tables are checked against them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from grpo_operator.api.base import ApiModel
from grpo_operator.api.runtime import FabricType, RuntimeRecord

Text = Annotated[str, StringConstraints(max_length=32768)]


class Phase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class ConditionType(StrEnum):
    """In the order `kubectl describe` shows them."""

    VALIDATED = "Validated"
    RESOURCES_READY = "ResourcesReady"
    REWARD_SERVICE_READY = "RewardServiceReady"
    JOB_RUNNING = "JobRunning"
    METRICS_AVAILABLE = "MetricsAvailable"
    HEALTHY = "Healthy"
    COMPLETE = "Complete"


class Reason(StrEnum):
    """Every reason of a phase or a condition (a failure file's own reason is added to `Failed`)."""

    # phases
    PROVISIONING = "Provisioning"
    QUEUED = "Queued"
    RUNTIME_NOT_FOUND = "RuntimeNotFound"
    API_SERVER_UNAVAILABLE = "APIServerUnavailable"  # a dry run of a child answered 5xx or 429 (status/admission.py)
    SUBMITTING = "Submitting"
    WAITING_FOR_DRIVER = "WaitingForDriver"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    # Kueue's eviction of an admitted run, by its Workload's Evicted condition (status/admission.py)
    PREEMPTED = "Preempted"
    PODS_READY_TIMEOUT = "PodsReadyTimeout"
    QUEUE_STOPPED = "QueueStopped"
    DEACTIVATED = "Deactivated"
    EVICTED = "Evicted"
    SUCCEEDED = "Succeeded"
    INVALID_SPEC = "InvalidSpec"
    DEGENERATE_OUTPUT = "DegenerateOutput"
    STALLED = "Stalled"
    UNVERIFIED = "Unverified"
    PREFLIGHT_FAILED = "PreflightFailed"
    JOB_FAILED = "JobFailed"
    JOB_STOPPED = "JobStopped"
    # failure classes read from the ended job's log (status/failures.py)
    NCCL_TIMEOUT = "NCCLTimeout"
    FABRIC_ERROR = "FabricError"
    NODE_LOST = "NodeLost"
    ROLLOUT_ENGINE_DIED = "RolloutEngineDied"
    HOST_OUT_OF_MEMORY = "HostOutOfMemory"
    CUDA_OUT_OF_MEMORY = "CUDAOutOfMemory"
    REWARD_SERVICE_FAILED = "RewardServiceFailed"
    INPUT_ERROR = "InputError"
    CHECKPOINT_WRITE_FAILED = "CheckpointWriteFailed"
    HEAD_LOST = "HeadLost"  # the Ray head answers but the attempt's job is gone: the head (and its job table) was lost
    GPU_HARDWARE_ERROR = "GPUHardwareError"
    CUDA_KERNEL_ERROR = "CUDAKernelError"
    # a worker pod waited unschedulable past spec.recovery.provisioningTimeoutSeconds (status/recovery.py)
    PROVISIONING_TIMEOUT = "ProvisioningTimeout"
    # the eval score fell below its best while the training reward did not: guards.evalRegression (status/evaluation.py)
    EVAL_REGRESSED = "EvalRegressed"
    # spec.export.huggingface: the last Hugging Face export is missing or empty (the launcher's check)
    EXPORT_MISSING = "ExportMissing"
    # conditions
    VALID = "Valid"
    RUNTIME_ALTERED = "RuntimeAltered"  # status.runtime failed its digest (also its Warning event)
    READY = "Ready"
    WAITING_FOR_ADMISSION = "WaitingForAdmission"
    NOT_REQUIRED = "NotRequired"
    NOT_CREATED = "NotCreated"
    NOT_READY = "NotReady"
    SCORING_ERRORS = "ScoringErrors"
    NOT_SUBMITTED = "NotSubmitted"
    PENDING = "Pending"
    STOPPED = "Stopped"
    FAILED = "Failed"
    NOT_RUNNING = "NotRunning"
    NOT_SCRAPED = "NotScraped"
    SCRAPED = "Scraped"
    NO_ROLLOUT_YET = "NoRolloutYet"
    SCRAPE_FAILED = "ScrapeFailed"
    SCRAPE_OUTAGE = "ScrapeOutage"
    RUN_SUMMARY = "RunSummary"
    NO_RUN_SUMMARY = "NoRunSummary"
    NO_METRICS = "NoMetrics"
    METRICS_HEALTHY = "MetricsHealthy"
    IN_PROGRESS = "InProgress"
    # events
    LOGS_KEPT = "LogsKept"
    ATTEMPT_ENDED = "AttemptEnded"
    ROLLOUTS_LOST = "RolloutsLost"
    RESTARTED = "Restarted"
    EVIDENCE_CAPTURED = "EvidenceCaptured"
    SAVED_BEFORE_STOP = "SavedBeforeStop"
    NOT_SAVED_BEFORE_STOP = "NotSavedBeforeStop"
    CAPTURE_REQUESTED = "CaptureRequested"  # a bundle's trigger: the grpo.dev/capture annotation
    CAPTURE_SKIPPED = "CaptureSkipped"
    CAPTURE_FAILED = "CaptureFailed"  # an evidence bundle or a log tail the API server would not store
    EVAL_NOT_SCORED = "EvalNotScored"  # an evaluation whose rewards were mostly None (miles's none_reward_ratio)


R = Reason
KUEUE_EVICTIONS = (R.PREEMPTED, R.PODS_READY_TIMEOUT, R.QUEUE_STOPPED, R.DEACTIVATED, R.EVICTED)
FAILURE_CLASSES = (
    R.NCCL_TIMEOUT,
    R.FABRIC_ERROR,
    R.NODE_LOST,
    R.ROLLOUT_ENGINE_DIED,
    R.HOST_OUT_OF_MEMORY,
    R.CUDA_OUT_OF_MEMORY,
    R.REWARD_SERVICE_FAILED,
    R.INPUT_ERROR,
    R.CHECKPOINT_WRITE_FAILED,
    R.GPU_HARDWARE_ERROR,
    R.CUDA_KERNEL_ERROR,
)
_ENDINGS = (
    R.DEGENERATE_OUTPUT,
    R.STALLED,
    R.EVAL_REGRESSED,
    R.EXPORT_MISSING,
    R.UNVERIFIED,
    R.PREFLIGHT_FAILED,
    R.PROVISIONING_TIMEOUT,
    *FAILURE_CLASSES,
    R.HEAD_LOST,
    R.JOB_FAILED,
    R.JOB_STOPPED,
)
PHASE_REASONS: dict[Phase, tuple[Reason, ...]] = {
    Phase.PENDING: (R.PROVISIONING, R.QUEUED, R.RUNTIME_NOT_FOUND, R.API_SERVER_UNAVAILABLE),
    Phase.PROVISIONING: (R.PROVISIONING, R.SUBMITTING, R.WAITING_FOR_DRIVER, R.RESTARTING),
    Phase.RUNNING: (R.RUNNING, R.SUSPENDING, R.DEGENERATE_OUTPUT, R.STALLED, R.EVAL_REGRESSED),
    Phase.SUSPENDED: (R.SUSPENDED, *KUEUE_EVICTIONS),
    Phase.SUCCEEDED: (R.SUCCEEDED,),
    Phase.FAILED: (R.INVALID_SPEC, *_ENDINGS),
}
CONDITION_REASONS: dict[ConditionType, tuple[Reason, ...]] = {
    ConditionType.VALIDATED: (R.VALID, R.INVALID_SPEC, R.RUNTIME_ALTERED),
    ConditionType.RESOURCES_READY: (R.READY, R.PROVISIONING, R.SUSPENDED, R.WAITING_FOR_ADMISSION),
    ConditionType.REWARD_SERVICE_READY: (R.NOT_REQUIRED, R.NOT_CREATED, R.NOT_READY, R.SCORING_ERRORS, R.READY),
    ConditionType.JOB_RUNNING: (
        R.NOT_SUBMITTED,
        R.PENDING,
        R.RUNNING,
        R.SUSPENDING,
        R.SUSPENDED,
        *KUEUE_EVICTIONS,
        R.STOPPED,
        R.SUCCEEDED,
        R.FAILED,
    ),
    ConditionType.METRICS_AVAILABLE: (
        R.NOT_RUNNING,
        R.NOT_SCRAPED,
        R.SCRAPED,
        R.NO_ROLLOUT_YET,
        R.SCRAPE_FAILED,
        R.SCRAPE_OUTAGE,
        R.RUN_SUMMARY,
        R.NO_RUN_SUMMARY,
    ),
    ConditionType.HEALTHY: (R.NO_METRICS, R.METRICS_HEALTHY, R.DEGENERATE_OUTPUT, R.STALLED, R.EVAL_REGRESSED),
    ConditionType.COMPLETE: (R.IN_PROGRESS, R.SUCCEEDED, *_ENDINGS),
}


class Condition(ApiModel):
    """metav1.Condition."""

    type: ConditionType = Field(description="Condition type, e.g. Validated.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: Annotated[str, StringConstraints(max_length=1024)] = Field(description="One-word CamelCase reason.")
    message: Text = Field(default="", description="Human-readable detail.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(default=None, ge=0, description="Spec generation the condition reflects.")


class MetricsSource(StrEnum):
    SCRAPE = "Scrape"  # miles's gauges
    RUN_SUMMARY = "RunSummary"  # the launcher's end-of-run record


class RunMetrics(ApiModel):
    rollout: int | None = Field(default=None, description="Last rollout step reported by the trainer.")
    raw_reward: float | None = Field(default=None, description="rollout/raw_reward of the last rollout.")
    repetition_frac: float | None = Field(default=None, description="rollout/repetition_frac of the last rollout.")
    truncated_ratio: float | None = Field(default=None, description="rollout/truncated_ratio of the last rollout.")
    step_time_seconds: float | None = Field(default=None, description="perf/step_time of the last step.")
    updated_at: str | None = Field(default=None, description="When the metrics were scraped (RFC 3339).")
    source: MetricsSource | None = Field(
        default=None, description="Scrape: miles's gauges; RunSummary: the launcher's end-of-run record."
    )


class GuardMemory(ApiModel):
    """What the guards remember of the current attempt between reconciles (status/guards.py reads and writes every
    field; the rest of the operator keeps or resets the object whole: a new attempt starts from nothing)."""

    last_rollout: int | None = Field(
        default=None, description="Last rollout the guards counted in the current attempt (they restart on resume)."
    )
    last_progress_time: str | None = Field(default=None, description="When the rollout step last advanced (RFC 3339).")
    repetition_streak: int = Field(default=0, ge=0, description="Consecutive rollouts above the repetition guard.")


# The guards' memory as operators before status.guards kept it, flat in the status: (wire key, Python name, the
# GuardMemory field). Read into status.guards from a run such an operator wrote; never written (a write removes them).
_FLAT_GUARDS = (
    ("guardRollout", "guard_rollout", "last_rollout"),
    ("lastProgressTime", "last_progress_time", "last_progress_time"),
    ("repetitionStreak", "repetition_streak", "repetition_streak"),
)
_FLAT_NOTE = "Deprecated: written by operators before status.guards; read into guards, never written."


class EvalPoint(ApiModel):
    """One scored evaluation."""

    rollout: int = Field(description="The rollout after which miles evaluated (its eval/step).")
    score: float = Field(description="eval/<name>: mean reward over the eval set (a None reward counted as 0).")
    train_reward: float | None = Field(
        default=None, description="rollout/raw_reward of that rollout, when observed (none for the baseline)."
    )


class EvalSetStatus(ApiModel):
    """One eval set's scores, as miles logs them (docs/integrations/miles.md: evaluation)."""

    name: str = Field(description="The eval set (spec.eval.name): miles's eval/<name>.")
    baseline: float | None = Field(default=None, description="The first score observed (before training, by default).")
    baseline_rollout: int | None = Field(default=None, description="The rollout of the baseline.")
    last: float | None = Field(default=None, description="The latest score.")
    last_rollout: int | None = Field(default=None, description="The rollout of the latest score.")
    best: float | None = Field(default=None, description="The highest score so far.")
    best_rollout: int | None = Field(default=None, description="The rollout of the best score (the first, on a tie).")
    truncated_ratio: float | None = Field(
        default=None, description="eval/<name>-truncated_ratio of the latest evaluation."
    )
    none_reward_ratio: float | None = Field(
        default=None,
        description="eval/<name>-none_reward_ratio of the latest evaluation: the share of rewards that were None.",
    )
    not_scored_rollout: int | None = Field(
        default=None,
        description="The latest evaluation left unscored: more than half its rewards were None (a warning event).",
    )
    regression_streak: int = Field(
        default=0, ge=0, description="Scored evaluations in a row past guards.evalRegression.maxDrop below the best."
    )
    history: list[EvalPoint] = Field(
        default_factory=list, max_length=20, description="The latest scored evaluations, oldest first."
    )


class RunOutputs(ApiModel):
    """Where the trained model is: miles's last Megatron checkpoint and the Hugging Face export."""

    checkpoint_iteration: int | None = Field(
        default=None, description="The last checkpoint written: Megatron's tracker latest_checkpointed_iteration.txt."
    )
    checkpoint_path: str | None = Field(default=None, description="Its directory: <checkpointDir>/iter_<7 digits>.")
    huggingface_path: str | None = Field(
        default=None, description="The last Hugging Face export (spec.export.huggingface), once the launcher found it."
    )
    huggingface_verified: bool | None = Field(
        default=None, description="Whether it has config.json and non-empty weight files (the launcher's check)."
    )


class RunProvenance(ApiModel):
    """What actually ran: the trainer image from the pods' status, the rest from the launcher's end-of-run summary."""

    image: str | None = Field(default=None, description="Trainer image reference of the worker pods.")
    image_id: str | None = Field(
        default=None, description="Image digest the kubelet reports running (pod status imageID)."
    )
    miles_commit: str | None = Field(default=None, description="miles checkout in the image (git HEAD).")
    megatron_commit: str | None = Field(default=None, description="Megatron-LM checkout in the image (git HEAD).")
    ray: str | None = Field(default=None, description="Ray version in the image.")
    sglang: str | None = Field(default=None, description="SGLang version in the image.")
    megatron: str | None = Field(default=None, description="megatron-core version in the image.")
    torch: str | None = Field(default=None, description="PyTorch version in the image.")
    launcher: str | None = Field(default=None, description="grpo_launcher version in the image.")


class RunLogs(ApiModel):
    """Where the last job's log tail is kept once the RayCluster (and Ray's own copy of the log) is gone."""

    config_map: str = Field(description="ConfigMap, owned by the run, holding the log tail.")
    key: str = Field(description="Key of the log tail in that ConfigMap.")
    submission_id: str = Field(description="Ray job the log belongs to.")
    bytes: int = Field(ge=0, description="Bytes kept.")
    truncated: bool = Field(description="Whether older output was cut to keep the tail bounded.")


class EvidenceBundle(ApiModel):
    """What was captured from a job: Ray's view, the processes' stacks, log tails."""

    time: str = Field(description="When it was captured (RFC 3339).")
    trigger: str = Field(
        description="Why: the guard that tripped (Stalled), the job's failure class (NCCLTimeout), or CaptureRequested."
    )
    submission_id: str = Field(description="Ray job it was captured from.")
    config_map: str = Field(description="ConfigMap, owned by the run, holding the bundle (index.txt lists it).")
    capture_failed: str | None = Field(
        default=None,
        description="Why the bundle could not be written, in the API server's words: its ConfigMap does not exist. "
        "The stop after it went ahead all the same.",
    )


class ActorMemory(ApiModel):
    """The training estimate per GPU, by component (planning/memory.py says how each is made)."""

    weights_gib: float = Field(description="bf16 weights of the actor's shard.")
    grads_gib: float = Field(
        description="fp32 gradient buffers of the shard (Megatron under --bf16; not sharded by DP)."
    )
    optimizer_gib: float = Field(
        description="fp32 main weights and Adam moments, sharded by DP (distributed optimizer)."
    )
    activations_gib: float = Field(description="Peak of one micro-batch above the resident state: the larger phase.")
    checkpoints_gib: float = Field(description="Recompute checkpoints: 2 x hidden bytes per token per layer.")
    layer_working_set_gib: float = Field(description="One layer's recompute and backward.")
    logits_gib: float = Field(
        description="The fp32 log-prob phase: 12 bytes x tokens x vocabulary / TP (16 when temperature is not 1)."
    )
    step_transient_gib: float = Field(
        description="Optimizer step temporaries (taken instead of activations when larger)."
    )
    context_gib: float = Field(description="CUDA context, cuBLAS workspaces and NCCL.")
    allocator_margin_gib: float = Field(description="Explicit allowance for the caching allocator's unused reserve.")
    total_gib: float = Field(description="The per-GPU peak of training, margin included.")
    calibration: str = Field(description="What the estimate rests on, or 'not calibrated'.")
    calibration_error_percent: dict[str, float] = Field(
        default_factory=dict,
        description="Largest error against the measurements, per component (empty: not calibrated).",
    )


class RolloutMemory(ApiModel):
    static_gib: float = Field(description="SGLang's static reservation: memFraction x GPU memory.")
    weights_gib: float = Field(description="bf16 weights of one engine shard.")
    kv_cache_gib: float = Field(description="What the static reservation leaves for the KV cache.")
    kv_cache_tokens: int = Field(description="Tokens the KV cache holds.")
    free_gib: float = Field(description="GPU memory outside the static reservation.")
    needed_free_gib: float = Field(
        description="What must stay free: SGLang workspace, and the offloaded actor's residue when colocated."
    )


class StepTimeSource(StrEnum):
    OBSERVED = "Observed"  # p95 of the last ended attempt's rollouts (status.accounting.attempts[].rolloutSeconds)
    SPEC = "Spec"  # spec.preemption.stepSeconds, before any rollout time is observed


class PreemptionGrace(ApiModel):
    """A worker pod's terminationGracePeriodSeconds: finish the rollout step, save, and a margin to exit."""

    step_seconds: int = Field(ge=0, description="A rollout step's time: observed p95, or the spec's before one.")
    step_source: StepTimeSource = Field(description="Observed or Spec.")
    save_seconds: int = Field(ge=0, description="checkpointGiB over spec.storage.writeGBps.")
    margin_seconds: int = Field(ge=0, description="Time left after the hook gives up, for the pod to exit.")
    wanted_seconds: int = Field(ge=0, description="step + save + margin.")
    seconds: int = Field(ge=0, description="wantedSeconds capped by spec.preemption.maxGraceSeconds.")


class RunPlan(ApiModel):
    """What the run needs and whether it fits: derived from the spec alone."""

    instance_type: str = Field(description="Worker instance type.")
    gpu_model: str = Field(description="GPU model of the instance type.")
    placement: str = Field(description="Colocated or Disaggregated.")
    worker_replicas: int = Field(description="Worker pods (one per node).")
    gpus_per_node: int = Field(description="GPUs requested per worker pod (miles --num-gpus-per-node).")
    actor_gpus: int = Field(description="GPUs of the training actor.")
    rollout_gpus: int = Field(description="GPUs of the rollout engines.")
    rollout_engines: int = Field(description="SGLang engines.")
    total_gpus: int = Field(description="GPUs requested in total.")
    total_nodes: int = Field(description="GPU nodes used.")
    data_parallel: int = Field(description="Megatron data-parallel size.")
    fabric: FabricType = Field(default=FabricType.EFA, description="The instance type's fabric (its type).")
    fabric_devices_per_node: int = Field(
        description="Devices of the fabric's resource requested per worker pod (0 on a single node)."
    )
    efa_per_node: int = Field(
        description="Deprecated alias of fabricDevicesPerNode (it held every fabric's count), kept for one release."
    )
    shm_gib: int = Field(description="/dev/shm size of a worker pod.")
    ray_resources: dict[str, float] = Field(description="Custom Ray resources of each worker.")
    distributed_optimizer: bool = Field(description="Always true: miles turns the distributed optimizer on for adam.")
    params_billions: float = Field(description="Model parameters, computed from the architecture.")
    actor_gib_per_gpu: float = Field(description="Estimated training peak per GPU.")
    rollout_gib_per_gpu: float = Field(description="Estimated rollout reservation per GPU.")
    min_free_gpu_gib: float = Field(description="Free GPU memory the preflight requires on each GPU.")
    gpu_gib: float = Field(description="Usable memory of one GPU.")
    host_gib_per_node: float = Field(description="Pinned host memory per node (reference weights, offloaded state).")
    host_capacity_gib: float = Field(description="Host memory of one node.")
    checkpoint_gib: float = Field(description="Size of one training checkpoint (weights and optimizer state).")
    checkpoint_dir: str = Field(description="Resolved checkpoint directory.")
    tensorboard_dir: str = Field(description="Resolved TensorBoard directory.")
    save_interval: int = Field(description="Resolved save interval in rollouts.")
    preemption_grace: PreemptionGrace = Field(description="The worker pods' grace period to save before they go.")
    actor_memory: ActorMemory = Field(description="Breakdown of the training estimate.")
    rollout_memory: RolloutMemory = Field(description="Breakdown of the rollout estimate.")
    fits: bool = Field(description="Whether the run fits in GPU and host memory.")

    @model_validator(mode="before")
    @classmethod
    def _devices_from_the_old_name(cls, data: Any) -> Any:
        # A plan stored before fabricDevicesPerNode existed (status.plan of a run in flight) has efaPerNode only.
        if isinstance(data, dict) and "fabricDevicesPerNode" not in data and "fabric_devices_per_node" not in data:
            old = data.get("efaPerNode", data.get("efa_per_node"))
            if old is not None:
                data = {**data, "fabricDevicesPerNode": old}
        return data


class StopReason(StrEnum):
    """What stopped a worker pod while its attempt ran: the reason of the `DisruptionTarget` condition Kubernetes
    sets before it deletes the pod (docs/integrations/kubernetes.md), or Deleted when there is none."""

    EVICTION = "EvictionByEvictionAPI"  # the Eviction API: `kubectl drain`, a node termination handler
    PREEMPTION = "PreemptionByScheduler"
    TAINT = "DeletionByTaintManager"
    KUBELET = "TerminationByKubelet"  # node pressure, node shutdown
    POD_GC = "DeletionByPodGC"
    DELETED = "Deleted"  # no condition: `kubectl delete pod`, its owner's delete


class SaveOutcome(StrEnum):
    SAVED = "Saved"  # the next attempt resumed after the last rollout observed when this one was asked to stop
    NOT_SAVED = "NotSaved"  # it resumed before: no checkpoint after that rollout was made before the pods went


class AttemptSave(ApiModel):
    """Whether a suspended or preempted attempt, or one whose worker pod was stopped, saved before its worker pods
    went, as the next attempt showed."""

    outcome: SaveOutcome = Field(description="Saved or NotSaved.")
    rollout: int = Field(description="Checkpoint the next attempt loaded (its first rollout - 1; -1: none).")
    seconds: int | None = Field(
        default=None,
        ge=0,
        description="From the attempt's end (or its worker pod's stop) to its worker pods gone, as observed: the save "
        "and the preStop hooks' wait, bound by the grace period.",
    )
    grace_seconds: int | None = Field(
        default=None, ge=0, description="The worker pods' grace period when the attempt ended (its graceSeconds)."
    )
    data_state: bool | None = Field(
        default=None,
        description="Whether miles's rollout data state of that checkpoint was there when the next attempt started "
        "(false: miles restarted its prompt order at sample 0).",
    )


class AttemptAccount(ApiModel):
    """One attempt (one Ray job) as observed: when it started, first reported a rollout and ended, and the GPU
    time its worker pods held while it was the run's attempt (status/accounting.py says how each is made)."""

    attempt: int = Field(ge=1, description="Attempt number (status.attempt when it started).")
    submission_id: str | None = Field(default=None, description="Ray job submission id of the attempt.")
    started: str = Field(description="When the operator submitted (or first saw) the attempt's job (RFC 3339).")
    first_rollout_time: str | None = Field(
        default=None, description="When a rollout of this attempt was first observed (RFC 3339)."
    )
    time_to_first_rollout_seconds: int | None = Field(
        default=None, ge=0, description="From started to the first rollout observed."
    )
    first_rollout: int | None = Field(
        default=None, description="Lowest rollout id observed (a resume starts at the loaded checkpoint + 1)."
    )
    last_rollout: int | None = Field(default=None, description="Highest rollout id observed.")
    last_rollout_time: str | None = Field(default=None, description="When lastRollout was first observed (RFC 3339).")
    rollout_seconds: list[int] = Field(
        default_factory=list,
        max_length=20,
        description="Seconds per rollout between its recent advances observed, newest last; once it ends, their "
        "p95 sizes the next pods' grace period.",
    )
    ended: str | None = Field(default=None, description="When the attempt ended (RFC 3339).")
    end_phase: Phase | None = Field(default=None, description="The run's phase when the attempt ended.")
    end_reason: str | None = Field(default=None, description="The run's reason when the attempt ended.")
    gpus: int = Field(default=0, ge=0, description="Most GPUs its bound worker pods requested at once.")
    gpu_seconds: int = Field(
        default=0, ge=0, description="GPU-seconds held while it was the attempt (its provisioning included)."
    )
    gpu_hours: float = Field(default=0.0, ge=0, description="gpuSeconds / 3600.")
    gpu_seconds_to_first_rollout: int | None = Field(
        default=None, ge=0, description="GPU-seconds held before its first rollout was observed."
    )
    rollouts_completed: int = Field(default=0, ge=0, description="lastRollout - firstRollout + 1.")
    rollouts_lost: int | None = Field(
        default=None,
        ge=0,
        description="Rollouts after the checkpoint the next attempt loaded (its firstRollout - 1); all of a "
        "Failed attempt's; unknown until then.",
    )
    pods_gone_seconds: int | None = Field(
        default=None,
        ge=0,
        description="From its end, or from its worker pod's stop (stoppedAt), to its worker pods' GPUs released, as "
        "observed.",
    )
    grace_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Its worker pods' grace period (their terminationGracePeriodSeconds), as observed.",
    )
    stopped_by: str | None = Field(
        default=None,
        description="Why a worker pod was stopped while the attempt ran, in Kubernetes's words: its DisruptionTarget "
        "condition's reason (EvictionByEvictionAPI: a drain; PreemptionByScheduler; DeletionByTaintManager; "
        "TerminationByKubelet), or Deleted (no such condition: a plain delete).",
    )
    stopped_at: str | None = Field(
        default=None, description="When that worker pod began terminating (RFC 3339); podsGoneSeconds counts from here."
    )
    stop_rollout: int | None = Field(
        default=None,
        description="Highest rollout observed before the attempt was asked to stop (its worker pod's stop, or a "
        "suspend's checkpoint request); its save is judged against it (none: against lastRollout). Rollouts "
        "observed after it and not saved count in rolloutsLost.",
    )
    resumed_from: int | None = Field(
        default=None,
        ge=-1,
        description="The checkpoint miles resumed this attempt from, as its launcher said before starting miles (the "
        "GRPO_RESUME line: the tracker under --load; -1: none). The attempt before's save is judged from it.",
    )
    resumed_data_state: bool | None = Field(
        default=None, description="Whether the rollout data state of that checkpoint was there (GRPO_RESUME)."
    )
    save: AttemptSave | None = Field(
        default=None,
        description="A suspended or preempted attempt's save before its pods went, or one whose worker pod was stopped "
        "(stoppedBy), once resumed.",
    )
    lost_gpu_hours: float = Field(
        default=0.0,
        ge=0,
        description="A Failed attempt's GPU-hours; else its lost rollouts' share of its rollout GPU-hours, plus its "
        "GPU-hours before the first rollout when it is a resume.",
    )


class RunAccounting(ApiModel):
    """Where the run's time and GPU-hours went, from observed transitions and worker pods, in the operator's clock."""

    updated_at: str = Field(description="When the durations and GPU-seconds were last brought up to date (RFC 3339).")
    gpus: int = Field(default=0, ge=0, description="GPUs the run's bound worker pods request, as last observed.")
    queued_seconds: int = Field(default=0, ge=0, description="Time in phase Pending (queue, RayCluster not created).")
    provisioning_seconds: int = Field(default=0, ge=0, description="Time in phase Provisioning.")
    running_seconds: int = Field(default=0, ge=0, description="Time in phase Running.")
    suspended_seconds: int = Field(default=0, ge=0, description="Time in phase Suspended (spec.suspend, preemption).")
    time_to_first_rollout_seconds: int | None = Field(
        default=None, ge=0, description="From the run's creation to its first rollout observed."
    )
    gpu_seconds: int = Field(default=0, ge=0, description="GPU-seconds held by the run's bound worker pods.")
    gpu_hours: float = Field(default=0.0, ge=0, description="gpuSeconds / 3600.")
    unattributed_gpu_seconds: int = Field(
        default=0, ge=0, description="GPU-seconds held since the last attempt ended; the next attempt takes them."
    )
    teardown_gpu_seconds: int = Field(
        default=0,
        ge=0,
        description="GPU-seconds the run's pods held after it ended (Succeeded or Failed), until they were gone: their "
        "preStop hooks and the kubelet's teardown. Part of gpuSeconds and of lostGpuHours.",
    )
    lost_gpu_hours: float = Field(
        default=0.0, ge=0, description="Sum of the attempts' lostGpuHours, and the teardown's GPU time."
    )
    goodput: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="GPU time of rollouts that count (after each first rollout, less lost rollouts and Failed "
        "attempts) / GPU time held.",
    )
    cost_usd: float | None = Field(
        default=None,
        ge=0,
        alias="costUSD",
        description="gpuHours x the operator's price for the instance type; absent without one.",
    )
    lost_cost_usd: float | None = Field(
        default=None, ge=0, alias="lostCostUSD", description="lostGpuHours x the same price; absent without one."
    )
    attempts: list[AttemptAccount] = Field(default_factory=list, max_length=64, description="One entry per attempt.")


class GRPORunStatus(ApiModel):
    """What the operator observed: phase, conditions, progress, metrics and the plan."""

    phase: Phase | None = Field(
        default=None, description="Pending, Provisioning, Running, Succeeded, Failed or Suspended."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        description="Validated, ResourcesReady, RewardServiceReady, JobRunning, MetricsAvailable, Healthy, Complete.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(default=None, description="Spec generation this status reflects.")
    progress: str | None = Field(default=None, description="Rollouts done / total, e.g. 37/100.")
    metrics: RunMetrics | None = Field(default=None, description="Last metrics scraped from the trainer.")
    evaluation: list[EvalSetStatus] | None = Field(
        default=None,
        max_length=8,
        description="Held-out evaluation scores per eval set (spec.eval), from the same source as metrics.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    outputs: RunOutputs | None = Field(
        default=None, description="The last Megatron checkpoint and Hugging Face export, from the launcher."
    )
    plan: RunPlan | None = Field(default=None, description="The computed plan.")
    ray_cluster_name: str | None = Field(default=None, description="The RayCluster of this run.")
    job_submission_id: str | None = Field(default=None, description="Ray job submission id.")
    job_status: str | None = Field(default=None, description="Last Ray job status seen.")
    start_time: str | None = Field(default=None, description="When the run's first job started running (RFC 3339).")
    completion_time: str | None = Field(default=None, description="When the run reached a terminal phase (RFC 3339).")
    guards: GuardMemory | None = Field(
        default=None, description="What the guards remember of the current attempt (a new attempt starts afresh)."
    )
    suspend_requested_rollout: int | None = Field(
        default=None, description="Rollout after which a checkpoint was asked for before suspending."
    )
    suspend_requested_time: str | None = Field(
        default=None, description="When that checkpoint was asked for (RFC 3339)."
    )
    attempt: int | None = Field(
        default=None, ge=0, description="Jobs this run has started: 1 for the first, one more after each resume."
    )
    restarts: int | None = Field(
        default=None, ge=0, description="Restarts after infrastructure failures so far (spec.recovery.maxRestarts)."
    )
    avoided_nodes: list[str] | None = Field(
        default=None,
        max_length=64,
        description="Nodes the Ray workers keep off: each named by a failure that restarted the run (spec.recovery).",
    )
    attempt_start_time: str | None = Field(
        default=None, description="When the current attempt's job was first seen running (RFC 3339)."
    )
    guard_rollout: int | None = Field(default=None, description=_FLAT_NOTE)
    last_progress_time: str | None = Field(default=None, description=_FLAT_NOTE)
    repetition_streak: int | None = Field(default=None, description=_FLAT_NOTE)
    provenance: RunProvenance | None = Field(default=None, description="What the run actually ran.")
    runtime: RuntimeRecord | None = Field(
        default=None,
        description="The GRPORuntime the run was first planned against, as copied then: later reconciles resolve "
        "against this copy, so editing or deleting the runtime leaves a started run as it is.",
    )
    runtime_digest: Annotated[str, StringConstraints(max_length=128)] | None = Field(
        default=None,
        description="HMAC-SHA256 of status.runtime, the run and observedGeneration, signed with a key only the "
        "operator holds: a copy that does not verify is not used (the run is checked against the live GRPORuntime).",
    )
    logs: RunLogs | None = Field(default=None, description="Where the last job's log tail is kept.")
    accounting: RunAccounting | None = Field(
        default=None, description="Time per phase, GPU-hours, lost work and goodput, as observed."
    )
    forensics: list[EvidenceBundle] | None = Field(
        default=None,
        max_length=16,
        description="Evidence captured before a guard stopped a job, after a job failed, or on request; oldest first.",
    )
    capture_handled: str | None = Field(
        default=None,
        description="The last value of the grpo.dev/capture annotation the operator handled (a new value captures).",
    )
    reason: str | None = Field(default=None, description="Reason of the current phase, one CamelCase word.")
    message: Text | None = Field(default=None, description="Human-readable detail of the current phase.")

    @model_validator(mode="before")
    @classmethod
    def _flat_guards(cls, data: Any) -> Any:
        """A run an earlier operator wrote keeps its guards' memory flat: read into `guards`, so an upgrade neither
        loses a streak nor trips a guard early; the flat keys are dropped (the next status write removes them)."""
        if not isinstance(data, dict) or not any(k in data for keys in _FLAT_GUARDS for k in keys[:2]):
            return data
        data = dict(data)
        kept: dict[str, Any] = {}
        for wire, name, field in _FLAT_GUARDS:
            said = data.pop(wire, None), data.pop(name, None)
            value = said[0] if said[0] is not None else said[1]
            if value is not None:
                kept[field] = value
        if data.get("guards") is None and kept:
            data["guards"] = kept
        return data
