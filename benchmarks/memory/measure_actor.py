"""Measure the Megatron actor's GPU memory, term by term, on one GPU with megatron-core.

This is the calibration harness of the memory plan (issue #14). It builds each profile's model the way
Megatron-LM's training loop builds it for miles -- `DDP(Float16Module(GPTModel))` with bf16 parameters,
fp32 gradient buffers (Megatron turns `accumulate_allreduce_grads_in_fp32` on for `--bf16`:
radixark/Megatron-LM miles-main 2e64d788 megatron/training/arguments.py:785-787), the distributed optimizer
(miles forces it on for adam: radixark/miles dec268f7 miles/backends/megatron_utils/arguments.py:15),
`get_megatron_optimizer` with Adam, full uniform recompute of one layer per checkpoint (our rendered argv,
render/job.py) -- and runs one micro-batch of T tokens through miles's default loss path: the last stage's
logits upcast to fp32 by Float16Module (megatron/core/transformer/module.py, `fp32_output=True`, which miles
does not change: miles/backends/megatron_utils/model.py:501-517), a per-sample fp32 copy and Megatron's
fused vocab-parallel cross entropy (miles/backends/training_utils/loss_hub/math_utils.py:280-299, 998-1012).
The "simple" loss is the true-on-policy path instead: fp32 log_softmax and gather (math_utils.py:288-291).

What stands in for the production stack, and why: attention is torch's scaled_dot_product_attention forced
to the flash kernel (Transformer Engine, which miles's image uses, is not on the measuring machine; both keep
O(T) attention memory); MoE experts run as Megatron's SequentialMLP (no grouped GEMM without TE); Adam is
torch's AdamW, Megatron's fallback when neither TE nor apex is installed (optimizer/__init__.py:13-33), whose
foreach step has a transient that TE's FusedAdam does not.

Run one case (prints one JSON object) or all of them, each in a fresh process so peaks do not leak:

    python3 benchmarks/memory/measure_actor.py --all --out measurements.json

Models that do not fit one GPU whole are cut to a few layers (`layers` in the case table): static bytes are
exact multiples of the parameter count, and per-layer activation terms are measured per layer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
ATTENTION: dict[str, str] = {"path": "unset"}


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    ffn: int
    heads: int
    groups: int
    kv_channels: int
    vocab: int
    tie: bool
    qkv_bias: bool
    qk_norm: bool
    rotary_base: int
    eps: float
    experts: int = 0
    moe_ffn: int = 0
    topk: int = 0


# The profiles of operator/grpo_operator/planning/profiles.py, as numbers (this script runs on a machine
# without the operator installed; tests/planning/test_memory_calibration.py checks the two agree).
SHAPES: dict[str, Shape] = {
    "qwen3-4b": Shape(36, 2560, 9728, 32, 8, 128, 151936, True, False, True, 1000000, 1e-6),
    "qwen3-8b": Shape(36, 4096, 12288, 32, 8, 128, 151936, False, False, True, 1000000, 1e-6),
    "qwen3-30b-a3b": Shape(48, 2048, 6144, 32, 4, 128, 151936, False, False, True, 1000000, 1e-6, 128, 768, 8),
    "qwen2.5-72b": Shape(80, 8192, 29568, 64, 8, 128, 152064, False, True, False, 1000000, 1e-6),
}


@dataclass(frozen=True)
class Case:
    name: str
    profile: str
    layers: int
    runs: tuple[tuple[int, str, float], ...]  # (tokens, loss, temperature)
    final_tokens: int  # one more step with everything resident: the measured total
    notes: str = ""
    env: dict[str, str] = field(default_factory=dict)


_T4 = ((2048, "miles", 1.0), (4096, "miles", 1.0), (8192, "miles", 1.0), (16384, "miles", 1.0))

CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case(
            "qwen3-4b-full",
            "qwen3-4b",
            36,
            (*_T4, (8192, "simple", 1.0), (16384, "simple", 1.0), (8192, "miles", 0.8)),
            8192,
            "whole model",
        ),
        Case(
            "qwen3-4b-full-expandable",
            "qwen3-4b",
            36,
            ((8192, "miles", 1.0),),
            8192,
            "whole model, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (allocator slack only)",
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        ),
        Case("qwen3-8b-4l", "qwen3-8b", 4, _T4, 8192, "cut to 4 layers"),
        Case("qwen3-30b-a3b-4l", "qwen3-30b-a3b", 4, _T4, 8192, "cut to 4 layers; SequentialMLP experts"),
        Case("qwen2.5-72b-2l", "qwen2.5-72b", 2, _T4, 8192, "cut to 2 layers"),
    ]
}


# --------------------------------------------------------------------------------------------------------
# Device side (imports torch and megatron lazily so `--help` and the case table work anywhere).


def _mem() -> dict[str, int]:
    import torch

    free, total = torch.cuda.mem_get_info()
    return {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "device_used": total - free,
    }


def _init_distributed() -> None:
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    model_parallel_cuda_manual_seed(1234)


def _flash_attention_class() -> Any:
    """Megatron's DotProductAttention with its O(T^2) core replaced by torch's flash kernel."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    class FlashDotProductAttention(DotProductAttention):  # type: ignore[misc]
        def forward(  # type: ignore[no-untyped-def]  # noqa: PLR0917 (Megatron's signature)
            self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None
        ):
            # [s, b, n, d] -> [b, n, s, d]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                if ATTENTION["path"] != "flash, kv expanded":
                    try:
                        out = F.scaled_dot_product_attention(
                            q, k, v, is_causal=True, scale=self.softmax_scale, enable_gqa=True
                        )
                        ATTENTION["path"] = "flash, enable_gqa"
                    except RuntimeError:
                        ATTENTION["path"] = "flash, kv expanded"
                if ATTENTION["path"] == "flash, kv expanded":
                    rep = q.size(1) // k.size(1)
                    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
            s, b = query.size(0), query.size(1)
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    del torch
    return FlashDotProductAttention


