"""What one reconcile does: the `Decision` (the status to write, the actions in the order the reconciler carries
them out, and the events to post) and the `Draft` the concern modules fill in while deciding."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import (
    TERMINAL_PHASES,
    EvalSetStatus,
    EvidenceBundle,
    GRPORunStatus,
    GuardMemory,
    Phase,
    RunMetrics,
    RunOutputs,
    RunProvenance,
)
from grpo_operator.status.conditions import Conditions
from grpo_operator.status.intent import Intent
from grpo_operator.status.observation import Seen, rfc3339


@dataclass(frozen=True)
class CreateTokenSecret:
    """Make the run's Ray auth token Secret: the Ray pods start only with the Secret they reference."""


@dataclass(frozen=True)
class ApplyChildren:
    """Every child in place (under a Kueue queue the RayCluster is created suspended)."""


@dataclass(frozen=True)
class Submit:
    submission_id: str


@dataclass(frozen=True)
class StopJob:
    submission_id: str


@dataclass(frozen=True)
class RequestCheckpoint:
    """Ask miles for a checkpoint before the job of `submission_id` stops."""

    submission_id: str


@dataclass(frozen=True)
class CaptureEvidence:
    """Keep what the job's processes and Ray know in the ConfigMap `config_map`, before anything stops it, with
    the `pieces` (name, text) the decision already knows (the NCCL lines of a failed job's log)."""

    submission_id: str
    config_map: str
    trigger: str
    pieces: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class KeepLogs:
    """Keep the ended job's log tail in the run's log ConfigMap (the RayCluster, and Ray's copy, go later)."""

    submission_id: str


@dataclass(frozen=True)
class DeleteRayCluster:
    """Give the GPUs back."""


Action = (
    CreateTokenSecret
    | ApplyChildren
    | Submit
    | StopJob
    | RequestCheckpoint
    | CaptureEvidence
    | KeepLogs
    | DeleteRayCluster
)


# The reason of a plain warning (a guard's, a spec the API server refused): posted as a guard warning. A Warning
# event of any other reason is posted under its own (`Decision.alerts`).
WARNING = "Warning"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    status: GRPORunStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()

    def has(self, kind: type) -> bool:
        return any(isinstance(a, kind) for a in self.actions)

    @property
    def warnings(self) -> list[str]:
        return [e.message for e in self.events if e.type == "Warning" and e.reason == WARNING]

    @property
    def alerts(self) -> list[tuple[str, str]]:
        """(reason, message) of the Warning events that carry a reason of their own."""
        return [(e.reason, e.message) for e in self.events if e.type == "Warning" and e.reason != WARNING]


@dataclass(frozen=True)
class Attempt:
    """The job the status tracks: a resume, or a job this status has not seen, is a new attempt."""

    job_submission_id: str | None
    job_status: str | None
    attempt: int | None
    start_time: str | None
    attempt_start_time: str | None
    same: bool  # the previous status tracked this attempt already: its guard state carries over


@dataclass(frozen=True)
class Progress:
    """The trainer's numbers as far as they are known, and the guards' memory of this attempt."""

    metrics: RunMetrics | None
    guard: GuardMemory
    total: int
    evaluation: list[EvalSetStatus] | None = None
    outputs: RunOutputs | None = None
    eval_warnings: tuple[str, ...] = ()  # evaluations this reconcile left unscored (mostly None rewards)

    @property
    def text(self) -> str:
        done = self.metrics.rollout + 1 if self.metrics and self.metrics.rollout is not None else 0
        return f"{done}/{self.total}"


@dataclass(frozen=True)
class CheckpointAsk:
    """A suspending run's request for a checkpoint: the rollout after which miles saves it (None until known), and
    when it was asked for (RFC 3339)."""

    rollout: int | None
    time: str


@dataclass(frozen=True)
class Recovery:
    """The restarts counted so far and the nodes the next attempt's workers keep off (status/recovery.py)."""

    restarts: int | None
    avoided_nodes: list[str] | None


@dataclass
class Draft:
    """The status being decided: what every phase carries, and the conditions set so far."""

    prev: GRPORunStatus | None
    seen: Seen
    intent: Intent
    now: datetime
    conds: Conditions
    attempt: Attempt
    progress: Progress
    metrics_available: bool = False
    events: list[Event] = field(default_factory=list)

    @property
    def spec(self) -> GRPORunSpec:
        return self.intent.spec

    def warn(self, message: str) -> None:
        self.events.append(Event("Warning", WARNING, message))

    def decide(
        self,
        phase: Phase,
        reason: str,
        message: str,
        actions: tuple[Action, ...] = (),
        *,
        attempt: Attempt | None = None,
        guards: GuardMemory | None = None,
        recovery: Recovery | None = None,
        forensics: list[EvidenceBundle] | None = None,
        ray_cluster_name: str | None = None,
        checkpoint: CheckpointAsk | None = None,
    ) -> Decision:
        """The decision of `phase`: each part the status carries over unless given. `attempt`: the attempt the
        status tracks from now (a submission's, a restart's); `guards`: their memory (a new attempt's starts
        afresh); `recovery`, `forensics`, `ray_cluster_name`: once changed; `checkpoint`: while a suspend waits for
        one (else it is forgotten)."""
        prev = self.prev
        attempt = attempt if attempt is not None else self.attempt
        if recovery is None:
            recovery = Recovery(prev.restarts, prev.avoided_nodes) if prev is not None else Recovery(None, None)
        values: dict[str, object] = {
            "observed_generation": self.intent.generation,
            "plan": self.intent.plan,
            "ray_cluster_name": ray_cluster_name or (prev.ray_cluster_name if prev else None),
            "job_submission_id": attempt.job_submission_id,
            "job_status": attempt.job_status,
            "attempt": attempt.attempt,
            "restarts": recovery.restarts,
            "avoided_nodes": recovery.avoided_nodes,
            "forensics": forensics or (prev.forensics if prev else None),
            "start_time": attempt.start_time,
            "attempt_start_time": attempt.attempt_start_time,
            "logs": self.seen.logs or (prev.logs if prev else None),
            "provenance": provenance(prev, self.seen),
            "metrics": self.progress.metrics,
            "evaluation": self.progress.evaluation,
            "outputs": self.progress.outputs,
            "progress": self.progress.text,
            "guards": guards if guards is not None else self.progress.guard,
            "suspend_requested_rollout": checkpoint.rollout if checkpoint else None,
            "suspend_requested_time": checkpoint.time if checkpoint else None,
            "phase": phase,
            "reason": reason,
            "message": message,
            "conditions": self.conds.all(),
        }
        if phase in TERMINAL_PHASES:
            values["completion_time"] = rfc3339(self.now)
        return Decision(GRPORunStatus.model_validate(values), actions, tuple(self.events))


_PROVENANCE_FACTS = ("miles_commit", "megatron_commit", "ray", "sglang", "megatron", "torch", "launcher")


def provenance(prev: GRPORunStatus | None, seen: Seen) -> RunProvenance | None:
    """What ran: the image from the pods, the rest from the end-of-run summary; facts once known are kept."""
    old = prev.provenance if prev is not None else None
    facts = seen.summary.provenance if seen.summary is not None else {}
    values = old.model_dump() if old is not None else {}
    if seen.trainer_image:
        values["image"] = seen.trainer_image
    if seen.trainer_image_id:
        values["image_id"] = seen.trainer_image_id
    for key in _PROVENANCE_FACTS:
        if facts.get(key):
            values[key] = facts[key]
    return RunProvenance.model_validate(values) if any(v is not None for v in values.values()) else None
