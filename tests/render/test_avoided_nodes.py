"""A restart away from a failed node (status.avoidedNodes) keeps every Ray worker off that node, and only then."""

from __future__ import annotations

from grpo_operator.render import render

from tests.support.builders import SETTINGS, example, kind, make_plan, rendered, run_of


def test_workers_keep_off_the_avoided_nodes_and_the_head_and_the_other_rules_stay() -> None:
    run = run_of(example("quickstart"))
    cluster = kind(render(run, make_plan(run), SETTINGS, ("node-b", "node-a")), "RayCluster")
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    terms = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-a", "node-b"]}]}
    ]
    assert "podAntiAffinity" in worker["affinity"]  # one worker per node still holds
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    assert "kubernetes.io/hostname" not in str(head.get("affinity", {}))


def test_without_avoided_nodes_the_workers_have_no_node_affinity() -> None:
    worker = kind(rendered(example("quickstart")), "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "nodeAffinity" not in worker["affinity"]