def _build(shape: Shape, layers: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    import torch
    import torch.nn.functional as F
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    moe: dict[str, Any] = {}
    if shape.experts:
        moe = dict(
            num_moe_experts=shape.experts,
            moe_ffn_hidden_size=shape.moe_ffn,
            moe_router_topk=shape.topk,
            moe_router_score_function="softmax",
            moe_token_dispatcher_type="alltoall",
            moe_router_dtype="fp32",
            moe_aux_loss_coeff=0.0,
            moe_router_load_balancing_type="none",
        )
    config = TransformerConfig(
        num_layers=layers,
        hidden_size=shape.hidden,
        ffn_hidden_size=shape.ffn,
        num_attention_heads=shape.heads,
        num_query_groups=shape.groups,
        kv_channels=shape.kv_channels,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=shape.qkv_bias,
        qk_layernorm=shape.qk_norm,
        normalization="RMSNorm",
        layernorm_epsilon=shape.eps,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        recompute_granularity="full",
        recompute_method="uniform",
        recompute_num_layers=1,
        **moe,
    )
    spec = get_gpt_layer_local_spec(
        num_experts=shape.experts or None, moe_grouped_gemm=False, qk_layernorm=shape.qk_norm, normalization="RMSNorm"
    )
    spec.submodules.self_attention.submodules.core_attention = _flash_attention_class()

    m0 = _mem()
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=shape.vocab,
        max_sequence_length=32768,
        share_embeddings_and_output_weights=shape.tie,
        position_embedding_type="rope",
        rotary_base=shape.rotary_base,
    ).cuda()
    model = Float16Module(config, model)
    torch.cuda.synchronize()
    m_weights = _mem()
    params = sum(p.numel() for p in model.parameters())
    expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True, check_for_nan_in_grad=False
    )
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    torch.cuda.synchronize()
    m_ddp = _mem()

    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=1e-6,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.98,
        clip_grad=1.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_distributed_optimizer=True,
    )
    optimizer = get_megatron_optimizer(opt_config, [ddp], use_gloo_process_groups=False)
    torch.cuda.synchronize()
    m_opt = _mem()
    inner = getattr(optimizer, "optimizer", None)
    info = {
        "params": params,
        "expert_params": expert_params,
        "optimizer_class": type(optimizer).__name__,
        "inner_optimizer_class": f"{type(inner).__module__}.{type(inner).__name__}" if inner is not None else None,
        "mem_before_model": m0,
        "weights_bytes": m_weights["allocated"] - m0["allocated"],
        "ddp_bytes": m_ddp["allocated"] - m_weights["allocated"],
        "optimizer_init_bytes": m_opt["allocated"] - m_ddp["allocated"],
        "mem_after_optimizer_init": m_opt,
    }
    grad_buffers = 0
    for buf in getattr(ddp, "buffers", []) + getattr(ddp, "expert_parallel_buffers", []):
        if getattr(buf, "grad_data", None) is not None:
            grad_buffers += buf.grad_data.numel() * buf.grad_data.element_size()
        info.setdefault("grad_dtype", str(buf.grad_data.dtype))
    info["grad_buffer_bytes"] = grad_buffers
    return ddp, optimizer, config, info


