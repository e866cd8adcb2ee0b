"""Scheduling fields a user sets reach the pods the scheduler reads them from."""

from __future__ import annotations

from tests.support.builders import example, kind, rendered


def test_a_priority_class_reaches_every_ray_pod() -> None:
    cluster = kind(
        rendered(example("quickstart", {"scheduling": {"priorityClassName": "training-high"}})), "RayCluster"
    )
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]
    ]
    assert [p.get("priorityClassName") for p in pods] == ["training-high"] * len(pods)
