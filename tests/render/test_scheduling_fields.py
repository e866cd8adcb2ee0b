"""Scheduling fields a user sets reach the pods the scheduler reads them from."""

from __future__ import annotations

import pytest
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import render
from grpo_operator.render.reward import MissingRewardImage

from tests.support.builders import SETTINGS, example, kind, rendered, run_of


def test_a_priority_class_reaches_every_ray_pod() -> None:
    cluster = kind(
        rendered(example("quickstart", {"scheduling": {"priorityClassName": "training-high"}})), "RayCluster"
    )
    pods = [cluster["spec"]["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]
    ]
    assert [p.get("priorityClassName") for p in pods] == ["training-high"] * len(pods)


def test_a_users_toleration_reaches_the_worker_pods_as_kubernetes_spells_it() -> None:
    toleration = {
        "key": "dedicated",
        "operator": "Equal",
        "value": "grpo",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    cluster = kind(rendered(example("quickstart", {"scheduling": {"tolerations": [toleration]}})), "RayCluster")
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["template"]["spec"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            toleration,
        ]


def test_a_toleration_without_optional_fields_renders_none_of_them() -> None:
    toleration = {"key": "spot", "operator": "Exists"}
    cluster = kind(rendered(example("quickstart", {"scheduling": {"tolerations": [toleration]}})), "RayCluster")
    assert cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"][-1] == toleration


def test_the_reward_service_runs_on_the_head_node_pool() -> None:
    doc = example(
        "quickstart",
        {"reward": {"type": "remote", "remote": {"replicas": 1}}, "scheduling": {"headNodeSelector": {"pool": "cpu"}}},
    )
    deployment = kind(rendered(doc), "Deployment")
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}


def test_a_remote_reward_without_any_image_names_the_field_and_the_fix() -> None:
    doc = example("quickstart", {"reward": {"type": "remote", "remote": {"replicas": 1}}})
    run = run_of(doc)
    with pytest.raises(MissingRewardImage, match=r"spec.reward.remote.image: not set .* GRPO_REWARD_IMAGE"):
        render(run, make_plan(run), SETTINGS.model_copy(update={"reward_image": ""}))
