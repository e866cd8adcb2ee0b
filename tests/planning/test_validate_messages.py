"""What `grpo validate` says at the edge of each rule it checks beyond the schema: the field, the numbers it
computed and the fix, one step either side of the boundary; errors before warnings."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from grpo_operator.planning.documents import parse_run, parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME_DOCUMENT
from grpo_operator.planning.validation import Problem
from grpo_operator.planning.validation import check as check_run

from tests.support.builders import base, check, merge


def problems(patch: dict[str, Any]) -> list[Problem]:
    run, found = check(merge(base(), {"spec": patch}))
    assert run is not None, found
    return found


def at(path: str, patch: dict[str, Any]) -> list[str]:
    return [str(p) for p in problems(patch) if p.path == path]


@pytest.mark.parametrize(
    ("parallelism", "product"),
    [({"expert": 4, "expertTensor": 4}, 16), ({"expert": 8, "pipeline": 2}, 16), ({"expert": 3}, 3)],
    ids=["expert 4 x expertTensor 4", "expert 8 x pipeline 2", "expert 3"],
)
def test_expert_parallel_sizes_whose_product_does_not_divide_the_actor_gpus_are_refused_with_the_product(
    parallelism: dict[str, int], product: int
) -> None:
    found = at("spec.topology.parallelism.expert", {"topology": {"parallelism": parallelism}})
    assert (
        f"spec.topology.parallelism.expert: expert x expertTensor x pipeline = {product} does not divide actor GPUs 8"
        in found
    ), found


@pytest.mark.parametrize(
    "parallelism",
    [{"expert": 2, "expertTensor": 4}, {"expert": 4, "pipeline": 2}],
    ids=["expert 2 x expertTensor 4", "expert 4 x pipeline 2"],
)
def test_expert_parallel_sizes_whose_product_divides_the_actor_gpus_pass_that_rule(parallelism: dict[str, int]) -> None:
    found = at("spec.topology.parallelism.expert", {"topology": {"parallelism": parallelism}})
    assert not [m for m in found if "does not divide actor GPUs" in m], found


def test_sglang_expert_parallelism_must_divide_the_engine() -> None:
    found = at(
        "spec.topology.rollout.expertParallel", {"topology": {"rollout": {"gpusPerEngine": 2, "expertParallel": 4}}}
    )
    assert any(
        "4 does not divide rollout.gpusPerEngine 2: SGLang expert parallelism runs inside one engine" in m
        for m in found
    ), found
    inside = at(
        "spec.topology.rollout.expertParallel", {"topology": {"rollout": {"gpusPerEngine": 4, "expertParallel": 2}}}
    )
    assert not [m for m in inside if "does not divide" in m], inside


def test_the_batch_identity_counts_every_training_step_of_a_rollout() -> None:
    # 16 prompts x 8 samples = 128 responses = 64 per step x 2 steps
    assert not at("spec.training.globalBatchSize", {"training": {"globalBatchSize": 64, "stepsPerRollout": 2}})
    [message] = at("spec.training.globalBatchSize", {"training": {"globalBatchSize": 128, "stepsPerRollout": 2}})
    assert "= 16 x 8 = 128 but training.globalBatchSize x stepsPerRollout = 128 x 2 = 256" in message, message
    assert message.endswith("set globalBatchSize to 64 or adjust the rollout"), message


def test_eps_clip_high_equal_to_eps_clip_is_accepted_and_below_it_refused() -> None:
    assert not at("spec.training.epsClipHigh", {"training": {"epsClip": 0.2, "epsClipHigh": 0.2}})
    [message] = at("spec.training.epsClipHigh", {"training": {"epsClip": 0.2, "epsClipHigh": 0.19}})
    assert message == "spec.training.epsClipHigh: 0.19 must be at least epsClip 0.2"


def test_a_volcano_priority_class_name_of_63_characters_is_accepted_and_64_refused() -> None:
    def scheduling(name: str) -> dict[str, Any]:
        return {"scheduling": {"gang": {"scheduler": "Volcano"}, "priorityClassName": name}}

    assert not at("spec.scheduling.priorityClassName", scheduling("p" * 63))
    [message] = at("spec.scheduling.priorityClassName", scheduling("p" * 64))
    assert "(64 characters) is longer than the 63 a label value may have" in message, message


def on_six_gpu_nodes(patch: dict[str, Any]) -> list[str]:
    """The problems of the base run patched, on p5en.48xlarge nodes of 6 GPUs (a runtime's own type)."""
    document = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
    document["spec"]["instanceTypes"][1] |= {"gpusPerNode": 6}
    runtime, found = parse_runtime(document)
    assert runtime is not None, found
    run, found = parse_run(merge(base(), {"spec": patch}), runtime)
    assert run is not None, found
    return [str(p) for p in check_run(run).problems]


def test_an_actor_wider_than_the_node_is_refused_with_the_nodes_gpus() -> None:
    found = on_six_gpu_nodes({})
    assert "spec.topology.actor.gpusPerNode: 8 exceeds the 6 GPUs of a p5en.48xlarge node" in found, found
    fits = on_six_gpu_nodes({"topology": {"actor": {"gpusPerNode": 6}}, "training": {"globalBatchSize": 128}})
    assert not [m for m in fits if m.startswith("spec.topology.actor.gpusPerNode")], fits


def test_an_engine_that_does_not_divide_the_attention_heads_is_refused() -> None:
    found = on_six_gpu_nodes({"topology": {"actor": {"gpusPerNode": 6}, "rollout": {"gpusPerEngine": 3}}})
    message = "spec.topology.rollout.gpusPerEngine: 3 must divide Qwen3-4B's 32 attention heads"
    assert any(m.startswith(message) for m in found), found
    two = on_six_gpu_nodes({"topology": {"actor": {"gpusPerNode": 6}, "rollout": {"gpusPerEngine": 2}}})
    assert not [m for m in two if "attention heads" in m], two


def test_a_pipeline_that_does_not_divide_the_layers_is_refused_naming_the_model() -> None:
    found = at("spec.topology.parallelism.pipeline", {"topology": {"parallelism": {"pipeline": 8}}})
    assert found == ["spec.topology.parallelism.pipeline: 8 must divide Qwen3-4B's 36 layers"], found
    assert not at("spec.topology.parallelism.pipeline", {"topology": {"parallelism": {"pipeline": 4}}})


@pytest.mark.parametrize(
    ("parallelism", "shown"),
    [({"expert": 2}, "expert 2 / expertTensor 1"), ({"expertTensor": 2}, "expert 1 / expertTensor 2")],
    ids=["expert 2", "expertTensor 2"],
)
def test_expert_parallelism_on_a_dense_model_is_refused(parallelism: dict[str, int], shown: str) -> None:
    found = at("spec.topology.parallelism.expert", {"topology": {"parallelism": parallelism}})
    assert f"spec.topology.parallelism.expert: {shown}: Qwen3-4B is a dense model; set both to 1" in found, found


def test_sglang_expert_parallelism_on_a_dense_model_is_refused() -> None:
    found = at(
        "spec.topology.rollout.expertParallel", {"topology": {"rollout": {"gpusPerEngine": 2, "expertParallel": 2}}}
    )
    assert found == ["spec.topology.rollout.expertParallel: 2: Qwen3-4B is a dense model; set it to 1"], found


MOE = {"model": {"profile": "qwen3-30b-a3b"}}


def test_expert_parallel_sizes_that_do_not_divide_the_moe_models_experts_are_refused() -> None:
    found = on_six_gpu_nodes(merge(MOE, {"topology": {"actor": {"gpusPerNode": 6}, "parallelism": {"expert": 3}}}))
    assert "spec.topology.parallelism.expert: 3 must divide Qwen3-30B-A3B's 128 experts" in found, found
    engine = {"topology": {"actor": {"gpusPerNode": 6}, "rollout": {"gpusPerEngine": 3, "expertParallel": 3}}}
    found = on_six_gpu_nodes(merge(MOE, engine))
    assert "spec.topology.rollout.expertParallel: 3 must divide Qwen3-30B-A3B's 128 experts" in found, found
    divides = at("spec.topology.parallelism.expert", merge(MOE, {"topology": {"parallelism": {"expert": 8}}}))
    assert not divides, divides


def on_gpus_of(gpu_gib: float, patch: dict[str, Any], **instance: Any) -> list[str]:
    """The problems of the base run patched, on p5en.48xlarge nodes whose GPUs have `gpu_gib` GiB."""
    document = copy.deepcopy(DEFAULT_RUNTIME_DOCUMENT)
    document["spec"]["instanceTypes"][1] |= {"gpuMemoryGiB": gpu_gib, **instance}
    runtime, found = parse_runtime(document)
    assert runtime is not None, found
    run, found = parse_run(merge(base(), {"spec": patch}), runtime)
    assert run is not None, found
    return [str(p) for p in check_run(run).problems]


def test_a_colocated_engine_leaving_exactly_the_memory_it_needs_outside_sglang_is_accepted() -> None:
    # 110 GiB x (1 - 0.8) = 22 GiB: SGLang's workspace (12) and the offloaded actor's residue (10)
    exact = on_gpus_of(110.0, {"topology": {"rollout": {"memFraction": 0.8}}})
    assert not [m for m in exact if m.startswith("spec.topology.rollout.memFraction")], exact
    over = on_gpus_of(110.0, {"topology": {"rollout": {"memFraction": 0.81}}})
    [message] = [m for m in over if m.startswith("spec.topology.rollout.memFraction")]
    assert "0.81 leaves 20.9 GiB per GPU outside SGLang's static reservation but 22.0 GiB is needed" in message
    assert message.endswith("(SGLang workspace and the offloaded actor's residue); set it to at most 0.8"), message


def test_a_disaggregated_engine_needs_only_sglangs_workspace_outside_its_reservation() -> None:
    patch = {
        "topology": {"placement": "Disaggregated", "actor": {"nodes": 2}, "rollout": {"gpus": 8, "memFraction": 0.95}}
    }
    [message] = [m for m in at_all(patch) if m.startswith("spec.topology.rollout.memFraction")]
    assert "but 12.0 GiB is needed (SGLang workspace); set it to at most" in message, message


def at_all(patch: dict[str, Any]) -> list[str]:
    return [str(p) for p in problems(patch)]


def test_the_pinned_host_memory_refusal_names_what_a_colocated_node_pins() -> None:
    found = on_gpus_of(140.0, {}, memoryGiB=64)
    [message] = [m for m in found if "pinned host memory" in m]
    assert "(reference weights, offloaded training state and engine weights) but a p5en.48xlarge pod" in message
    patch = {"topology": {"placement": "Disaggregated", "actor": {"nodes": 2}, "rollout": {"gpus": 8}}}
    found = on_gpus_of(140.0, patch, memoryGiB=16)
    [message] = [m for m in found if "pinned host memory" in m]
    assert "(reference weights) but a p5en.48xlarge pod" in message, message


def test_an_engine_at_exactly_the_free_memory_it_needs_is_still_refused_when_its_kv_cache_holds_no_response() -> None:
    patch = {"model": {"profile": "qwen2.5-72b"}, "topology": {"rollout": {"memFraction": 0.8}}}
    found = on_gpus_of(110.0, patch)  # 22 GiB left outside SGLang, as needed; 88 GiB cannot hold 72B weights
    [message] = [m for m in found if m.startswith("spec.topology.rollout.gpusPerEngine")]
    assert (
        "leaving a KV cache of 0 tokens, fewer than one response (8192); raise gpusPerEngine or memFraction" in message
    )


def test_a_model_path_outside_the_shared_volume_is_warned_about_and_one_under_it_is_not() -> None:
    [message] = at("spec.model.hfCheckpoint", {"model": {"hfCheckpoint": "/opt/models/Qwen3-4B"}})
    assert message.startswith("warning: spec.model.hfCheckpoint: /opt/models/Qwen3-4B is not under storage.mountPath")
    assert message.endswith("; it must exist in the image"), message
    assert not at("spec.model.hfCheckpoint", {})


def test_an_eval_interval_of_exactly_num_rollout_is_not_warned_about_and_one_more_is() -> None:
    assert not at("spec.eval.interval", {"eval": {"interval": 100}})
    [message] = at("spec.eval.interval", {"eval": {"interval": 101}})
    assert message == (
        "warning: spec.eval.interval: 101 exceeds rollout.numRollout 100: evaluation runs only before training"
    )


def test_a_stall_timeout_under_ten_minutes_is_warned_about_and_ten_minutes_is_not() -> None:
    assert not at("spec.guards.stallTimeoutSeconds", {"guards": {"stallTimeoutSeconds": 600}})
    [message] = at("spec.guards.stallTimeoutSeconds", {"guards": {"stallTimeoutSeconds": 599}})
    assert message.startswith("warning: spec.guards.stallTimeoutSeconds: 599 s is shorter than miles's start-up")
    assert message.endswith("the run may be stopped as stalled while healthy"), message


def test_a_reward_guard_starting_after_the_last_rollout_is_warned_about() -> None:
    assert not at("spec.guards.minReward.afterRollouts", {"guards": {"minReward": {"afterRollouts": 100}}})
    [message] = at("spec.guards.minReward.afterRollouts", {"guards": {"minReward": {"afterRollouts": 101}}})
    assert message == (
        "warning: spec.guards.minReward.afterRollouts: 101 exceeds rollout.numRollout 100: the reward guard never runs"
    )


def test_errors_are_listed_before_warnings() -> None:
    found = problems({"image": "registry.example/trainer:1", "training": {"epsClip": 0.2, "epsClipHigh": 0.1}})
    assert [p.severity.value for p in found] == ["error", "warning"], found
    assert [p.path for p in found] == ["spec.training.epsClipHigh", "spec.image"]
