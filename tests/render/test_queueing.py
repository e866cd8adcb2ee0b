"""A run under a Kueue queue and a gang scheduler: the RayCluster labels Kueue and KubeRay's batch-scheduler
plugins read, the cluster created suspended, the reward Deployment held back until admission."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPORun
from grpo_operator.planning.plan import make_plan
from grpo_operator.render import names, render
from grpo_operator.render.queueing import apply_steps

from tests.support.builders import SETTINGS, base, check, merge

REMOTE_REWARD = {"reward": {"type": "remote", "remote": {"replicas": 1}}}


def run_with(scheduling: dict[str, Any], extra: dict[str, Any] | None = None) -> GRPORun:
    run, problems = check(merge(base(), {"spec": {"scheduling": scheduling, **(extra or {})}}))
    assert run is not None, problems
    return run


def cluster_of(run: GRPORun) -> dict[str, Any]:
    [cluster] = [c for c in render(run, make_plan(run), SETTINGS).children if c["kind"] == "RayCluster"]
    return cluster


@pytest.mark.parametrize(
    ("scheduling", "labels"),
    [
        ({"queueName": "team-a"}, {"kueue.x-k8s.io/queue-name": "team-a"}),
        (
            {"gang": {"scheduler": "Volcano", "queue": "gpu"}, "priorityClassName": "training"},
            {"volcano.sh/queue-name": "gpu", "ray.io/priority-class-name": "training"},
        ),
        ({"gang": {"scheduler": "Volcano"}}, {}),
        ({"gang": {"scheduler": "KAI", "queue": "research"}}, {"kai.scheduler/queue": "research"}),
        ({"gang": {"scheduler": "SchedulerPlugins"}}, {"ray.io/gang-scheduling-enabled": "true"}),
        (
            {"queueName": "team-a", "gang": {"scheduler": "SchedulerPlugins"}},
            {"kueue.x-k8s.io/queue-name": "team-a", "ray.io/gang-scheduling-enabled": "true"},
        ),
    ],
    ids=["kueue", "volcano", "volcano-default-queue", "kai", "coscheduling", "kueue-and-coscheduling"],
)
def test_the_raycluster_carries_the_labels_kueue_and_the_chosen_gang_scheduler_read(
    scheduling: dict[str, Any], labels: dict[str, str]
) -> None:
    cluster = cluster_of(run_with(scheduling))
    foreign = {
        k: v
        for k, v in cluster["metadata"]["labels"].items()
        if not k.startswith("grpo.dev/") and not k.startswith("app.kubernetes.io/")
    }
    assert foreign == labels
    assert cluster["spec"].get("suspend") is (True if "queueName" in scheduling else None)


def test_a_run_without_a_queue_renders_no_suspend_and_no_queue_label() -> None:
    cluster = cluster_of(run_with({}))
    assert "suspend" not in cluster["spec"]
    assert not any(k.startswith(("kueue.", "volcano.", "kai.", "ray.io/")) for k in cluster["metadata"]["labels"])


@pytest.mark.parametrize(
    ("gang", "words"),
    [
        ({"scheduler": "KAI"}, "queue is required with scheduler KAI"),
        ({"scheduler": "SchedulerPlugins", "queue": "q"}, "queue 'q' must be unset with scheduler SchedulerPlugins"),
        ({"scheduler": "Slurm"}, "spec.scheduling.gang.scheduler"),
    ],
    ids=["KAI without a queue", "SchedulerPlugins with a queue", "an unknown scheduler"],
)
def test_a_gang_setting_kuberay_cannot_use_is_refused_with_the_rule(gang: dict[str, Any], words: str) -> None:
    run, problems = check(merge(base(), {"spec": {"scheduling": {"gang": gang}}}))
    assert run is None
    assert any(words in str(p) for p in problems), problems


def test_a_queue_name_that_is_no_label_value_is_refused() -> None:
    run, problems = check(merge(base(), {"spec": {"scheduling": {"queueName": "Team A"}}}))
    assert run is None and any("spec.scheduling.queueName" in str(p) for p in problems), problems


def kinds(steps: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    return [(how, child["kind"]) for how, child in steps]


def test_under_a_queue_the_cluster_is_created_suspended_and_the_reward_deployment_waits_for_admission() -> None:
    run = run_with({"queueName": "team-a"}, REMOTE_REWARD)
    children = render(run, make_plan(run), SETTINGS).children
    first = apply_steps(run, children, cluster_exists=False, admitted=False)
    assert ("create", "RayCluster") in kinds(first) and ("apply", "Deployment") not in kinds(first)
    assert next(c for how, c in first if how == "create")["spec"]["suspend"] is True
    queued = apply_steps(run, children, cluster_exists=True, admitted=False)
    assert ("apply", "Deployment") not in kinds(queued)
    # Once it exists the cluster is Kueue's to change (suspend, and what it writes into the pod templates on
    # admission, which an apply of the atomic workerGroupSpecs would undo): never applied again.
    assert "RayCluster" not in [kind for _, kind in kinds(queued)]
    admitted = apply_steps(run, children, cluster_exists=True, admitted=True)
    assert "RayCluster" not in [kind for _, kind in kinds(admitted)]
    [deployment] = [c for how, c in admitted if c["kind"] == "Deployment"]
    assert deployment["metadata"]["labels"][names.COMPONENT_LABEL] == "reward"
    assert all(how == "apply" for how, _ in admitted)


def test_without_a_queue_every_child_is_applied_as_rendered() -> None:
    run = run_with({}, REMOTE_REWARD)
    children = render(run, make_plan(run), SETTINGS).children
    assert apply_steps(run, children, cluster_exists=False, admitted=False) == [("apply", c) for c in children]
