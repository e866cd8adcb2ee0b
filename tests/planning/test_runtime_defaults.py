"""What a run gets from its GRPORuntime beyond image, storage and queue: the Ray head's node selector, the
PriorityClass, the guards, the reward service image of a remote-reward run, tolerations added to the run's own;
a lock the run keeps to the runtime's value is no override, and the refusal names the default the run would get."""

from __future__ import annotations

from typing import Any

import yaml
from grpo_operator.planning.documents import parse_run, parse_runtime

from tests.support.builders import EXAMPLES, merge
from tests.support.runtimes import short_run

RUNTIMES = EXAMPLES / "runtimes"
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# A toleration with every optional member: tolerationSeconds is the one whose API name differs from Python's.
EVICTION = {
    "key": "node.kubernetes.io/unreachable",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 60,
}


def runtime(patch: dict[str, Any] | None = None) -> Any:
    doc = merge(yaml.safe_load((RUNTIMES / "h100-infiniband.yaml").read_text()), patch or {})
    parsed, problems = parse_runtime(doc)
    assert parsed is not None, problems
    return parsed


def test_the_ray_head_selector_and_the_priority_class_come_from_the_runtime() -> None:
    rt = runtime({"spec": {"defaults": {"scheduling": {"priorityClassName": "training-low"}}}})
    run, problems = parse_run(short_run(), rt)
    assert run is not None, problems
    assert run.spec.scheduling.head_node_selector == {"node-role.example.com/cpu": "true"}
    assert run.spec.scheduling.priority_class_name == "training-low"


def test_a_run_without_guards_gets_the_runtimes_and_one_with_its_own_keeps_them() -> None:
    guards = {"stallTimeoutSeconds": 7200, "startupGraceSeconds": 900, "minReward": {"afterRollouts": 5}}
    rt = runtime({"spec": {"defaults": {"guards": guards}}})
    run, problems = parse_run(short_run(), rt)
    assert run is not None, problems
    g = run.spec.guards
    assert (g.stall_timeout_seconds, g.startup_grace_seconds, g.min_reward.after_rollouts) == (7200, 900, 5)
    own, problems = parse_run(short_run({"guards": {"stallTimeoutSeconds": 1200}}), rt)
    assert own is not None, problems
    assert own.spec.guards.stall_timeout_seconds == 1200


def test_a_remote_reward_run_gets_the_runtimes_reward_image_and_a_built_in_reward_run_is_left_alone() -> None:
    image = "registry.example.com/ml/grpo-reward@sha256:" + "1" * 64
    rt = runtime({"spec": {"defaults": {"rewardImage": image}}})
    remote, problems = parse_run(short_run({"reward": {"type": "remote", "remote": {"replicas": 1}}}), rt)
    assert remote is not None, problems
    assert remote.spec.reward.remote is not None and remote.spec.reward.remote.image == image
    built_in, problems = parse_run(short_run(), rt)
    assert built_in is not None, problems
    assert built_in.spec.reward.remote is None


def test_the_runtimes_tolerations_are_added_to_the_runs_own_once_each() -> None:
    rt = runtime({"spec": {"defaults": {"scheduling": {"tolerations": [GPU_TAINT, EVICTION]}}}})
    mine = {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    run, problems = parse_run(short_run({"scheduling": {"tolerations": [mine, GPU_TAINT]}}), rt)
    assert run is not None, problems
    got = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in run.spec.scheduling.tolerations]
    assert got == [mine, GPU_TAINT, EVICTION]
    bare, problems = parse_run(short_run(), rt)
    assert bare is not None, problems
    assert [t.toleration_seconds for t in bare.spec.scheduling.tolerations] == [None, 60]


