"""What is live at the first pipeline stage's backward peak, by the code that allocated it (issue #49).

`measure_sharded.py` measures the first of PP > 1 stages as one number (the trunk backward's peak above the
allocations before the forward). This script runs the same case (same fake process group, same model, same
micro-batches in flight) with torch's allocator history on, replays the history to the moment of the peak,
and groups what was allocated since the forward began and is still live by the allocating call: the
innermost frame in megatron-core and the innermost frame in torch. It names the term the plan is missing
rather than fitting a constant to it.

    python3 benchmarks/memory/trace_first_stage.py --profile qwen2.5-72b --layers 4 --tp 4 --pp 2 --world 8 \
        --tokens 2048 4096 8192 --out trace.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_sharded import SHAPES, Layout, _build, _init_fake

MIB = 2**20


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


def _replay(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The peak of what the traced window allocated and still held, and that live set grouped by site."""
    live: dict[int, dict[str, Any]] = {}
    current, peak, peak_at = 0, 0, -1
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = e
            current += e["size"]
        elif e["action"] == "free_requested" and e["addr"] in live:
            current -= live.pop(e["addr"])["size"]
        if current > peak:
            peak, peak_at = current, i
    live = {}
    for e in events[: peak_at + 1]:
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
    return {"peak_above_start_mib": round(peak / MIB, 2), "event_index": peak_at, "events": len(events), "live": rows}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(SHAPES), required=True)
    parser.add_argument("--layers", type=int, default=4)
    for flag in ("tp", "pp", "world"):
        parser.add_argument(f"--{flag}", type=int, default=1)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--out", default="trace.json")
    args = parser.parse_args()
    layout = Layout(args.profile, args.layers, world=args.world, tp=args.tp, pp=args.pp)
    result = trace(layout, args.tokens)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
