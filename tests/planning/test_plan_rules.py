"""Planning behaviour a user sees in `grpo plan` and `grpo validate`: the KV cache an engine gets, whether a run
fits, the free GPU memory the preflight demands, the batch the data-parallel ranks share, the EFA devices a pod
requests."""

from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.instances import INSTANCES, InstanceTypeName
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import Problem, Severity

from tests.support.builders import base, merge
from tests.support.builders import check as parse_and_validate


def planned(patch: dict[str, Any]) -> tuple[RunPlan, list[Problem]]:
    """The plan and every problem of the base example (Qwen3-4B colocated on one p5en) with a spec patch."""
    run, problems = parse_and_validate(merge(base(), {"spec": patch}))
    assert run is not None, [str(p) for p in problems]
    return make_plan(run), problems


def problems_at(path: str, patch: dict[str, Any]) -> list[Problem]:
    return [p for p in planned(patch)[1] if p.path == path]


# -- the rollout engine's KV cache ---------------------------------------------------------------------------


def glm_engine(gpus_per_engine: int) -> dict[str, Any]:
    """GLM-Z1-9B: 32 attention heads but 2 KV heads (query groups), colocated on one p5en node."""
    return {
        "model": {"profile": "glm-z1-9b"},
        "topology": {"rollout": {"gpusPerEngine": gpus_per_engine}, "parallelism": {"tensor": 2}},
    }


def tokens_per_gib(gpus_per_engine: int) -> float:
    memory = planned(glm_engine(gpus_per_engine))[0].rollout_memory
    return memory.kv_cache_tokens / memory.kv_cache_gib


def test_an_engine_wider_than_the_kv_heads_holds_no_more_tokens_per_gib_than_one_as_wide_as_them() -> None:
    # SGLang gives every GPU at least one whole KV head: past 2 GPUs the heads are copied, not split further,
    # so a GiB of KV cache on a GPU holds the same number of tokens at 2, 4 and 8 GPUs per engine.
    at_heads = tokens_per_gib(2)
    assert tokens_per_gib(4) == pytest.approx(at_heads, rel=0.01)
    assert tokens_per_gib(8) == pytest.approx(at_heads, rel=0.01)


def test_an_engine_up_to_the_kv_heads_splits_them_and_holds_twice_the_tokens_per_gib_at_twice_the_gpus() -> None:
    assert tokens_per_gib(2) == pytest.approx(2 * tokens_per_gib(1), rel=0.01)


# -- whether the run fits: GPU memory and pinned host memory ------------------------------------------------


def qwen25_72b_colocated_on_two_b200(gpus_per_engine: int) -> dict[str, Any]:
    return {
        "model": {"profile": "qwen2.5-72b"},
        "topology": {
            "instanceType": "p6-b200.48xlarge",
            "actor": {"nodes": 2},
            "parallelism": {"tensor": 2, "pipeline": 4},
            "rollout": {"gpusPerEngine": gpus_per_engine, "memFraction": 0.8},
        },
    }


def test_a_run_that_fits_every_gpu_but_not_the_nodes_pinned_host_memory_does_not_fit() -> None:
    # Colocated, each GPU's engine weights are offloaded to pinned host memory: one GPU per engine puts a whole
    # 72B copy per GPU there, more than a b200 pod gets; the GPU side is the same as at two GPUs per engine.
    plan, problems = planned(qwen25_72b_colocated_on_two_b200(gpus_per_engine=1))
    assert plan.actor_gib_per_gpu < plan.gpu_gib
    assert plan.rollout_memory.free_gib >= plan.rollout_memory.needed_free_gib
    assert plan.host_gib_per_node > plan.host_capacity_gib
    assert not plan.fits
    assert [(p.path, "pinned host memory" in p.message) for p in problems if p.severity is Severity.ERROR] == [
        ("spec.topology", True)
    ]


