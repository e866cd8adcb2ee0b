"""The Ray head holds the job's record and GCS: no voluntary disruption may take it (a PodDisruptionBudget with
minAvailable 1, Karpenter's do-not-disrupt annotation), unless the operator's setting turns that off."""

from __future__ import annotations

from grpo_operator.planning.validation import check
from grpo_operator.render import RenderSettings, names, render

from tests.support.builders import base
from tests.support.builders import check as checked


def _children(settings: RenderSettings) -> list[dict]:  # type: ignore[type-arg]
    run, _ = checked(base())
    assert run is not None
    plan = check(run).plan
    assert plan is not None
    return render(run, plan, settings).children


def test_the_head_gets_a_budget_that_allows_no_eviction_and_karpenter_leaves_its_node_alone() -> None:
    children = _children(RenderSettings())
    [budget] = [c for c in children if c["kind"] == "PodDisruptionBudget" and c["metadata"]["name"].endswith("-head")]
    [cluster] = [c for c in children if c["kind"] == "RayCluster"]
    head = cluster["spec"]["headGroupSpec"]["template"]["metadata"]
    assert budget["spec"]["minAvailable"] == 1
    # the budget selects exactly the head's pod: its labels, not the workers'
    assert budget["spec"]["selector"]["matchLabels"].items() <= head["labels"].items()
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["metadata"]["labels"]
    assert not budget["spec"]["selector"]["matchLabels"].items() <= worker.items()
    assert budget["metadata"]["name"] == names.head_budget(cluster["metadata"]["name"].removesuffix("-ray"))
    assert head["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}


def test_without_the_setting_the_head_has_neither() -> None:
    children = _children(RenderSettings(head_do_not_disrupt=False))
    assert not [c for c in children if c["kind"] == "PodDisruptionBudget" and c["metadata"]["name"].endswith("-head")]
    [cluster] = [c for c in children if c["kind"] == "RayCluster"]
    assert "annotations" not in cluster["spec"]["headGroupSpec"]["template"]["metadata"]
