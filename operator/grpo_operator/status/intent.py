"""What a reconcile means to do with a run, apart from what it read (`status.observation.Seen`): the `Intent` (the
spec, the plan its children were rendered from, the names the renderer gives them, the runtime it planned against,
the operator's price, the user's capture request), made once per reconcile by `controller/intent.py`; or, when no
plan can be made, why not (`NoPlan`): the spec cannot run, its GRPORuntime is missing, or the API server could not
answer the dry run of its children. Plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from grpo_operator.api.runtime import RuntimeRecord
from grpo_operator.api.spec import GRPORunSpec, RewardType
from grpo_operator.api.status import RunPlan


@dataclass(frozen=True)
class Intent:
    spec: GRPORunSpec
    generation: int
    plan: RunPlan | None = None  # the plan this reconcile's children were rendered from
    submission_id: str = ""  # the job this reconcile would submit (render/names.py `submission_id`)
    ray_cluster_name: str | None = None
    evidence_config_map: str = ""  # the ConfigMap the next evidence bundle goes to (render/names.py `forensics`)
    created: datetime | None = None  # the run's metadata.creationTimestamp
    gpu_hour_price_usd: float | None = None  # the operator's price for the run's instance type, if it has one
    capture_request: str | None = None  # the run's grpo.dev/capture annotation (status/forensics.py)
    runtime: RuntimeRecord | None = None  # the runtime this reconcile planned against (kept in status.runtime)
    runtime_altered: str | None = None  # status.runtime failed its digest and was replaced: the Warning event's text
    # An edit made after the run started that cannot run: why (the attempt running goes on by the plan in its status,
    # status/lifecycle.py `_edit_refused`); empty for a spec that runs.
    edit_problems: tuple[str, ...] = ()

    @property
    def suspend(self) -> bool:
        return self.spec.suspend

    @property
    def reward_required(self) -> bool:
        """The reward service is a child of the run (a remote reward), so it must be ready before the job starts."""
        return self.spec.reward.type is RewardType.REMOTE


@dataclass(frozen=True)
class NoPlan:
    """Why this reconcile has no plan for the run: nothing is read, applied or submitted (status/lifecycle.py
    `unplanned`)."""

    generation: int
    problems: tuple[str, ...] = ()  # the spec cannot run, in the validator's (or the API server's) words
    runtime_missing: str | None = None  # the GRPORuntime the run names and the API server lacks
    # status.runtime failed its digest (planning/runtimeseal.py): what the Warning event says. With runtime_missing
    # too, there is no live GRPORuntime to check the run against either, and the run is held as it is.
    runtime_altered: str | None = None
    # The API server could not answer a dry run of a child (a 5xx, a 429): which child and what it said
    # (edges/errors.py `Unavailable`).
    api_unavailable: str | None = None