def test_the_same_run_with_half_the_engine_weights_per_gpu_in_host_memory_fits() -> None:
    plan, problems = planned(qwen25_72b_colocated_on_two_b200(gpus_per_engine=2))
    assert plan.host_gib_per_node <= plan.host_capacity_gib
    assert plan.fits
    assert [p for p in problems if p.severity is Severity.ERROR] == []


def test_colocated_the_actor_gets_the_gpu_less_what_released_engines_keep_and_disaggregated_all_of_it() -> None:
    # Qwen3-4B at 51008 tokens per GPU needs about 138.8 GiB: more than 140.4 - 3 GiB, less than 140.4 GiB.
    tokens = {"training": {"maxTokensPerGpu": 51008}}
    colocated, colocated_problems = planned(tokens)
    disaggregated, disaggregated_problems = planned(
        merge(tokens, {"topology": {"placement": "Disaggregated", "rollout": {"gpus": 8}}})
    )
    assert colocated.actor_gib_per_gpu == disaggregated.actor_gib_per_gpu
    assert not colocated.fits
    assert any(
        p.path == "spec.topology" and f"gives {colocated.gpu_gib - 3:.1f} GiB" in p.message for p in colocated_problems
    )
    assert disaggregated.fits
    assert [p for p in disaggregated_problems if p.severity is Severity.ERROR] == []


def test_the_plans_activation_terms_are_gib_within_the_activation_peak_and_the_total() -> None:
    plan, _ = planned({})
    memory = plan.actor_memory
    assert 0 < memory.logits_gib <= memory.activations_gib
    assert 0 < memory.checkpoints_gib + memory.layer_working_set_gib <= memory.activations_gib + 0.1
    assert memory.activations_gib < memory.total_gib <= plan.gpu_gib


@pytest.mark.parametrize(("gpus_per_engine", "engines"), [(1, 8), (2, 4), (8, 1)])
def test_the_plan_counts_one_sglang_engine_per_gpus_per_engine_gpus(gpus_per_engine: int, engines: int) -> None:
    assert planned({"topology": {"rollout": {"gpusPerEngine": gpus_per_engine}}})[0].rollout_engines == engines


def test_the_plan_shows_the_model_size_in_billions_of_parameters_to_two_decimals() -> None:
    plan, _ = planned({})
    assert plan.params_billions == 4.02  # Qwen3-4B: 4.02 B parameters as published


def test_a_kv_cache_that_holds_exactly_one_response_fits_and_one_token_short_of_it_does_not() -> None:
    # The boundary `grpo validate` refuses at must be the one `fits` reports.
    small_cache = {"model": {"profile": "qwen3-8b"}, "topology": {"rollout": {"memFraction": 0.3}}}
    tokens = planned(small_cache)[0].rollout_memory.kv_cache_tokens
    exact, exact_problems = planned(merge(small_cache, {"rollout": {"maxResponseLen": tokens}}))
    over, over_problems = planned(merge(small_cache, {"rollout": {"maxResponseLen": tokens + 1}}))
    assert exact.fits and [p for p in exact_problems if p.severity is Severity.ERROR] == []
    assert not over.fits
    assert [p.path for p in over_problems if p.severity is Severity.ERROR] == ["spec.topology.rollout.gpusPerEngine"]


# -- the free GPU memory the preflight demands ----------------------------------------------------------------


def test_colocated_the_preflight_demands_sglangs_static_reservation_when_it_exceeds_the_actors_need() -> None:
    plan, _ = planned({"topology": {"rollout": {"memFraction": 0.8}}})
    assert plan.rollout_gib_per_gpu > plan.actor_gib_per_gpu
    assert plan.min_free_gpu_gib == plan.rollout_gib_per_gpu


def test_colocated_the_preflight_demands_the_actors_need_when_it_exceeds_sglangs_reservation() -> None:
    plan, _ = planned({"topology": {"rollout": {"memFraction": 0.3}}})
    assert plan.actor_gib_per_gpu > plan.rollout_gib_per_gpu
    assert plan.min_free_gpu_gib == plan.actor_gib_per_gpu


