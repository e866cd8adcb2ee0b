"""Per-GPU memory estimates for the Megatron actor and the SGLang rollout engines. Pure arithmetic.

The actor's terms (weights, fp32 gradients, sharded optimizer state, the optimizer step's transient, activations
under full recompute, the CUDA context, an allocator margin) are sharded as Megatron shards them and fitted to
measurements on an H200 (`benchmarks/memory/measurements.json`, held to them by
`tests/planning/test_memory_calibration.py`), and one rank's shard of TP, EP and PP layouts to measurements with
a fake process group (`benchmarks/memory/measurements-sharded.json`, `tests/planning/test_memory_sharded.py`).
The rollout side follows how SGLang sizes its KV pool from
`memFraction`; its remaining constants are calibrated on observed runs, not measured. docs/memory-model.md
derives each term; docs/integrations/megatron-sglang.md lists the upstream behaviour it relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo_operator.planning.profiles import ModelProfile

GIB = 1024**3
WEIGHT_BYTES = 2
GRAD_BYTES = 4
OPTIMIZER_BYTES = 12
STEP_TRANSIENT_BYTES = 4
CHECKPOINT_BYTES = 14
LOGITS_BYTES = 12  # per token per vocabulary entry (per TP shard), miles's default log-prob path
LOGITS_BYTES_TEMPERATURE = 16  # the same with --rollout-temperature != 1
CHECKPOINT_EXTRA_HIDDEN_STATES = 2  # embedding output and final norm output, beside one per layer
# Measured on one H200 (docs/memory-model.md, issue #49): under sequence parallelism (TP > 1) a stage holding both
# the embedding and the logits (PP = 1) keeps one more hidden state from its first layer on (GLM-Z1-9B and Qwen3-4B
# at TP2; none at TP1; the rotary share changes nothing; a PP > 1 first stage shows none). Which tensor it is was
# not isolated: the term is the measurement's.
SEQUENCE_PARALLEL_SINGLE_STAGE_HIDDEN_STATES = 1
# One layer's recompute working set, bytes per token: a x hidden + b x ffn + c x (q + 2 kv) widths, fitted
# to Qwen3-4B, Qwen3-8B and Qwen2.5-72B; MoE adds d x hidden per routed copy (top-k), and e more under EP > 1,
# fitted to Qwen3-30B-A3B: unsharded, and at TP2 (EP 1), TP2 x EP2 and EP8 with a random and with a balanced
# router (16 readings, all within 4.8%). What e is, traced (benchmarks/memory/trace-moe/): under EP > 1 the
# layer's peak holds one more copy of the routed rows than at EP 1 (the all-to-all's output beside its
# sorted copy), while some expert outputs are already freed; the net is e, not a whole bf16 copy (2).
WORKING_SET_HIDDEN = 8.56
WORKING_SET_FFN = 12.46
WORKING_SET_QKV = 7.91
WORKING_SET_MOE_DISPATCH = 8.2
WORKING_SET_MOE_EXPERT_PARALLEL = 1.6
# Under tensor parallelism (with sequence parallelism, as rendered), one layer's backward also holds a bf16
# tensor the size of the dense FFN's down-projection shard, 2 x ffn x hidden / TP bytes per layer, fixed in
# the tokens (measured with a fake process group: Qwen2.5-72B TP4, GLM-Z1-9B TP2; docs/memory-model.md).
SEQUENCE_PARALLEL_WEIGHT_GRAD_BYTES = 2
# While the input embedding's dense gradient exists, per token of the whole micro-batch: torch's embedding
# backward sums in fp32 partial segments (about 1.1 x tokens x hidden x 4 bytes) beside the bf16 gradient that
# reaches it (2). Not divided by TP: every tensor-parallel rank embeds every token (the output is reduce-scattered
# after). Fitted at TP1 (Qwen3-8B, Qwen2.5-72B); the traced peak of Qwen2.5-72B's first stage at TP1, 2 and 4
# holds the same 140.78 MiB of partials at 4096 tokens (benchmarks/memory/trace-first-stage/).
EMBEDDING_BACKWARD_HIDDEN = 6.5
CONTEXT_GIB = 2.5
ALLOCATOR_MARGIN = 0.10
ALLOCATOR_MARGIN_MIN_GIB = 4.0
SGLANG_WORKSPACE_GIB = 12.0
OFFLOADED_ACTOR_RESIDUE_GIB = 10.0
RELEASED_ROLLOUT_RESIDUE_GIB = 3.0


@dataclass(frozen=True)
class Sharding:
    """How the actor is split: Megatron parallel sizes over `gpus` GPUs."""

    gpus: int
    tensor: int = 1
    pipeline: int = 1
    context: int = 1
    expert: int = 1
    expert_tensor: int = 1

    @property
    def data_parallel(self) -> int:
        return max(1, self.gpus // (self.tensor * self.pipeline * self.context))

    @property
    def expert_data_parallel(self) -> int:
        return max(1, self.gpus // (self.expert * self.expert_tensor * self.pipeline))


@dataclass(frozen=True)
class Activations:
    """The activation terms of one micro-batch, bytes per GPU, and the peak they make."""

    checkpoints: float  # first stage: PP micro-batches in flight
    checkpoints_last_stage: float
    layer_working_set: float
    logits: float
    embedding_grad: float
    tied_output_grad: float
    received_grad: float  # PP > 1: the gradient the next stage sent, one hidden state, live through the backward

    @property
    def logits_phase(self) -> float:
        return self.checkpoints_last_stage + self.logits

    @property
    def trunk_backward(self) -> float:
        """The first stage's backward: one layer's working set beside every checkpoint, or, at its end, the
        embedding's gradient beside the other micro-batches' checkpoints (1F1B keeps PP - 1 more in flight)."""
        others = self.checkpoints - self.checkpoints_last_stage
        embedding_phase = self.embedding_grad + others
        return (
            max(self.checkpoints + self.layer_working_set, embedding_phase) + self.tied_output_grad + self.received_grad
        )

    @property
    def peak(self) -> float:
        return max(self.logits_phase, self.trunk_backward)


@dataclass(frozen=True)
class ActorEstimate:
    params_per_gpu: float
    optimizer_params_per_gpu: float
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations: Activations
    step_transient_gib: float
    context_gib: float

    @property
    def static_gib(self) -> float:
        return self.weights_gib + self.grads_gib + self.optimizer_gib

    @property
    def activations_gib(self) -> float:
        return self.activations.peak / GIB

    @property
    def transient_gib(self) -> float:
        """What comes on top of the resident state at the peak: activations, or the optimizer step."""
        return max(self.activations_gib, self.step_transient_gib)

    @property
    def allocated_gib(self) -> float:
        """The peak of `torch.cuda.max_memory_allocated()`: what the measurements are held to."""
        return self.static_gib + self.transient_gib

    @property
    def allocator_margin_gib(self) -> float:
        return max(ALLOCATOR_MARGIN_MIN_GIB, ALLOCATOR_MARGIN * self.allocated_gib)

    @property
    def total_gib(self) -> float:
        return self.allocated_gib + self.context_gib + self.allocator_margin_gib

    @property
    def offloadable_gib(self) -> float:
        """What torch_memory_saver moves to host memory while the rollout runs (colocated)."""
        return self.static_gib


@dataclass(frozen=True)
class RolloutEstimate:
    static_gib: float
    weights_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    free_gib: float
    needed_free_gib: float


def layer_working_set_per_token(profile: ModelProfile) -> float:
    """Bytes per token of one layer's recompute and backward, before tensor-parallel sharding."""
    attention = profile.num_attention_heads * profile.kv_channels + 2 * profile.num_query_groups * profile.kv_channels
    if profile.moe is None:
        ffn, dispatch = profile.ffn_hidden_size, 0.0
    else:
        ffn = profile.moe.router_topk * profile.moe.ffn_hidden_size
        dispatch = WORKING_SET_MOE_DISPATCH * profile.moe.router_topk * profile.hidden_size
    return WORKING_SET_HIDDEN * profile.hidden_size + WORKING_SET_FFN * ffn + WORKING_SET_QKV * attention + dispatch


