"""miles flags the operator manages, and the spec field that sets each one.

Rendering emits these flags from the spec; `spec.extraArgs` may not repeat them, since a second value would
silently win or conflict (miles parses strictly: an unknown flag aborts, a repeated one takes the last).
"""

from __future__ import annotations

# What miles's own recipes pass for these dense GQA models: Megatron's default dropout is 0.1 and miles never
# overrides it. Not for MLA models; no profile here is MLA (docs/integrations/miles.md: recipe flags).
RECIPE_ARGS: tuple[str, ...] = (
    "--attention-dropout",
    "0.0",
    "--hidden-dropout",
    "0.0",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--attention-backend",
    "flash",
)
RECIPE_REASON = "miles's recipe for these models, scripts/run_qwen3_4b.py:221-228"

_BY_FIELD: dict[str, tuple[str, ...]] = {
    "spec.model.profile": (
        "--swiglu",
        "--num-layers",
        "--hidden-size",
        "--ffn-hidden-size",
        "--num-attention-heads",
        "--group-query-attention",
        "--num-query-groups",
        "--kv-channels",
        "--use-rotary-position-embeddings",
        "--disable-bias-linear",
        "--normalization",
        "--norm-epsilon",
        "--rotary-base",
        "--vocab-size",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--untie-embeddings-and-output-weights",
        "--num-experts",
        "--moe-ffn-hidden-size",
        "--moe-router-topk",
        "--spec",
    ),
    "spec.model.hfCheckpoint": ("--hf-checkpoint",),
    "spec.model.torchDistCheckpoint": ("--ref-load",),
    "spec.storage.checkpointDir": ("--load", "--save"),
    "spec.storage.saveInterval": ("--save-interval",),
    "spec.storage.tensorboardDir": ("--tensorboard-dir", "--use-tensorboard"),
    "spec.data.promptData": ("--prompt-data",),
    "spec.data.inputKey": ("--input-key",),
    "spec.data.labelKey": ("--label-key",),
    "spec.data.applyChatTemplate": ("--apply-chat-template",),
    "spec.data.shuffle": ("--rollout-shuffle",),
    "spec.eval": (
        "--eval-interval",
        "--eval-prompt-data",
        "--n-samples-per-eval-prompt",
        "--eval-max-response-len",
    ),
    "spec.reward.type": ("--rm-type", "--rm-url", "--custom-rm-path"),
    "spec.rollout.numRollout": ("--num-rollout", "--num-epoch"),
    "spec.rollout.batchSize": ("--rollout-batch-size",),
    "spec.rollout.samplesPerPrompt": ("--n-samples-per-prompt",),
    "spec.rollout.maxResponseLen": ("--rollout-max-response-len",),
    "spec.rollout.temperature": ("--rollout-temperature",),
    "spec.training.globalBatchSize": ("--global-batch-size",),
    "spec.training.stepsPerRollout": ("--num-steps-per-rollout",),
    "spec.training.learningRate": ("--lr",),
    "spec.training.maxTokensPerGpu": ("--max-tokens-per-gpu", "--use-dynamic-batch-size"),
    "spec.training.klLossCoef": ("--kl-loss-coef", "--use-kl-loss", "--kl-loss-type"),
    "spec.training.epsClip": ("--eps-clip",),
    "spec.training.epsClipHigh": ("--eps-clip-high",),
    "spec.topology.parallelism.tensor": ("--tensor-model-parallel-size", "--sequence-parallel"),
    "spec.topology.parallelism.pipeline": ("--pipeline-model-parallel-size",),
    "spec.topology.parallelism.context": ("--context-parallel-size",),
    "spec.topology.parallelism.expert": ("--expert-model-parallel-size",),
    "spec.topology.rollout.expertParallel": ("--sglang-expert-parallel-size",),
    "spec.topology.parallelism.expertTensor": ("--expert-tensor-parallel-size",),
    "spec.topology.actor": ("--actor-num-nodes", "--actor-num-gpus-per-node", "--num-gpus-per-node"),
    "spec.topology.rollout.gpus": ("--rollout-num-gpus",),
    "spec.topology.rollout.gpusPerEngine": ("--rollout-num-gpus-per-engine",),
    "spec.topology.rollout.memFraction": ("--sglang-mem-fraction-static",),
    "spec.topology.placement": ("--colocate",),
    "status.metrics (the operator scrapes this port)": ("--use-prometheus", "--prometheus-port"),
    "the operator (fixed: lowercase level, SGLang rejects WARN)": ("--sglang-log-level",),
    "the operator (fixed: miles turns it on for adam, miles/backends/megatron_utils/arguments.py:15)": (
        "--use-distributed-optimizer",
    ),
    RECIPE_REASON: tuple(a for a in RECIPE_ARGS if a.startswith("--")),
}

MANAGED_FLAGS: dict[str, str] = {flag: field for field, flags in _BY_FIELD.items() for flag in flags}


def flag_name(arg: str) -> str | None:
    """The flag an argument names (`--x=1` -> `--x`), or None for a value."""
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0]
