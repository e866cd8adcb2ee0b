"""The memory plan against what the seed saw on real H200 nodes (../shared/research/seed-testcase.md §6).

The estimator itself is held to megatron-core measurements in test_memory_calibration.py; these are the
seed's run outcomes, re-judged with it (docs/BENCHMARKS.md says where the two agree and why they differ).
"""

from __future__ import annotations

import pytest
import yaml
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.profiles import PROFILES, ModelProfileName

from tests.support.builders import EXAMPLES, base, check, merge


def plan_of(patch: dict) -> tuple:  # type: ignore[type-arg]
    run, problems = check(merge(base(), {"spec": patch}))
    assert run is not None, problems
    return make_plan(run), [p for p in problems if p.severity == "error"]


def moe_30b(nodes: int) -> dict:  # type: ignore[type-arg]
    """The seed's ALTERNATE 30B block: TP 2, EP 2, colocated (seed-testcase.md: 'ALTERNATE block')."""
    return {
        "model": {"profile": "qwen3-30b-a3b"},
        "topology": {
            "actor": {"nodes": nodes, "gpusPerNode": 8},
            "rollout": {"gpusPerEngine": 2, "expertParallel": 2, "memFraction": 0.75},
            "parallelism": {"tensor": 2, "expert": 2},
        },
    }


def test_qwen3_4b_colocated_tp1_fits_on_one_p5en() -> None:
    plan, problems = plan_of({})
    assert plan.fits and problems == []
    assert plan.total_gpus == 8 and plan.worker_replicas == 1


def test_qwen3_4b_colocated_runs_at_mem_fraction_0_8_and_not_at_0_85() -> None:
    ran, ran_problems = plan_of({"topology": {"rollout": {"memFraction": 0.8}}})
    failed, failed_problems = plan_of({"topology": {"rollout": {"memFraction": 0.85}}})
    assert ran.fits and ran_problems == []
    assert not failed.fits
    assert failed_problems[0].path == "spec.topology.rollout.memFraction"


def test_qwen3_30b_a3b_colocated_fits_on_16_gpus() -> None:
    plan, problems = plan_of(moe_30b(nodes=2))
    assert plan.fits and problems == []


def test_qwen3_30b_a3b_does_not_fit_on_8_gpus_even_with_the_optimizer_sharded() -> None:
    plan, problems = plan_of(moe_30b(nodes=1))
    assert not plan.fits
    static = plan.actor_memory.weights_gib + plan.actor_memory.grads_gib + plan.actor_memory.optimizer_gib
    assert static > 121 * 1e9 / 2**30  # the seed saw about 121 GB of static memory per GPU when it ran out
    assert "sharded over data parallelism, now 4" in problems[0].message


def test_qwen25_72b_tp4_pp2_dp1_on_two_p5en_does_not_fit_and_its_resident_state_alone_exceeds_the_gpu() -> None:
    run, _ = check(yaml.safe_load((EXAMPLES / "qwen25-72b-disaggregated.yaml").read_text()))
    assert run is not None
    plan = make_plan(run)
    assert not plan.fits
    assert plan.data_parallel == 1
    memory = plan.actor_memory
    # The seed's run died at about 144 GiB: a point of failure, so a lower bound of the need.
    assert memory.weights_gib + memory.grads_gib + memory.optimizer_gib > max(plan.gpu_gib, 144)
    assert plan.actor_gib_per_gpu > 1.4 * plan.gpu_gib


def test_a_qwen3_4b_training_checkpoint_is_about_53_gb() -> None:
    plan, _ = plan_of({})
    assert plan.checkpoint_gib == pytest.approx(53, rel=0.05)


@pytest.mark.parametrize(
    ("profile", "billions"),
    [("qwen3-4b", 4.02), ("qwen3-8b", 8.19), ("qwen3-30b-a3b", 30.5), ("glm-z1-9b", 9.4), ("qwen2.5-72b", 72.7)],
)
def test_parameter_counts_computed_from_the_architecture_match_the_published_sizes(
    profile: str, billions: float
) -> None:
    assert PROFILES[ModelProfileName(profile)].total_params / 1e9 == pytest.approx(billions, rel=0.01)


def test_more_tensor_parallelism_lowers_the_actor_estimate() -> None:
    tp1, _ = plan_of({})
    tp2, _ = plan_of({"topology": {"parallelism": {"tensor": 2}}})
    assert tp2.actor_gib_per_gpu < tp1.actor_gib_per_gpu


def test_single_node_runs_request_no_efa_and_multi_node_runs_request_all_of_it() -> None:
    one, _ = plan_of({})
    two, _ = plan_of({"topology": {"actor": {"nodes": 2}}})
    assert (one.efa_per_node, two.efa_per_node) == (0, 15)


def test_pinned_host_memory_is_checked_against_the_node() -> None:
    plan, problems = plan_of(
        {
            "model": {"profile": "qwen2.5-72b"},
            "topology": {"parallelism": {"tensor": 4}, "rollout": {"gpusPerEngine": 4, "memFraction": 0.5}},
        }
    )
    assert plan.host_gib_per_node > plan.host_capacity_gib and not plan.fits
    assert any("GiB of pinned host memory" in p.message for p in problems)


def test_qwen3_0_6b_has_exactly_the_parameters_of_its_checkpoint() -> None:
    # HF Qwen/Qwen3-0.6B: 751,632,384 values in the safetensors, which store the tied embedding twice (as
    # embed_tokens and lm_head, 151936 x 1024); the model card's 0.6B total and 0.44B without embeddings.
    profile = PROFILES[ModelProfileName.QWEN3_0_6B]
    assert profile.total_params == 751_632_384 - 151_936 * 1_024
    assert (round(profile.total_params / 1e9, 1), round((profile.total_params - 151_936 * 1_024) / 1e9, 2)) == (
        0.6,
        0.44,
    )
