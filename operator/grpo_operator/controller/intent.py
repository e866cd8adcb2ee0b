"""What one reconcile means to do with a run (`status.intent.Intent`), made in one place from the run, the plan its
children were rendered from, the previous status and the operator's settings: the names the renderer gives the
job and the next evidence bundle, the runtime record, the price per GPU-hour, the user's capture request. Pure: the
reconciler reads the world (`status.observation.Seen`) by this intent, and `status.lifecycle.decide` judges the
one against the other."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.runtime import RuntimeRecord
from grpo_operator.api.status import GRPORunStatus, RunPlan
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.render import names
from grpo_operator.status.forensics import CAPTURE_ANNOTATION
from grpo_operator.status.intent import Intent
from grpo_operator.status.observation import parse_rfc3339


def intent_of(
    run: GRPORun,
    plan: RunPlan,
    prev: GRPORunStatus | None,
    settings: OperatorSettings,
    *,
    generation: int,
    annotations: Mapping[str, Any] | None = None,
    runtime: RuntimeRecord | None = None,
    runtime_altered: str | None = None,
    edit_problems: tuple[str, ...] = (),
) -> Intent:
    """The intent of this reconcile: `plan` is the one its children were rendered from (the status's own while an
    edit that cannot run, `edit_problems`, leaves the running attempt as it was)."""
    name = run.metadata.name
    bundles = len(prev.forensics or []) if prev is not None else 0
    request = (annotations or {}).get(CAPTURE_ANNOTATION)
    return Intent(
        spec=run.spec,
        generation=generation,
        plan=plan,
        submission_id=names.submission_id(name, run.metadata.uid or "nouid", run.metadata.generation or 1, prev),
        ray_cluster_name=names.ray_cluster(name),
        evidence_config_map=names.forensics(name, bundles + 1),
        created=created(run),
        gpu_hour_price_usd=price(run, settings),
        capture_request=str(request) if request else None,
        runtime=runtime,
        runtime_altered=runtime_altered,
        edit_problems=edit_problems,
    )


def price(run: GRPORun, settings: OperatorSettings) -> float | None:
    """The operator's price per GPU-hour for the run's instance type, if it has one."""
    prices = {str(k): v for k, v in (settings.gpu_hour_prices_usd or {}).items()}
    return prices.get(run.spec.topology.instance_type)


def created(run: GRPORun) -> datetime | None:
    try:
        return parse_rfc3339(run.metadata.creation_timestamp)
    except ValueError:
        return None