def _loss(logits: Any, tokens: Any, kind: str, temperature: float) -> Any:
    """miles's default log-prob path, or the true-on-policy (log_softmax) one; GRPO-style mean."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy

    logits = logits.view(-1, logits.size(-1))  # [1, T, V] -> [T, V] (thd format)
    if temperature != 1.0:
        logits = logits.div(temperature)  # logit_processors.py:55-56
    if kind == "miles":
        chunk = logits.contiguous().to(torch.float32, copy=True)  # math_utils.py:998-1012
        log_probs = -fused_vocab_parallel_cross_entropy(
            chunk.unsqueeze(1), tokens.unsqueeze(1), parallel_state.get_tensor_model_parallel_group()
        ).squeeze(1)
    else:
        log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    advantages = torch.randn_like(log_probs)
    return -(log_probs * advantages).mean()


def _step(ddp: Any, tokens_n: int, vocab: int, kind: str, temperature: float) -> dict[str, Any]:
    """One forward/backward of one micro-batch, with the memory at each phase boundary."""
    import torch

    module = ddp.module.module  # DDP -> Float16Module -> GPTModel
    rec: dict[str, Any] = {"tokens": tokens_n, "loss": kind, "temperature": temperature, "layer_allocated": []}
    handles = []

    forward_done = {"v": False}

    def after_layer(_m: Any, _i: Any, _o: Any) -> None:
        if not forward_done["v"]:  # layers run again when recomputed in the backward pass
            rec["layer_allocated"].append(torch.cuda.memory_allocated())

    for layer in module.decoder.layers:
        handles.append(layer.register_forward_hook(after_layer))

    def grad_reached_trunk(grad: Any) -> None:
        torch.cuda.synchronize()
        rec["logits_phase_peak"] = torch.cuda.max_memory_allocated()
        rec["trunk_backward_start"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()

    def after_decoder(_m: Any, _i: Any, out: Any) -> None:
        forward_done["v"] = True
        torch.cuda.synchronize()
        rec["trunk_forward_peak"] = torch.cuda.max_memory_allocated()
        rec["after_trunk_forward"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        hidden = out[0] if isinstance(out, tuple) else out
        hidden.register_hook(grad_reached_trunk)

    handles.append(module.decoder.register_forward_hook(after_decoder))

    tokens = torch.randint(0, vocab, (1, tokens_n), device="cuda")
    position_ids = torch.arange(tokens_n, device="cuda").unsqueeze(0)
    ddp.zero_grad_buffer()
    torch.cuda.synchronize()
    rec["before_forward"] = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        logits = ddp(input_ids=tokens, position_ids=position_ids, attention_mask=None, labels=None)
        rec["logits_dtype"] = str(logits.dtype)
        torch.cuda.synchronize()
        rec["after_model_forward"] = torch.cuda.memory_allocated()
        loss = _loss(logits, tokens.view(-1), kind, temperature)
        torch.cuda.synchronize()
        rec["after_loss_forward"] = torch.cuda.memory_allocated()
        del logits
        loss.backward()
        del loss
        ddp.finish_grad_sync()
        torch.cuda.synchronize()
        rec["trunk_backward_peak"] = torch.cuda.max_memory_allocated()
        rec["after_backward"] = torch.cuda.memory_allocated()
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["ok"] = True
    except torch.OutOfMemoryError as exc:
        rec["ok"] = False
        rec["error"] = f"OOM: {str(exc).splitlines()[0]}"
    finally:
        for h in handles:
            h.remove()
    return rec


def run_case(case: Case) -> dict[str, Any]:
    import megatron.core
    import torch

    shape = SHAPES[case.profile]
    started = time.perf_counter()
    _init_distributed()
    out: dict[str, Any] = {
        "case": case.name,
        "profile": case.profile,
        "layers": case.layers,
        "notes": case.notes,
        "env": case.env,
    }
    out["mem_after_init"] = _mem()
    ddp, optimizer, _config, info = _build(shape, case.layers)
    out.update(info)
    out["runs"] = [_step(ddp, t, shape.vocab, kind, temp) for t, kind, temp in case.runs]

    # First optimizer step: allocates the Adam moments; its peak minus the resident state is the transient.
    optimizer.zero_grad()
    ddp.zero_grad_buffer()
    _step(ddp, 2048, shape.vocab, "miles", 1.0)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    success, grad_norm, _ = optimizer.step()
    torch.cuda.synchronize()
    out["optimizer_step"] = {
        "success": bool(success),
        "grad_norm": float(grad_norm) if grad_norm is not None else None,
        "before": before,
        "peak": torch.cuda.max_memory_allocated(),
        "after": torch.cuda.memory_allocated(),
    }

    # With everything resident (weights, grads, main params, moments): the measured total for one step.
    torch.cuda.reset_peak_memory_stats()
    final = _step(ddp, case.final_tokens, shape.vocab, "miles", 1.0)
    torch.cuda.synchronize()
    optimizer.step()
    torch.cuda.synchronize()
    final["step_peak_allocated"] = torch.cuda.max_memory_allocated()
    final["max_reserved"] = torch.cuda.max_memory_reserved()
    final["mem_after"] = _mem()
    out["final"] = final
    out["versions"] = {
        "torch": torch.__version__,
        "megatron_core": megatron.core.__version__,
        "cuda": torch.version.cuda,
    }
    out["attention"] = ATTENTION["path"]
    out["device"] = torch.cuda.get_device_name(0)
    out["device_total_bytes"] = torch.cuda.mem_get_info()[1]
    out["seconds"] = round(time.perf_counter() - started, 1)
    torch.distributed.destroy_process_group()
    return out


def run_all(names: list[str], out_path: str) -> int:
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        env = {**os.environ, **CASES[name].env}
        proc = subprocess.run(
            [sys.executable, __file__, "--case", name],
            capture_output=True,
            text=True,
            timeout=420,
            check=False,
            env=env,
        )
        line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
        if proc.returncode == 0 and line:
            results.append(json.loads(line))
            print(f"{name}: ok in {time.perf_counter() - t0:.0f} s", flush=True)
        else:
            err = (proc.stderr or "")[-3000:]
            results.append({"case": name, "error": f"exit {proc.returncode}", "stderr_tail": err})
            print(f"{name}: FAILED exit {proc.returncode}\n{err}", flush=True)
        doc = {
            "command": "python3 benchmarks/memory/measure_actor.py --all --out " + out_path,
            "host": platform.node(),
            "python": platform.python_version(),
            "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_MAX_CONNECTIONS")},
            "wall_seconds": round(time.perf_counter() - started, 1),
            "cases": results,
        }
        with open(out_path, "w") as fh:
            json.dump(doc, fh, indent=1)
    _summary(results)
    return 0 if all("error" not in r for r in results) else 1


def _summary(results: list[dict[str, Any]]) -> None:
    print(
        f"{'case':18} {'params':>8} {'W B/p':>6} {'G B/p':>6} {'opt B/p':>8} {'T':>6} {'loss':>6} "
        f"{'ckpt B/tok/L/H':>14} {'logits B/tok/V':>14} {'layer KB/tok':>12}"
    )
    for r in results:
        if "error" in r:
            print(f"{r['case']:18} error {r['error']}")
            continue
        p = r["params"]
        opt = r["optimizer_step"]
        opt_bpp = (opt["after"] - opt["before"] + r["optimizer_init_bytes"]) / p
        hidden = SHAPES[r["profile"]].hidden
        vocab = SHAPES[r["profile"]].vocab
        for run in r["runs"]:
            if not run.get("ok"):
                print(f"{r['case']:18} T={run['tokens']} {run.get('error')}")
                continue
            t = run["tokens"]
            la = run["layer_allocated"]
            ckpt = (la[-1] - la[0]) / max(1, len(la) - 1) / t / hidden if len(la) > 1 else float("nan")
            logits = (run["logits_phase_peak"] - run["after_trunk_forward"]) / t / vocab
            layer = (run["trunk_backward_peak"] - run["trunk_backward_start"]) / t / 1024
            print(
                f"{r['case']:18} {p / 1e9:8.3f} {r['weights_bytes'] / p:6.2f} {r['grad_buffer_bytes'] / p:6.2f} "
                f"{opt_bpp:8.2f} {t:6d} {run['loss'] + ('' if run['temperature'] == 1.0 else '/T'):>6} "
                f"{ckpt:14.2f} {logits:14.2f} {layer:12.1f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--only", nargs="*", default=None, help="with --all: these cases only")
    parser.add_argument("--out", default="measurements.json")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(CASES[args.case])), flush=True)
        return 0
    if args.all:
        return run_all(args.only or list(CASES), args.out)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
