"""What an operator started without settings renders, as the README documents it: NetworkPolicies on, and worker
pods' grace capped at GRPO_MAX_GRACE_SECONDS's default."""

from __future__ import annotations

from pathlib import Path

from grpo_operator.planning.plan import make_plan
from grpo_operator.render import RenderSettings, render

from tests.support.builders import example, run_of

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_network_policies_are_rendered_unless_turned_off() -> None:
    run = run_of(example("qwen3-4b-disaggregated", {}))
    kinds = [c["kind"] for c in render(run, make_plan(run), RenderSettings()).children]
    assert "NetworkPolicy" in kinds


def test_the_grace_cap_without_settings_is_the_documented_default() -> None:
    # The run asks for more than an hour (a 5000 s step, its own cap at 7200): its workers get the operator's cap.
    assert "GRPO_MAX_GRACE_SECONDS (default 3600)" in README
    run = run_of(example("qwen3-4b-disaggregated", {"preemption": {"stepSeconds": 5000, "maxGraceSeconds": 7200}}))
    plan = make_plan(run)
    assert plan.preemption_grace.seconds > 3600
    [cluster] = [c for c in render(run, plan, RenderSettings()).children if c["kind"] == "RayCluster"]
    graces = {g["template"]["spec"]["terminationGracePeriodSeconds"] for g in cluster["spec"]["workerGroupSpecs"]}
    assert graces == {3600}