def expert_parallel_dispatch_per_token(profile: ModelProfile, sharding: Sharding) -> float:
    """What a MoE layer's working set holds more per token when tokens cross ranks (EP > 1)."""
    if profile.moe is None or sharding.expert == 1:
        return 0.0
    return WORKING_SET_MOE_EXPERT_PARALLEL * profile.moe.router_topk * profile.hidden_size


def tensor_parallel_fixed(profile: ModelProfile, sharding: Sharding) -> float:
    """The working set's part that does not grow with the tokens, seen only under TP > 1 (dense FFNs)."""
    if sharding.tensor == 1 or profile.moe is not None:
        return 0.0
    return SEQUENCE_PARALLEL_WEIGHT_GRAD_BYTES * profile.ffn_hidden_size * profile.hidden_size / sharding.tensor


def step_transient_params(profile: ModelProfile, sharding: Sharding, dense: float, experts: float) -> float:
    """Parameters whose fp32 step temporaries coexist: Megatron steps expert parameters with an optimizer of
    their own (a ChainedOptimizer runs one after the other) when they are reduced over a group of their own,
    i.e. with EP > 1 or ETP != TP (megatron/core/tensor_parallel/layers.py, `use_expert_pgs`)."""
    s = sharding
    if profile.moe is not None and (s.expert > 1 or s.expert_tensor != s.tensor):
        return max(dense, experts)
    return dense + experts


