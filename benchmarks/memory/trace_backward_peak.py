"""What is live at a stage's backward peak, by the code that allocated it (issue #49).

`measure_sharded.py` measures each phase as one number. This script runs the same case (same fake process
group, same model, same micro-batches) with torch's allocator history on, replays the history to the moment
of the peak, and groups what was allocated in the window and is still live by the allocating call: the
innermost frame in megatron-core, in torch and in these scripts. It names the term the plan is missing rather
than fitting a constant to it. Two windows:

- a first stage of PP > 1 (`--tp 4 --pp 2`): from before the forwards of the PP micro-batches in flight to
  the end of their backward (what `measure_sharded.py` calls the trunk backward there);
- a stage holding the logits (`--window trunk`): from the moment the loss's gradient reaches the decoder's
  output to the end of the backward, `measure_sharded.py`'s layer working set. The script marks that moment
  in the history with one allocation of a size nothing else uses (at each `reset_peak_memory_stats`, which
  `measure_sharded._step_last` calls there).

    python3 benchmarks/memory/trace_backward_peak.py --profile qwen2.5-72b --layers 4 --tp 4 --pp 2 --world 8 \
        --tokens 2048 4096 8192 --out trace.json
    python3 benchmarks/memory/trace_backward_peak.py --window trunk --profile qwen3-30b-a3b --layers 4 --tp 2 \
        --ep 2 --world 16 --balanced-router --out trace.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_sharded import SHAPES, Layout, _build, _init_fake, _step_last

MIB = 2**20
MARKER_BYTES = 512 * 4099  # an allocation size no model tensor here has: the window's start in the history


def _site(frames: list[dict[str, Any]]) -> str:
    """The allocating call as 'megatron frame | torch frame' (python frames, innermost first)."""
    megatron = next((f for f in frames if "/megatron/" in f["filename"]), None)
    torch_frame = next((f for f in frames if "/torch/" in f["filename"]), None)
    ours = next((f for f in frames if "benchmarks/memory" in f["filename"]), None)

    def name(f: dict[str, Any] | None) -> str:
        if f is None:
            return "-"
        path = f["filename"]
        cut = path.split("site-packages/")[-1]
        return f"{cut}:{f['line']} {f['name']}"

    return f"{name(megatron)} | {name(torch_frame)} | {name(ours)}"


def _replay(events: list[dict[str, Any]], start: int = 0) -> dict[str, Any]:
    """From event `start` on: the peak of allocations less frees (frees of blocks allocated before the window
    count too), and what the window allocated and still held at that peak, grouped by site."""
    current, peak, peak_at, freed_before = 0, 0, start - 1, 0
    window: set[int] = set()
    freed_at_peak = 0
    for i, e in enumerate(events[start:], start):
        if e["action"] == "alloc":
            window.add(e["addr"])
            current += e["size"]
        elif e["action"] == "free_requested":
            current -= e["size"]
            if e["addr"] in window:
                window.discard(e["addr"])
            else:
                freed_before += e["size"]
        if current > peak:
            peak, peak_at, freed_at_peak = current, i, freed_before
    live: dict[int, dict[str, Any]] = {}
    for e in events[start : peak_at + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    groups: dict[str, list[int]] = defaultdict(list)
    for e in live.values():
        groups[_site(e.get("frames") or [])].append(e["size"])
    rows = sorted(
        (
            {
                "site": k,
                "count": len(v),
                "mib": round(sum(v) / MIB, 2),
                "sizes_mib": sorted({round(s / MIB, 2) for s in v}),
            }
            for k, v in groups.items()
        ),
        key=lambda r: -r["mib"],
    )
    return {
        "peak_above_start_mib": round(peak / MIB, 2),
        "freed_from_before_the_window_mib": round(freed_at_peak / MIB, 2),
        "event_index": peak_at,
        "events": len(events),
        "live": rows,
    }


def trace(layout: Layout, tokens_list: list[int]) -> dict[str, Any]:
    import torch

    shape = SHAPES[layout.profile]
    _init_fake(layout)
    ddp, _optimizer, info = _build(shape, layout)
    assert info["first_stage"] and not info["last_stage"], "a first stage of PP > 1 only"
    vocab = info["padded_vocab"]
    out: dict[str, Any] = {"case": layout.name, "padded_vocab": vocab, "runs": []}
    for tokens_n in tokens_list:
        tokens = torch.randint(0, vocab, (1, tokens_n), device="cuda")
        position_ids = torch.arange(tokens_n, device="cuda").unsqueeze(0)
        ddp.zero_grad_buffer()
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=200000)
        before = torch.cuda.memory_allocated()
        outputs = [
            ddp(input_ids=tokens, position_ids=position_ids, attention_mask=None, labels=None) for _ in range(layout.pp)
        ]
        torch.cuda.synchronize()
        after_forwards = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        while outputs:
            out_t = outputs.pop()
            out_t.backward(torch.randn_like(out_t))
            del out_t
        ddp.finish_grad_sync()
        torch.cuda.synchronize()
        measured_peak = torch.cuda.max_memory_allocated() - before
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = snapshot["device_traces"][0]
        run = {
            "tokens": tokens_n,
            "measured_peak_mib": round(measured_peak / MIB, 2),
            "checkpoints_mib": round((after_forwards - before) / MIB, 2),
            **_replay(events),
        }
        out["runs"].append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "live"}), flush=True)
        for row in run["live"][:25]:
            print(f"  {row['mib']:9.2f} MiB  x{row['count']:<3} {row['site']}  {row['sizes_mib'][:4]}", flush=True)
    return out


def trace_trunk(layout: Layout, tokens_list: list[int]) -> dict[str, Any]:
    """The trunk backward of a stage that holds the logits: from the gradient reaching the decoder's output."""
    import torch

    shape = SHAPES[layout.profile]
    _init_fake(layout)
    ddp, _optimizer, info = _build(shape, layout)
    assert info["last_stage"], "a stage that holds the logits only"
    reset = torch.cuda.reset_peak_memory_stats

    def marked_reset(*args: Any, **kwargs: Any) -> None:
        marker = torch.empty(MARKER_BYTES, dtype=torch.uint8, device="cuda")
        del marker
        reset(*args, **kwargs)

    torch.cuda.reset_peak_memory_stats = marked_reset
    out: dict[str, Any] = {"case": layout.name, "padded_vocab": info["padded_vocab"], "runs": []}
    for tokens_n in tokens_list:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=400000)
        rec = _step_last(ddp, layout, tokens_n, info["padded_vocab"], shape.hidden)
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = snapshot["device_traces"][0]
        marks = [i for i, e in enumerate(events) if e["action"] == "alloc" and e["size"] == MARKER_BYTES]
        start = marks[-1] + 1  # the last reset before the trunk backward: grad_reached_trunk's
        run = {
            "tokens": tokens_n,
            "measured_working_set_mib": round((rec["trunk_backward_peak"] - rec["trunk_backward_start"]) / MIB, 2),
            "expert_rows": rec["expert_rows"],
            **_replay(events, start),
        }
        out["runs"].append(run)
        print(json.dumps({k: v for k, v in run.items() if k != "live"}), flush=True)
        for row in run["live"][:30]:
            print(f"  {row['mib']:9.2f} MiB  x{row['count']:<3} {row['site']}  {row['sizes_mib'][:4]}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(SHAPES), required=True)
    parser.add_argument("--layers", type=int, default=4)
    for flag in ("tp", "pp", "ep", "world"):
        parser.add_argument(f"--{flag}", type=int, default=1)
    parser.add_argument("--window", choices=("first-stage", "trunk"), default="first-stage")
    parser.add_argument("--balanced-router", action="store_true", help="MoE: route every token at random (balanced)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--out", default="trace.json")
    args = parser.parse_args()
    if args.balanced_router:
        os.environ["MEASURE_BALANCED_ROUTER"] = "1"
    layout = Layout(args.profile, args.layers, world=args.world, tp=args.tp, pp=args.pp, ep=args.ep)
    result = trace(layout, args.tokens) if args.window == "first-stage" else trace_trunk(layout, args.tokens)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