def test_disaggregated_the_preflight_demands_the_actors_need() -> None:
    # The engines there reserve a fraction of what they find free, so it is not a floor on free memory.
    plan, _ = planned({"topology": {"placement": "Disaggregated", "rollout": {"gpus": 8}, "actor": {"nodes": 1}}})
    assert plan.rollout_gib_per_gpu > plan.actor_gib_per_gpu
    assert plan.min_free_gpu_gib == plan.actor_gib_per_gpu


# -- globalBatchSize and the data-parallel size ----------------------------------------------------------------


def batch(global_batch_size: int, nodes: int = 2, context: int = 1) -> dict[str, Any]:
    """A batch whose GRPO identity holds (batchSize x 8 samples = globalBatchSize x 1 step)."""
    return {
        "rollout": {"batchSize": global_batch_size // 8, "samplesPerPrompt": 8},
        "training": {"globalBatchSize": global_batch_size},
        "topology": {"actor": {"nodes": nodes}, "parallelism": {"context": context}},
    }


def test_a_global_batch_the_data_parallel_ranks_cannot_share_equally_is_refused_naming_the_size() -> None:
    # 2 nodes x 8 GPUs at tensor 1: 16 data-parallel ranks cannot split 24 samples.
    problems = problems_at("spec.training.globalBatchSize", batch(24))
    assert [p.severity for p in problems] == [Severity.ERROR]
    assert "24 is not divisible by the data-parallel size 16" in problems[0].message


@pytest.mark.parametrize(("global_batch_size", "context"), [(16, 1), (32, 1), (8, 2), (24, 2)])
def test_a_global_batch_that_is_a_multiple_of_the_data_parallel_size_is_accepted(
    global_batch_size: int, context: int
) -> None:
    # Context parallelism takes GPUs from data parallelism: at context 2 there are 8 ranks, and 24 splits.
    assert problems_at("spec.training.globalBatchSize", batch(global_batch_size, context=context)) == []


# -- EFA devices -------------------------------------------------------------------------------------------------

# What the EFA device plugin advertises as allocatable per node (p5en: 16 devices, one held back).
ALLOCATABLE_EFA = {
    InstanceTypeName.P5: 32,
    InstanceTypeName.P5EN: 15,
    InstanceTypeName.P6_B200: 8,
    InstanceTypeName.P6_B300: 16,
}


@pytest.mark.parametrize("instance", list(InstanceTypeName))
def test_a_multi_node_run_requests_every_allocatable_efa_device_of_its_instance_type(
    instance: InstanceTypeName,
) -> None:
    plan, _ = planned({"topology": {"instanceType": instance.value, "actor": {"nodes": 2}}})
    assert plan.efa_per_node == ALLOCATABLE_EFA[instance]


@pytest.mark.parametrize("instance", list(InstanceTypeName))
def test_an_efa_override_equal_to_the_instances_count_is_neither_warned_nor_refused(
    instance: InstanceTypeName,
) -> None:
    count = INSTANCES[instance].efa
    patch = {"topology": {"instanceType": instance.value, "actor": {"nodes": 2}, "efaPerNode": count}}
    assert problems_at("spec.topology.efaPerNode", patch) == []
    assert planned(patch)[0].efa_per_node == count


@pytest.mark.parametrize(("offset", "severity"), [(-1, Severity.WARNING), (1, Severity.ERROR)])
def test_an_efa_override_one_off_the_instances_count_is_warned_below_and_refused_above(
    offset: int, severity: Severity
) -> None:
    count = INSTANCES[InstanceTypeName.P5EN].efa + offset
    patch = {"topology": {"actor": {"nodes": 2}, "efaPerNode": count}}
    problems = problems_at("spec.topology.efaPerNode", patch)
    assert [p.severity for p in problems] == [severity]
    if severity is Severity.WARNING:
        assert planned(patch)[0].efa_per_node == count  # warned, and the pods request what was asked