def activation_terms(profile: ModelProfile, sharding: Sharding, tokens: int, temperature: float = 1.0) -> Activations:
    s = sharding
    layers = math.ceil(profile.num_layers / s.pipeline)
    hidden_state = 2 * profile.hidden_size * tokens / s.tensor
    per_stage_checkpoints = (layers + CHECKPOINT_EXTRA_HIDDEN_STATES) * hidden_state
    if s.tensor > 1 and s.pipeline == 1:
        per_stage_checkpoints += SEQUENCE_PARALLEL_SINGLE_STAGE_HIDDEN_STATES * hidden_state
    embedding = 2 * profile.vocab_size * profile.hidden_size / s.tensor
    embedding_backward = embedding + EMBEDDING_BACKWARD_HIDDEN * profile.hidden_size * tokens
    logit_bytes = LOGITS_BYTES if temperature == 1.0 else LOGITS_BYTES_TEMPERATURE
    return Activations(
        checkpoints=per_stage_checkpoints * s.pipeline,
        checkpoints_last_stage=per_stage_checkpoints,
        layer_working_set=(layer_working_set_per_token(profile) + expert_parallel_dispatch_per_token(profile, s))
        * tokens
        / s.tensor
        + tensor_parallel_fixed(profile, s),
        logits=logit_bytes * tokens * profile.vocab_size / s.tensor,
        embedding_grad=embedding_backward,
        tied_output_grad=embedding if profile.tie_embeddings and s.pipeline == 1 else 0.0,
        received_grad=hidden_state if s.pipeline > 1 else 0.0,
    )


def actor_estimate(
    profile: ModelProfile, sharding: Sharding, max_tokens_per_gpu: int, temperature: float = 1.0
) -> ActorEstimate:
    s = sharding
    dense = profile.dense_params / (s.tensor * s.pipeline)
    experts = profile.expert_params / (s.expert * s.expert_tensor * s.pipeline)
    params = dense + experts
    dense_shard = dense / (s.data_parallel * s.context)
    expert_shard = experts / s.expert_data_parallel
    optimizer_params = dense_shard + expert_shard
    return ActorEstimate(
        params_per_gpu=params,
        optimizer_params_per_gpu=optimizer_params,
        weights_gib=params * WEIGHT_BYTES / GIB,
        grads_gib=params * GRAD_BYTES / GIB,
        optimizer_gib=optimizer_params * OPTIMIZER_BYTES / GIB,
        activations=activation_terms(profile, s, max_tokens_per_gpu, temperature),
        step_transient_gib=step_transient_params(profile, s, dense_shard, expert_shard) * STEP_TRANSIENT_BYTES / GIB,
        context_gib=CONTEXT_GIB,
    )


def rollout_estimate(
    profile: ModelProfile, gpus_per_engine: int, mem_fraction: float, gpu_gib: float, colocated: bool
) -> RolloutEstimate:
    static = mem_fraction * gpu_gib
    weights = profile.total_params * WEIGHT_BYTES / gpus_per_engine / GIB
    kv_gib = max(0.0, static - weights)
    # KV heads are split by the engine's TP, and replicated when TP exceeds them.
    kv_shards = min(gpus_per_engine, profile.num_query_groups)
    kv_tokens = int(kv_gib * GIB / (profile.kv_bytes_per_token / kv_shards)) if kv_gib > 0 else 0
    needed = SGLANG_WORKSPACE_GIB + (OFFLOADED_ACTOR_RESIDUE_GIB if colocated else 0.0)
    return RolloutEstimate(
        static_gib=static,
        weights_gib=weights,
        kv_cache_gib=kv_gib,
        kv_cache_tokens=kv_tokens,
        free_gib=gpu_gib - static,
        needed_free_gib=needed,
    )


def checkpoint_gib(profile: ModelProfile) -> float:
    return profile.total_params * CHECKPOINT_BYTES / GIB


def host_gib_per_node(actor: ActorEstimate, rollout: RolloutEstimate, gpus_per_node: int, colocated: bool) -> float:
    """Pinned host memory per node: reference weights, plus offloaded actor and engine weights when colocated."""
    per_gpu = actor.weights_gib  # reference model copy (TensorBackuper)
    if colocated:
        per_gpu += actor.offloadable_gib + rollout.weights_gib
    return per_gpu * gpus_per_node
