"""Built-in model architectures: the numbers miles needs as flags, and parameter counts computed from them.

Each profile carries the architecture exactly as miles's `scripts/models/<name>.sh` passes it to Megatron
(`--num-layers`, `--hidden-size`, ...). Parameter counts are computed from these numbers, never typed in,
so the memory plan and the rendered flags cannot disagree. Sources are cited per profile; miles checks the
flags against the checkpoint's HF `config.json` at start (`hf_validate_args`), so a wrong number here fails
fast rather than training the wrong shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_operator.api.catalog import ModelProfileName


@dataclass(frozen=True)
class MoE:
    """Mixture-of-experts block of a profile (every layer is MoE in the built-in ones)."""

    num_experts: int
    ffn_hidden_size: int
    router_topk: int


@dataclass(frozen=True)
class ModelProfile:
    """One architecture: shape numbers plus the extra Megatron flags that do not affect sizes."""

    name: ModelProfileName
    display: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    tie_embeddings: bool
    qkv_bias: bool
    qk_layernorm: bool
    post_norms: bool
    norm_epsilon: str
    rotary_base: str
    moe: MoE | None = None
    extra_flags: tuple[str, ...] = field(default=())

    # --- parameter counts (computed) -------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        q_width = self.num_attention_heads * self.kv_channels
        kv_width = self.num_query_groups * self.kv_channels
        weights = self.hidden_size * (q_width + 2 * kv_width) + q_width * self.hidden_size
        bias = (q_width + 2 * kv_width) if self.qkv_bias else 0
        qk_norm = 2 * self.kv_channels if self.qk_layernorm else 0
        return weights + bias + qk_norm

    @property
    def norm_params_per_layer(self) -> int:
        return self.hidden_size * (4 if self.post_norms else 2)

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return 0 if self.moe else 3 * self.hidden_size * self.ffn_hidden_size  # SwiGLU: gate, up, down

    @property
    def expert_params_per_layer(self) -> int:
        if self.moe is None:
            return 0
        return self.moe.num_experts * 3 * self.hidden_size * self.moe.ffn_hidden_size

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.moe.num_experts if self.moe else 0

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the output layer when it is not tied to it."""
        one = self.vocab_size * self.hidden_size
        return one if self.tie_embeddings else 2 * one

    @property
    def expert_params(self) -> int:
        """Parameters sharded by expert parallelism (EP x ETP)."""
        return self.num_layers * self.expert_params_per_layer

    @property
    def dense_params(self) -> int:
        """Parameters sharded by tensor parallelism: everything that is not an expert."""
        per_layer = (
            self.attention_params_per_layer
            + self.norm_params_per_layer
            + self.dense_mlp_params_per_layer
            + self.router_params_per_layer
        )
        return self.num_layers * per_layer + self.embedding_params + self.hidden_size  # + final norm

    @property
    def total_params(self) -> int:
        return self.dense_params + self.expert_params

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 KV cache bytes per token for the whole model (all layers, K and V)."""
        return 2 * self.num_layers * self.num_query_groups * self.kv_channels * 2

    def megatron_args(self) -> list[str]:
        """The model-architecture flags miles's `scripts/models/<name>.sh` would pass, as an argv list."""
        args = [
            "--swiglu",
            "--num-layers",
            str(self.num_layers),
            "--hidden-size",
            str(self.hidden_size),
            "--ffn-hidden-size",
            str(self.ffn_hidden_size),
            "--num-attention-heads",
            str(self.num_attention_heads),
            "--group-query-attention",
            "--num-query-groups",
            str(self.num_query_groups),
            "--kv-channels",
            str(self.kv_channels),
            "--use-rotary-position-embeddings",
            "--disable-bias-linear",
            "--normalization",
            "RMSNorm",
            "--norm-epsilon",
            self.norm_epsilon,
            "--rotary-base",
            self.rotary_base,
            "--vocab-size",
            str(self.vocab_size),
        ]
        if self.qkv_bias:
            args.append("--add-qkv-bias")
        if self.qk_layernorm:
            args.append("--qk-layernorm")
        if not self.tie_embeddings:
            args.append("--untie-embeddings-and-output-weights")
        if self.moe is not None:
            args += [
                "--num-experts",
                str(self.moe.num_experts),
                "--moe-ffn-hidden-size",
                str(self.moe.ffn_hidden_size),
                "--moe-router-topk",
                str(self.moe.router_topk),
            ]
        return args + list(self.extra_flags)


_QWEN3_MOE_FLAGS = (
    # miles scripts/models/qwen3-30B-A3B.sh (radixark/miles dec268f7): routing and dispatch settings.
    "--moe-router-score-function",
    "softmax",
    "--moe-token-dispatcher-type",
    "alltoall",
    "--moe-grouped-gemm",
    "--moe-token-drop-policy",
    "probs",
    "--moe-router-dtype",
    "fp32",
    "--moe-permute-fusion",
    "--moe-aux-loss-coeff",
    "0",
)

