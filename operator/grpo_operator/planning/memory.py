"""Per-GPU memory estimates for the Megatron actor and the SGLang rollout engines. Pure arithmetic.

Actor (Megatron, bf16, Adam), per GPU:
- weights: 2 bytes per parameter of the GPU's shard; non-expert parameters are sharded by TP x PP, expert
  parameters by EP x ETP x PP;
- gradients: 2 bytes per parameter (bf16 grad buffers: the rendered flags do not pass
  --accumulate-allreduce-grads-in-fp32);
- optimizer: fp32 master weights and both Adam moments, 12 bytes per parameter, divided by the data-parallel
  size (DP x CP for non-expert, the expert-data-parallel size for experts) with the distributed optimizer;
- activations under full recompute at maxTokensPerGpu: the checkpointed input of every layer of the stage
  (sequence parallel shards it by TP) for as many micro-batches as pipeline stages are in flight, one layer's
  recompute working set (34 bytes x tokens x hidden / TP, flash attention), MoE dispatch buffers, and fp32
  logits with their gradient on the last stage;
- a fixed overhead for the CUDA context, NCCL communicators and allocator slack.
The reference model used by the KL loss is not on the GPU: miles keeps it in pinned host memory and swaps
it in (TensorBackuper), so it is counted in host memory.

Rollout (SGLang): `memFraction x GPU memory` is reserved for weights plus KV cache; what remains must hold
SGLang's workspace (CUDA graphs, activations) and, when colocated, what the offloaded actor leaves behind.
The two colocated constants are calibrated on the seed's observations (../shared/research/seed-testcase.md
§6): Qwen3-4B colocated on H200 ran at memFraction 0.8 and ran out of memory at 0.85.

Checkpoint: bf16 weights plus fp32 master weights and two Adam moments, 14 bytes per parameter (the seed
measured about 53 GB for Qwen3-4B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grpo_operator.planning.profiles import ModelProfile

GIB = 1024**3
WEIGHT_BYTES = 2
GRAD_BYTES = 2
OPTIMIZER_BYTES = 12
CHECKPOINT_BYTES = 14
ACTOR_OVERHEAD_GIB = 2.0
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
class ActorEstimate:
    params_per_gpu: float
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.grads_gib + self.optimizer_gib + self.activations_gib + self.overhead_gib

    @property
    def offloadable_gib(self) -> float:
        """What torch_memory_saver moves to host memory while the rollout runs (colocated)."""
        return self.weights_gib + self.grads_gib + self.optimizer_gib


@dataclass(frozen=True)
class RolloutEstimate:
    static_gib: float
    weights_gib: float
    kv_cache_gib: float
    kv_cache_tokens: int
    free_gib: float
    needed_free_gib: float


def actor_estimate(
    profile: ModelProfile, sharding: Sharding, max_tokens_per_gpu: int, distributed_optimizer: bool
) -> ActorEstimate:
    s = sharding
    dense = profile.dense_params / (s.tensor * s.pipeline)
    experts = profile.expert_params / (s.expert * s.expert_tensor * s.pipeline)
    params = dense + experts
    if distributed_optimizer:
        optimizer_params = dense / (s.data_parallel * s.context) + experts / s.expert_data_parallel
    else:
        optimizer_params = params

    tokens = max_tokens_per_gpu
    layers_per_stage = math.ceil(profile.num_layers / s.pipeline)
    hidden_bytes = tokens * profile.hidden_size * 2 / s.tensor
    checkpoints = layers_per_stage * hidden_bytes * s.pipeline
    working_set = 17 * hidden_bytes  # 34 bytes x tokens x hidden / TP
    dispatch = 2 * tokens * profile.moe.router_topk * profile.hidden_size * 2 if profile.moe else 0
    logits = 2 * tokens * profile.vocab_size * 4 / s.tensor
    return ActorEstimate(
        params_per_gpu=params,
        weights_gib=params * WEIGHT_BYTES / GIB,
        grads_gib=params * GRAD_BYTES / GIB,
        optimizer_gib=optimizer_params * OPTIMIZER_BYTES / GIB,
        activations_gib=(checkpoints + working_set + dispatch + logits) / GIB,
        overhead_gib=ACTOR_OVERHEAD_GIB,
    )


def rollout_estimate(profile: ModelProfile, gpus_per_engine: int, mem_fraction: float, gpu_gib: float, colocated: bool) -> RolloutEstimate:
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
