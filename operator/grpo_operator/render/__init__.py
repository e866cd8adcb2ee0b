"""Rendering: pure functions from a validated GRPORun, its plan and the operator's settings to child manifests.

No I/O here. The reconciler applies what `render_children` returns and submits what `job_submission` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.status import RunPlan
from grpo_operator.render.job import JobSubmission, job_submission
from grpo_operator.render.networkpolicy import network_policies
from grpo_operator.render.raycluster import head_disruption_budget, ray_cluster
from grpo_operator.render.reward import MissingRewardImage, reward_children
from grpo_operator.render.runconfig import config_map
from grpo_operator.render.settings import RenderSettings


@dataclass(frozen=True)
class Rendered:
    """Everything a run needs: the child manifests (apply order) and the job to submit."""

    children: list[dict[str, Any]]
    job: JobSubmission
    plan: RunPlan


def render(run: GRPORun, plan: RunPlan, settings: RenderSettings, avoided_nodes: tuple[str, ...] = ()) -> Rendered:
    job = job_submission(run, plan, settings)
    # Policies before the pods they guard, so no Ray pod starts unguarded.
    children = [
        config_map(run, plan, job, settings),
        *network_policies(run, settings),
        *reward_children(run, settings),
        *head_disruption_budget(run, settings),
        ray_cluster(run, plan, settings, avoided_nodes),
    ]
    return Rendered(children=children, job=job, plan=plan)


__all__ = ["JobSubmission", "MissingRewardImage", "RenderSettings", "Rendered", "render"]