def test_a_run_setting_a_locked_field_to_the_runtimes_own_value_is_accepted() -> None:
    run, problems = parse_run(short_run({"scheduling": {"queueName": "gpu-queue"}}), runtime())
    assert run is not None, problems
    rt = runtime({"spec": {"locks": {"fields": ["storage.claimName"]}}})
    run, problems = parse_run(short_run({"storage": {"claimName": "shared-rwx"}}), rt)
    assert run is not None, problems


def test_the_lock_refusal_names_the_default_the_run_would_get_and_none_when_the_runtime_has_none() -> None:
    _, problems = parse_run(short_run({"scheduling": {"queueName": "my-queue"}}), runtime())
    [problem] = problems
    assert "to get the runtime's defaults.scheduling.queueName ('gpu-queue'), or ask" in problem.message
    rt = runtime({"spec": {"locks": {"fields": ["scheduling.priorityClassName"]}}})
    _, problems = parse_run(short_run({"scheduling": {"priorityClassName": "urgent"}}), rt)
    [problem] = problems
    assert problem.path == "spec.scheduling.priorityClassName"
    assert "to get the runtime's defaults.scheduling.priorityClassName, or ask" in problem.message


def test_a_run_whose_storage_is_not_a_mapping_is_refused_not_filled_in() -> None:
    run, problems = parse_run(short_run({"storage": "shared-rwx"}), runtime())
    assert run is None
    assert [p.path for p in problems] == ["spec.storage"], problems


def test_a_run_whose_scheduling_is_not_a_mapping_is_refused_on_a_runtime_with_tolerations() -> None:
    rt = runtime({"spec": {"defaults": {"scheduling": {"tolerations": [GPU_TAINT]}}}})
    run, problems = parse_run(short_run({"scheduling": "gpu-queue"}), rt)
    assert run is None
    assert [p.path for p in problems] == ["spec.scheduling"], problems


def test_a_document_that_is_not_a_mapping_is_refused_as_no_grporun() -> None:
    run, problems = parse_run(["apiVersion", "kind"], runtime())
    assert run is None
    [problem] = problems
    assert problem.path == "(document)" and "GRPORun" in problem.message, problem


def test_the_reward_service_image_must_come_from_the_runtimes_registries_too() -> None:
    remote = {"type": "remote", "remote": {"replicas": 1, "image": "docker.io/me/reward:1"}}
    run, problems = parse_run(short_run({"reward": remote}), runtime())
    assert run is None
    [problem] = problems
    assert problem.path == "spec.reward.remote.image"
    assert "docker.io/me/reward:1 is not from a registry" in problem.message, problem.message
    allowed = merge(remote, {"remote": {"image": "registry.example.com/ml/reward:1"}})
    run, problems = parse_run(short_run({"reward": allowed}), runtime())
    assert run is not None, problems


def test_an_image_under_any_one_of_several_allowed_registries_is_accepted() -> None:
    rt = runtime({"spec": {"locks": {"imagePrefixes": ["registry.example.com/ml/", "mirror.example.com/ml/"]}}})
    for image in ("registry.example.com/ml/grpo:1", "mirror.example.com/ml/grpo:1"):
        run, problems = parse_run(short_run({"image": image}), rt)
        assert run is not None, (image, problems)
    run, problems = parse_run(short_run({"image": "docker.io/ml/grpo:1"}), rt)
    assert run is None
    assert "registry.example.com/ml/, mirror.example.com/ml/" in problems[0].message


def test_a_run_of_exactly_the_runtimes_node_limit_is_accepted_and_one_node_more_is_refused() -> None:
    rt = runtime({"spec": {"locks": {"maxNodesPerRun": 2}}})
    run, problems = parse_run(short_run({"topology": {"actor": {"nodes": 2}}}), rt)
    assert run is not None, problems
    run, problems = parse_run(short_run({"topology": {"actor": {"nodes": 3}}}), rt)
    assert run is None
    assert [p.path for p in problems] == ["spec.topology.actor.nodes"]
    assert "needs 3 worker nodes" in problems[0].message and "at most 2 per run" in problems[0].message
