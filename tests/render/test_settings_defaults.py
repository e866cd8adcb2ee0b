"""What an operator started without settings renders, as the docs say it: NetworkPolicies on, and worker pods'
grace capped at GRPO_MAX_GRACE_SECONDS's default (docs/reference/lifecycle.md, the grace formula)."""

from __future__ import annotations

from pathlib import Path

from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, render

from tests.support.builders import example, run_of

DOCS = Path(__file__).resolve().parents[2] / "docs"
LIFECYCLE = (DOCS / "reference" / "lifecycle.md").read_text()
OPERATIONS = (DOCS / "operations.md").read_text()


def test_network_policies_are_rendered_unless_turned_off() -> None:
    assert "| `GRPO_NETWORK_POLICIES` | true |" in OPERATIONS
    run = run_of(example("qwen3-4b-disaggregated", {}))
    kinds = [c["kind"] for c in render(run, make_plan(run), RenderSettings()).children]
    assert "NetworkPolicy" in kinds


def test_the_grace_cap_without_settings_is_the_documented_default() -> None:
    # The run asks for more than an hour (a 5000 s step, its own cap at 7200): its workers get the operator's cap.
    assert "GRPO_MAX_GRACE_SECONDS (default 3600)" in LIFECYCLE
    run = run_of(example("qwen3-4b-disaggregated", {"preemption": {"stepSeconds": 5000, "maxGraceSeconds": 7200}}))
    plan = make_plan(run)
    assert plan.preemption_grace.seconds > 3600
    [cluster] = [c for c in render(run, plan, RenderSettings()).children if c["kind"] == "RayCluster"]
    graces = {g["template"]["spec"]["terminationGracePeriodSeconds"] for g in cluster["spec"]["workerGroupSpecs"]}
    assert graces == {3600}