_GLM4_FLAGS = (
    # slime scripts/models/glm4-9B.sh and miles scripts/models/glm4-32B.sh: GLM-4 layer spec plugin.
    "--spec",
    "miles_plugins.models.glm4",
    "get_glm_spec",
    "--post-self-attn-layernorm",
    "--post-mlp-layernorm",
    "--rotary-interleaved",
    "--rotary-percent",
    "0.5",
    "--no-rope-fusion",
)

PROFILES: dict[ModelProfileName, ModelProfile] = {
    # HF Qwen/Qwen3-0.6B config.json (28 layers, hidden 1024, intermediate 3072, 16 heads, 8 KV heads, head_dim 128,
    # tie_word_embeddings: true); the flags of miles's Qwen3 scripts (scripts/models/qwen3-4B.sh) with these sizes.
    ModelProfileName.QWEN3_0_6B: ModelProfile(
        name=ModelProfileName.QWEN3_0_6B,
        display="Qwen3-0.6B",
        num_layers=28,
        hidden_size=1024,
        ffn_hidden_size=3072,
        num_attention_heads=16,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151936,
        tie_embeddings=True,
        qkv_bias=False,
        qk_layernorm=True,
        post_norms=False,
        norm_epsilon="1e-6",
        rotary_base="1000000",
    ),
    # miles scripts/models/qwen3-4B.sh; HF Qwen/Qwen3-4B config.json (tie_word_embeddings: true).
    ModelProfileName.QWEN3_4B: ModelProfile(
        name=ModelProfileName.QWEN3_4B,
        display="Qwen3-4B",
        num_layers=36,
        hidden_size=2560,
        ffn_hidden_size=9728,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151936,
        tie_embeddings=True,
        qkv_bias=False,
        qk_layernorm=True,
        post_norms=False,
        norm_epsilon="1e-6",
        rotary_base="1000000",
    ),
    # miles scripts/models/qwen3-8B.sh (untied embeddings).
    ModelProfileName.QWEN3_8B: ModelProfile(
        name=ModelProfileName.QWEN3_8B,
        display="Qwen3-8B",
        num_layers=36,
        hidden_size=4096,
        ffn_hidden_size=12288,
        num_attention_heads=32,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=151936,
        tie_embeddings=False,
        qkv_bias=False,
        qk_layernorm=True,
        post_norms=False,
        norm_epsilon="1e-6",
        rotary_base="1000000",
    ),
    # miles scripts/models/qwen3-30B-A3B.sh: 48 MoE layers, 128 experts of 768, top-8, no shared expert.
    ModelProfileName.QWEN3_30B_A3B: ModelProfile(
        name=ModelProfileName.QWEN3_30B_A3B,
        display="Qwen3-30B-A3B",
        num_layers=48,
        hidden_size=2048,
        ffn_hidden_size=6144,
        num_attention_heads=32,
        num_query_groups=4,
        kv_channels=128,
        vocab_size=151936,
        tie_embeddings=False,
        qkv_bias=False,
        qk_layernorm=True,
        post_norms=False,
        norm_epsilon="1e-6",
        rotary_base="1000000",
        moe=MoE(num_experts=128, ffn_hidden_size=768, router_topk=8),
        extra_flags=_QWEN3_MOE_FLAGS,
    ),
    # GLM-Z1-9B-0414 shares the GLM-4-9B-0414 architecture (HF config.json: 40 layers, hidden 4096,
    # intermediate 13696, 32 heads, 2 KV heads, head_dim 128, vocab 151552, attention_bias true,
    # partial_rotary_factor 0.5, rope_theta 10000, rms_norm_eps 1e-5); flags as slime's glm4-9B.sh.
    ModelProfileName.GLM_Z1_9B: ModelProfile(
        name=ModelProfileName.GLM_Z1_9B,
        display="GLM-Z1-9B",
        num_layers=40,
        hidden_size=4096,
        ffn_hidden_size=13696,
        num_attention_heads=32,
        num_query_groups=2,
        kv_channels=128,
        vocab_size=151552,
        tie_embeddings=False,
        qkv_bias=True,
        qk_layernorm=False,
        post_norms=True,
        norm_epsilon="1e-5",
        rotary_base="10000",
        extra_flags=_GLM4_FLAGS,
    ),
    # HF Qwen/Qwen2.5-72B config.json (80 layers, hidden 8192, intermediate 29568, 64 heads, 8 KV heads,
    # vocab 152064, untied, qkv bias, rms_norm_eps 1e-6); flags shaped like miles scripts/models/qwen2.5-32B.sh.
    ModelProfileName.QWEN25_72B: ModelProfile(
        name=ModelProfileName.QWEN25_72B,
        display="Qwen2.5-72B",
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=29568,
        num_attention_heads=64,
        num_query_groups=8,
        kv_channels=128,
        vocab_size=152064,
        tie_embeddings=False,
        qkv_bias=True,
        qk_layernorm=False,
        post_norms=False,
        norm_epsilon="1e-6",
        rotary_base="1000000",
    ),
}
