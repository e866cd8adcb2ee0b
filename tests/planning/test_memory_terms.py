"""The memory estimate's sharding as `grpo plan` shows it: the distributed optimizer gives every GPU an equal
shard of the whole model's optimizer state however the model is split; tensor parallelism splits every activation
term, and the first pipeline stage holds one micro-batch's checkpoints per stage; a model without experts has no
expert-dispatch term; an engine's KV cache is what its static reservation leaves after the weights, none when
the weights exceed it."""

from __future__ import annotations

import dataclasses
import math

import pytest
from grpo_operator.api.catalog import ModelProfileName
from grpo_operator.planning.memory import (
    CHECKPOINT_EXTRA_HIDDEN_STATES,
    GIB,
    OPTIMIZER_BYTES,
    WORKING_SET_MOE_DISPATCH,
    WORKING_SET_MOE_EXPERT_PARALLEL,
    Sharding,
    activation_terms,
    actor_estimate,
    layer_working_set_per_token,
    rollout_estimate,
    tensor_parallel_fixed,
)
from grpo_operator.planning.profiles import PROFILES

MOE = PROFILES[ModelProfileName.QWEN3_30B_A3B]
DENSE = PROFILES[ModelProfileName.QWEN3_4B]  # ties its input and output embeddings
# Qwen2.5-72B cut to four layers, as measured: two per stage at PP 2
PIPELINED = dataclasses.replace(PROFILES[ModelProfileName.QWEN25_72B], num_layers=4)


@pytest.mark.parametrize(
    ("expert", "expert_tensor", "pipeline"),
    [(4, 1, 1), (4, 2, 1), (2, 2, 2), (8, 1, 2), (1, 2, 1)],
)
def test_every_gpu_holds_an_equal_shard_of_the_moe_models_optimizer_state(
    expert: int, expert_tensor: int, pipeline: int
) -> None:
    gpus = 16
    sharding = Sharding(gpus=gpus, pipeline=pipeline, expert=expert, expert_tensor=expert_tensor)
    estimate = actor_estimate(MOE, sharding, 4096)
    assert estimate.optimizer_params_per_gpu == pytest.approx(MOE.total_params / gpus, rel=1e-12)
    assert estimate.optimizer_gib == pytest.approx(MOE.total_params * OPTIMIZER_BYTES / gpus / GIB, rel=1e-12)


def test_a_sharding_left_at_its_defaults_is_one_gpu_unsplit() -> None:
    sharding = Sharding(gpus=8)
    assert (sharding.tensor, sharding.pipeline, sharding.context) == (1, 1, 1)
    assert (sharding.expert, sharding.expert_tensor) == (1, 1)
    assert (sharding.data_parallel, sharding.expert_data_parallel) == (8, 8)


def test_a_model_without_experts_has_no_expert_dispatch_in_its_layer_working_set() -> None:
    routed = MOE.moe
    assert routed is not None
    as_dense = dataclasses.replace(MOE, moe=None, ffn_hidden_size=routed.router_topk * routed.ffn_hidden_size)
    dispatch = WORKING_SET_MOE_DISPATCH * routed.router_topk * MOE.hidden_size
    assert layer_working_set_per_token(MOE) - layer_working_set_per_token(as_dense) == pytest.approx(dispatch, abs=1e-6)


def test_expert_parallelism_adds_a_dispatch_term_per_routed_copy_of_a_token_and_nothing_at_ep_1() -> None:
    """Traced (benchmarks/memory/trace-moe/): tokens that cross ranks leave the all-to-all's output beside its
    sorted copy at the layer's peak; fitted with both routers to WORKING_SET_MOE_EXPERT_PARALLEL."""
    routed = MOE.moe
    assert routed is not None
    tokens = 8192
    ep1 = activation_terms(MOE, Sharding(gpus=16, tensor=2), tokens)
    ep2 = activation_terms(MOE, Sharding(gpus=16, tensor=2, expert=2), tokens)
    added = WORKING_SET_MOE_EXPERT_PARALLEL * routed.router_topk * MOE.hidden_size * tokens / 2
    assert ep2.layer_working_set - ep1.layer_working_set == pytest.approx(added, rel=1e-12)
    assert activation_terms(DENSE, Sharding(gpus=16, tensor=2, expert=2), tokens).layer_working_set == (
        activation_terms(DENSE, Sharding(gpus=16, tensor=2), tokens).layer_working_set
    )


def test_tensor_parallelism_splits_every_activation_term_of_a_micro_batch() -> None:
    one = activation_terms(DENSE, Sharding(gpus=8), 8192)
    two = activation_terms(DENSE, Sharding(gpus=8, tensor=2), 8192)
    assert one.tied_output_grad > 0
    assert two.logits == pytest.approx(one.logits / 2, rel=1e-12)
    # The embedding's dense gradient halves; what reaches it per token does not: every TP rank embeds every token.
    weight_grad = 2 * DENSE.vocab_size * DENSE.hidden_size
    assert two.embedding_grad - weight_grad / 2 == pytest.approx(one.embedding_grad - weight_grad, rel=1e-12)
    # The checkpoints halve, and a single stage under sequence parallelism keeps one more hidden state (measured).
    hidden_state = 2 * DENSE.hidden_size * 8192 / 2
    for term in ("checkpoints", "checkpoints_last_stage"):
        assert getattr(two, term) - hidden_state == pytest.approx(getattr(one, term) / 2, rel=1e-12), term
    piped_one = activation_terms(DENSE, Sharding(gpus=8, pipeline=2), 8192)
    piped_two = activation_terms(DENSE, Sharding(gpus=8, pipeline=2, tensor=2), 8192)
    assert piped_two.checkpoints == pytest.approx(piped_one.checkpoints / 2, rel=1e-12)
    assert two.tied_output_grad == pytest.approx(one.tied_output_grad / 2, rel=1e-12)
    # The working set's per-token part halves; under TP it also holds one bf16 down-projection shard.
    fixed = tensor_parallel_fixed(DENSE, Sharding(gpus=8, tensor=2))
    assert fixed == pytest.approx(2 * DENSE.ffn_hidden_size * DENSE.hidden_size / 2, rel=1e-12)
    assert two.layer_working_set - fixed == pytest.approx(one.layer_working_set / 2, rel=1e-12)
    assert tensor_parallel_fixed(DENSE, Sharding(gpus=8)) == 0.0


