"""Measure one rank's shard of the Megatron actor under TP, EP, PP and CP, on one GPU, with a fake process group.

The sibling of `measure_actor.py` (the unsharded calibration, issue #14) for issue #49. torch's `fake`
backend (`torch.testing._internal.distributed.fake_pg.FakeStore`) lets megatron-core's
`initialize_model_parallel` build rank r's groups of a world of W ranks in one process; every collective
returns at once without data. So rank r's shard is built and stepped for real: its weights, its fp32 grad
buffer, its distributed-optimizer shard, one micro-batch's forward and backward (miles's loss path, as in
`measure_actor.py`), and the optimizer step. Memory, not numerics, is measured.

Three things stand in for what other ranks would send, and why:
- Token counts are symmetric: the gathers of the MoE dispatcher's per-expert counts (and
  `all_gather_object`, which the optimizer uses to align its parameter groups) return this rank's own
  value from every rank, as if every rank routed like this one. Without that the fake gather leaves its
  output uninitialised and the all-to-all sizes are garbage. Contents of other collectives stay unwritten.
- Megatron's torch-norm fallback (no Transformer Engine or apex) refuses sequence parallelism, so its
  constructor is replaced by one returning `torch.nn.RMSNorm` with each parameter marked
  `sequence_parallel` (replicated across the tensor group; the flag only routes the grad all-reduce).
- On the first of PP > 1 stages, PP micro-batches are run forward before the first backward, as 1F1B
  holds them; a middle or last stage receives a random bf16 hidden state as its pipeline input.

What no fake group shows: NCCL's own buffers, allocated outside torch's allocator (docs/memory-model.md).

    python3 benchmarks/memory/measure_sharded.py --all --out sharded.json
    python3 benchmarks/memory/measure_sharded.py --profile qwen3-30b-a3b --layers 4 --tp 2 --ep 2 --world 16 --rank 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_actor import ATTENTION, SHAPES, Shape, _flash_attention_class, _loss, _mem

SHAPES = {
    **SHAPES,
    # HF THUDM/GLM-Z1-9B-0414 config.json; GLM-4's two extra post-norms per layer (2 x hidden parameters)
    # are not in Megatron's local spec and are left out (0.0002% of a layer).
    "glm-z1-9b": Shape(40, 4096, 13696, 32, 2, 128, 151552, False, True, False, 10000, 1e-5),
}
ROTARY_PERCENT = {"glm-z1-9b": 0.5}
VOCAB_DIVISIBLE_BY = 128  # Megatron-LM's --make-vocab-size-divisible-by default, times TP


@dataclass(frozen=True)
class Layout:
    profile: str
    layers: int
    world: int
    rank: int = 0
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    tokens: tuple[int, ...] = (2048, 4096, 8192)  # the first is the warm-up (cuBLAS workspaces), not compared

    @property
    def name(self) -> str:
        parts = [f"tp{self.tp}"] + [f"{k}{v}" for k, v in (("pp", self.pp), ("cp", self.cp), ("ep", self.ep)) if v > 1]
        return f"{self.profile}-{self.layers}l-{'x'.join(parts)}-w{self.world}-r{self.rank}"


_30B = "qwen3-30b-a3b"
CASES: dict[str, Layout] = {
    c.name: c
    for c in [
        Layout("qwen3-4b", 36, world=8),  # DP8 control: must match the unsharded calibration
        Layout(_30B, 4, world=16, tp=2, ep=2),  # the seed's run that fitted; every 30B colocated example
        Layout(_30B, 4, world=8, tp=2, ep=2),  # the seed's run that ran out (about 121 GB)
        Layout(_30B, 4, world=8, ep=8),  # the disaggregated example: pure EP
        Layout(_30B, 4, world=16, tp=2),  # pure TP: all 128 experts on every rank
        Layout("glm-z1-9b", 4, world=8, tp=2),
        Layout("qwen2.5-72b", 4, world=8, tp=4, pp=2, rank=0),  # first stage: embedding, 2 micro-batches held
        Layout("qwen2.5-72b", 4, world=8, tp=4, pp=2, rank=7),  # last stage: output layer and logits
        Layout("qwen2.5-72b", 4, world=16, tp=4, pp=2, rank=0),  # the seed's 16 GPUs: DP2
        Layout("qwen2.5-72b", 4, world=16, tp=4, pp=2, rank=15),
    ]
}


# --------------------------------------------------------------------------------------------------------
# Device side.


def _symmetric_collectives() -> None:
    """Every collective that writes a new tensor writes this rank's own data (see the module docstring).

    The gathers give sizes (the MoE dispatcher's counts, `all_gather_object`) as if every rank were this
    one; the reduce-scatters and all-to-alls keep activations finite. Left unwritten, as the fake backend
    leaves them, they can hold NaN, and a router fed NaN sends every token to the first experts: one rank
    would receive every token of the expert-parallel group, a load no real run sees.
    """
    import torch
    import torch.distributed.distributed_c10d as c10d
    from megatron.core.tensor_parallel import mappings

    class _Done:
        def wait(self) -> bool:
            return True

    def done(async_op: bool) -> Any:
        return _Done() if async_op else None

    def fill(output: Any, source: Any) -> None:
        n = min(output.numel(), source.numel())
        flat = output.view(-1)
        flat[:n].copy_(source.reshape(-1)[:n])
        flat[n:].zero_()

    def all_gather(tensor_list: list[Any], tensor: Any, group: Any = None, async_op: bool = False) -> Any:
        for t in tensor_list:
            fill(t, tensor)
        return done(async_op)

    def all_gather_into_tensor(output: Any, input_: Any, group: Any = None, async_op: bool = False) -> Any:
        output.view(-1, input_.numel()).copy_(input_.reshape(1, -1))
        return done(async_op)

    def reduce_scatter_tensor(
        output: Any, input_: Any, op: Any = None, group: Any = None, async_op: bool = False
    ) -> Any:
        fill(output, input_)
        return done(async_op)

    def reduce_scatter(
        output: Any, input_list: list[Any], op: Any = None, group: Any = None, async_op: bool = False
    ) -> Any:
        fill(output, input_list[0])
        return done(async_op)

    def all_to_all_single(output: Any, input_: Any, *args: Any, async_op: bool = False, **kwargs: Any) -> Any:
        fill(output, input_)
        return done(async_op)

    c10d.all_gather = all_gather
    torch.distributed.all_gather = all_gather
    torch.distributed.reduce_scatter = reduce_scatter
    torch.distributed.all_to_all_single = all_to_all_single
    mappings.dist_all_gather_func = all_gather_into_tensor
    mappings.dist_reduce_scatter_func = reduce_scatter_tensor


def _sequence_parallel_rmsnorm() -> None:
    import torch
    from megatron.core.transformer import torch_norm

    def new(cls: Any, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> Any:
        norm = torch.nn.RMSNorm(hidden_size, eps=eps)
        for p in norm.parameters():
            p.sequence_parallel = config.sequence_parallel
        return norm

    torch_norm.WrappedTorchNorm.__new__ = new  # type: ignore[method-assign]


def _init_fake(layout: Layout) -> None:
    import torch
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.cuda.set_device(0)
    torch.distributed.init_process_group("fake", store=FakeStore(), rank=layout.rank, world_size=layout.world)
    parallel_state.initialize_model_parallel(
        layout.tp,
        layout.pp,
        context_parallel_size=layout.cp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.etp,
        create_gloo_process_groups=False,
    )
    model_parallel_cuda_manual_seed(1234)
    _symmetric_collectives()
    _sequence_parallel_rmsnorm()


def _config(shape: Shape, layout: Layout) -> Any:
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

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
            # --balanced-router: Megatron's own benchmark switch, random logits per token (router.py, RandomSTE), so
            # every expert gets about T x top-k / experts rows, as the plan assumes; off, the random router's load
            # moves from run to run.
            moe_router_force_load_balancing=os.environ.get("MEASURE_BALANCED_ROUTER") == "1",
        )
    return TransformerConfig(
        num_layers=layout.layers,
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
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        context_parallel_size=layout.cp,
        expert_model_parallel_size=layout.ep,
        expert_tensor_parallel_size=layout.etp,
        sequence_parallel=layout.tp > 1,
        **moe,
    )


def _build(shape: Shape, layout: Layout) -> tuple[Any, Any, dict[str, Any]]:
    import torch
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    config = _config(shape, layout)
    spec = get_gpt_layer_local_spec(
        num_experts=shape.experts or None, moe_grouped_gemm=False, qk_layernorm=shape.qk_norm, normalization="RMSNorm"
    )
    spec.submodules.self_attention.submodules.core_attention = _flash_attention_class()
    multiple = VOCAB_DIVISIBLE_BY * layout.tp
    vocab = -(-shape.vocab // multiple) * multiple
    first = parallel_state.is_pipeline_first_stage()
    last = parallel_state.is_pipeline_last_stage()

    m0 = _mem()
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=vocab,
        max_sequence_length=32768,
        pre_process=first,
        post_process=last,
        share_embeddings_and_output_weights=shape.tie,
        position_embedding_type="rope",
        rotary_base=shape.rotary_base,
        rotary_percent=float(os.environ.get("MEASURE_ROTARY_PERCENT", ROTARY_PERCENT.get(layout.profile, 1.0))),
    ).cuda()
    model = Float16Module(config, model)
    torch.cuda.synchronize()
    m_weights = _mem()
    info: dict[str, Any] = {
        "padded_vocab": vocab,
        "first_stage": first,
        "last_stage": last,
        "ranks": {
            "tp": parallel_state.get_tensor_model_parallel_rank(),
            "pp": parallel_state.get_pipeline_model_parallel_rank(),
            "ep": parallel_state.get_expert_model_parallel_rank(),
            "dp_cp_size": parallel_state.get_data_parallel_world_size(with_context_parallel=True),
            "expert_dp_size": parallel_state.get_expert_data_parallel_world_size(),
        },
        "params": sum(p.numel() for p in model.parameters()),
        "expert_params": sum(p.numel() for n, p in model.named_parameters() if ".experts." in n),
        "mem_before_model": m0,
        "weights_bytes": m_weights["allocated"] - m0["allocated"],
    }
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True, check_for_nan_in_grad=False
    )
    ddp = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    torch.cuda.synchronize()
    m_ddp = _mem()
    info["ddp_bytes"] = m_ddp["allocated"] - m_weights["allocated"]
    grad_bytes, shard_params = 0, 0
    for buf in getattr(ddp, "buffers", []) + getattr(ddp, "expert_parallel_buffers", []):
        grad_bytes += buf.grad_data.numel() * buf.grad_data.element_size()
        info["grad_dtype"] = str(buf.grad_data.dtype)
        shard_params += buf.grad_data.numel() // buf.data_parallel_world_size
    info["grad_buffer_bytes"] = grad_bytes
    info["optimizer_shard_params"] = shard_params  # what the distributed optimizer's state covers
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
    info["optimizer_init_bytes"] = _mem()["allocated"] - m_ddp["allocated"]
    info["optimizer_class"] = type(optimizer).__name__
    return ddp, optimizer, info


def _step_last(ddp: Any, layout: Layout, tokens_n: int, vocab: int, hidden: int) -> dict[str, Any]:
    """One micro-batch through a stage that holds the logits, phase by phase (as measure_actor._step)."""
    import torch

    module = ddp.module.module
    rec: dict[str, Any] = {"tokens": tokens_n, "loss": "miles", "temperature": 1.0, "layer_allocated": []}
    forward_done = {"v": False}

    def after_layer(_m: Any, _i: Any, _o: Any) -> None:
        if not forward_done["v"]:
            rec["layer_allocated"].append(torch.cuda.memory_allocated())

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
        (out[0] if isinstance(out, tuple) else out).register_hook(grad_reached_trunk)

    handles = [layer.register_forward_hook(after_layer) for layer in module.decoder.layers]
    rec["expert_rows"] = []
    for layer in module.decoder.layers:
        experts = getattr(layer.mlp, "experts", None)
        if experts is not None:
            handles.append(experts.register_forward_pre_hook(lambda _m, a: rec["expert_rows"].append(a[0].shape[0])))
    handles.append(module.decoder.register_forward_hook(after_decoder))
    tokens = torch.randint(0, vocab, (1, tokens_n), device="cuda")
    position_ids = torch.arange(tokens_n, device="cuda").unsqueeze(0)
    ddp.zero_grad_buffer()
    pipe_input = None
    if not module.pre_process:
        pipe_input = torch.randn(tokens_n // layout.tp, 1, hidden, device="cuda", dtype=torch.bfloat16)
        pipe_input.requires_grad_(True)
    torch.cuda.synchronize()
    rec["before_forward"] = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        if pipe_input is not None:
            ddp.module.set_input_tensor(pipe_input)
        logits = ddp(input_ids=tokens, position_ids=position_ids, attention_mask=None, labels=None)
        rec["logits_shape"] = list(logits.shape)
        loss = _loss(logits, tokens.view(-1), "miles", 1.0)
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
        rec.update(ok=False, error=f"OOM: {str(exc).splitlines()[0]}")
    finally:
        for h in handles:
            h.remove()
    return rec


def _step_first(ddp: Any, layout: Layout, tokens_n: int, vocab: int) -> dict[str, Any]:
    """PP micro-batches forward through the first of PP > 1 stages, then each backward (1F1B's warm-up)."""
    import torch

    in_flight = layout.pp
    rec: dict[str, Any] = {"tokens": tokens_n, "in_flight": in_flight}
    tokens = torch.randint(0, vocab, (1, tokens_n), device="cuda")
    position_ids = torch.arange(tokens_n, device="cuda").unsqueeze(0)
    ddp.zero_grad_buffer()
    torch.cuda.synchronize()
    rec["before_forward"] = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        outputs = [
            ddp(input_ids=tokens, position_ids=position_ids, attention_mask=None, labels=None) for _ in range(in_flight)
        ]
        torch.cuda.synchronize()
        rec["output_shape"] = list(outputs[0].shape)
        rec["forward_peak"] = torch.cuda.max_memory_allocated()
        rec["after_forwards"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        while outputs:
            out = outputs.pop()
            out.backward(torch.randn_like(out))  # what the next stage would send back
            del out
        ddp.finish_grad_sync()
        torch.cuda.synchronize()
        rec["trunk_backward_peak"] = torch.cuda.max_memory_allocated()
        rec["after_backward"] = torch.cuda.memory_allocated()
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["ok"] = True
    except torch.OutOfMemoryError as exc:
        rec.update(ok=False, error=f"OOM: {str(exc).splitlines()[0]}")
    return rec


def run_case(layout: Layout) -> dict[str, Any]:
    import megatron.core
    import torch

    shape = SHAPES[layout.profile]
    started = time.perf_counter()
    _init_fake(layout)
    out: dict[str, Any] = {"case": layout.name, **asdict(layout), "mem_after_init": _mem()}
    ddp, optimizer, info = _build(shape, layout)
    out.update(info)
    vocab = info["padded_vocab"]

    def step(t: int) -> dict[str, Any]:
        if info["last_stage"]:
            return _step_last(ddp, layout, t, vocab, shape.hidden)
        return _step_first(ddp, layout, t, vocab)

    out["runs"] = [step(t) for t in layout.tokens]
    optimizer.zero_grad()
    step(layout.tokens[0])
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    success, _grad_norm, _ = optimizer.step()
    torch.cuda.synchronize()
    out["optimizer_step"] = {
        "success": bool(success),
        "before": before,
        "peak": torch.cuda.max_memory_allocated(),
        "after": torch.cuda.memory_allocated(),
    }
    torch.cuda.reset_peak_memory_stats()
    final = step(layout.tokens[-1])
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
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def run_all(names: list[str], out_path: str, timeout: int) -> int:
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--case", name], capture_output=True, text=True, timeout=timeout, check=False
            )
            rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, stdout, stderr = -1, "", f"timed out after {timeout} s\n{exc.stderr or ''}"
        line = next((ln for ln in reversed((stdout or "").splitlines()) if ln.startswith("{")), None)
        if rc == 0 and line:
            results.append(json.loads(line))
            print(f"{name}: ok in {time.perf_counter() - t0:.0f} s", flush=True)
        else:
            err = (stderr if isinstance(stderr, str) else (stderr or b"").decode())[-4000:]
            results.append({"case": name, "error": f"exit {rc}", "stderr_tail": err})
            print(f"{name}: FAILED exit {rc}\n{err}", flush=True)
        doc = {
            "command": "python3 benchmarks/memory/measure_sharded.py --all --out "
            + os.path.basename(out_path)
            + (" --balanced-router" if os.environ.get("MEASURE_BALANCED_ROUTER") == "1" else ""),
            "balanced_router": os.environ.get("MEASURE_BALANCED_ROUTER") == "1",
            "host": platform.node(),
            "python": platform.python_version(),
            "wall_seconds": round(time.perf_counter() - started, 1),
            "cases": results,
        }
        with open(out_path, "w") as fh:
            json.dump(doc, fh, indent=1)
    _summary(results)
    return 0 if all("error" not in r for r in results) else 1


def _summary(results: list[dict[str, Any]]) -> None:
    gib = 1024**3
    print(f"{'case':44} {'params':>7} {'W GiB':>6} {'G GiB':>6} {'opt GiB':>7} {'T':>5} {'act peak GiB':>12}")
    for r in results:
        if "error" in r:
            print(f"{r['case']:44} error {r['error']}")
            continue
        opt = r["optimizer_step"]
        opt_bytes = r["optimizer_init_bytes"] + opt["after"] - opt["before"]
        for run in r["runs"]:
            if not run.get("ok"):
                print(f"{r['case']:44} T={run['tokens']} {run.get('error')}")
                continue
            peak = max(run.get("logits_phase_peak", 0), run["trunk_backward_peak"], run.get("forward_peak", 0))
            print(
                f"{r['case']:44} {r['params'] / 1e9:7.3f} {r['weights_bytes'] / gib:6.2f} "
                f"{r['grad_buffer_bytes'] / gib:6.2f} {opt_bytes / gib:7.2f} {run['tokens']:5d} "
                f"{(peak - run['before_forward']) / gib:12.2f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--only", nargs="*", default=None, help="with --all: these cases only")
    parser.add_argument("--out", default="sharded.json")
    parser.add_argument("--timeout", type=int, default=240, help="seconds per case")
    parser.add_argument("--profile", choices=sorted(SHAPES), help="a layout of your own, in this process")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--balanced-router", action="store_true", help="MoE: route every token at random (balanced)")
    parser.add_argument("--rotary-percent", type=float, help="with --profile: override the profile's rotary share")
    for flag in ("tp", "pp", "cp", "ep", "etp", "world", "rank"):
        parser.add_argument(f"--{flag}", type=int, default=1 if flag != "rank" else 0)
    args = parser.parse_args()
    if args.balanced_router:
        os.environ["MEASURE_BALANCED_ROUTER"] = "1"  # the cases' own processes inherit it
    if args.case:
        print(json.dumps(run_case(CASES[args.case])), flush=True)
        return 0
    if args.profile:
        if args.rotary_percent is not None:
            os.environ["MEASURE_ROTARY_PERCENT"] = str(args.rotary_percent)
        sizes = {k: getattr(args, k) for k in ("tp", "pp", "cp", "ep", "etp", "world", "rank")}
        print(json.dumps(run_case(Layout(args.profile, args.layers, **sizes))), flush=True)
        return 0
    if args.all:
        return run_all(args.only or list(CASES), args.out, args.timeout)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