def test_the_optimizer_step_transient_covers_the_larger_group_when_experts_have_an_optimizer_of_their_own() -> None:
    def shards(sharding: Sharding) -> tuple[float, float]:
        dense = MOE.dense_params / (sharding.tensor * sharding.pipeline) / (sharding.data_parallel * sharding.context)
        experts = MOE.expert_params / (sharding.expert * sharding.expert_tensor * sharding.pipeline)
        return dense, experts / sharding.expert_data_parallel

    own = Sharding(gpus=16, tensor=2, expert=2)  # EP > 1: expert parameters reduce over their own group
    dense, experts = shards(own)
    assert actor_estimate(MOE, own, 4096).step_transient_gib * GIB == pytest.approx(4 * max(dense, experts))
    shared = Sharding(gpus=8)  # EP 1 and ETP == TP: one optimizer steps every parameter at once
    dense, experts = shards(shared)
    assert actor_estimate(MOE, shared, 4096).step_transient_gib * GIB == pytest.approx(4 * (dense + experts))


def test_the_first_pipeline_stage_holds_the_checkpoints_of_as_many_micro_batches_as_there_are_stages() -> None:
    tokens, stages = 8192, 2
    terms = activation_terms(DENSE, Sharding(gpus=8, pipeline=stages), tokens)
    layers_per_stage = math.ceil(DENSE.num_layers / stages)
    per_stage = (layers_per_stage + CHECKPOINT_EXTRA_HIDDEN_STATES) * 2 * DENSE.hidden_size * tokens
    assert terms.checkpoints_last_stage == pytest.approx(per_stage, rel=1e-12)
    assert terms.checkpoints == pytest.approx(stages * per_stage, rel=1e-12)
    assert terms.tied_output_grad == 0.0  # the output layer is on another stage than the input embedding


def test_the_first_stages_embedding_backward_holds_the_other_micro_batches_and_the_gradient_it_received() -> None:
    """Traced at Qwen2.5-72B's first stage (benchmarks/memory/trace-first-stage/): when the backward reaches the
    embedding, 1F1B still holds PP - 1 micro-batches' checkpoints, and the gradient the next stage sent (one
    hidden state) is live through the whole backward."""
    tokens, stages = 4096, 2
    s = Sharding(gpus=8, pipeline=stages, tensor=4)
    terms = activation_terms(PIPELINED, s, tokens)
    hidden_state = 2 * PIPELINED.hidden_size * tokens / 4
    assert terms.received_grad == pytest.approx(hidden_state, rel=1e-12)
    others = terms.checkpoints - terms.checkpoints_last_stage
    assert others == pytest.approx((stages - 1) * terms.checkpoints_last_stage, rel=1e-12)
    assert terms.embedding_grad + others > terms.checkpoints + terms.layer_working_set  # this profile's case
    assert terms.trunk_backward == pytest.approx(terms.embedding_grad + others + hidden_state, rel=1e-12)
    single = activation_terms(PIPELINED, Sharding(gpus=8, tensor=4), tokens)
    assert single.received_grad == 0.0


@pytest.mark.parametrize(("tensor", "pipeline", "context"), [(1, 1, 2), (2, 1, 2), (2, 2, 1), (1, 2, 4)])
def test_every_gpu_holds_an_equal_shard_of_a_dense_models_optimizer_state(
    tensor: int, pipeline: int, context: int
) -> None:
    gpus = 16
    estimate = actor_estimate(DENSE, Sharding(gpus=gpus, tensor=tensor, pipeline=pipeline, context=context), 4096)
    assert estimate.optimizer_params_per_gpu == pytest.approx(DENSE.total_params / gpus, rel=1e-12)
    assert estimate.params_per_gpu == pytest.approx(DENSE.total_params / (tensor * pipeline), rel=1e-12)


def test_an_engine_whose_weights_exceed_its_static_reservation_has_no_kv_cache() -> None:
    big = PROFILES[ModelProfileName.QWEN25_72B]
    rollout = rollout_estimate(big, gpus_per_engine=1, mem_fraction=0.5, gpu_gib=140.0, colocated=False)
    assert rollout.weights_gib > rollout.static_gib
    assert (rollout.kv_cache_gib, rollout.kv_cache_tokens) == (0.0, 0)


def test_an_engine_left_half_a_gib_for_its_kv_cache_holds_the_tokens_that_fit_in_it() -> None:
    weights = DENSE.total_params * 2 / GIB  # bf16, one GPU per engine
    rollout = rollout_estimate(
        DENSE, gpus_per_engine=1, mem_fraction=(weights + 0.5) / 140.0, gpu_gib=140.0, colocated=False
    )
    assert rollout.kv_cache_gib == pytest.approx(0.5)
    assert rollout.kv_cache_tokens == int(0.5 * GIB / DENSE.kv_bytes_per_token) > 3000
