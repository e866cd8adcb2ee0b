"""Preflight checks of the GPUs: count, free memory, and an NCCL all-reduce with its bus bandwidth.

The measurements run in child processes (``gpu_probe`` and ``allreduce``) under the same Python, so the
launcher itself never imports torch or holds a CUDA context. The verdicts are pure functions of those
measurements, so CPU tests feed them tables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_launcher.allreduce import DEFAULT_SIZES
from grpo_launcher.checks import CheckResult, failed, gib, passed, warned

BUSY_FRACTION = 0.90  # a GPU with less than this share of its memory free is already in use


@dataclass(frozen=True)
class GpuProbe:
    devices: tuple[dict[str, Any], ...]
    cuda_visible_devices: str | None
    torch: str = ""
    nccl: str = ""
    error: str = ""


def run_probe(python: str = sys.executable, timeout: float = 120) -> GpuProbe:
    """Run ``gpu_probe`` in a child process and parse what it saw."""
    try:
        proc = subprocess.run(
            [python, "-m", "grpo_launcher.gpu_probe"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return GpuProbe((), None, error=f"the GPU probe did not answer within {timeout:g} s")
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return GpuProbe((), None, error=f"the GPU probe exited {proc.returncode}: {tail}")
    if "error" in data:
        return GpuProbe((), None, error=str(data["error"]))
    return GpuProbe(
        devices=tuple(data["devices"]),
        cuda_visible_devices=data.get("cuda_visible_devices"),
        torch=data.get("torch", ""),
        nccl=data.get("nccl", ""),
    )


def check_gpu_count(probe: GpuProbe, expected: int) -> CheckResult:
    """The pod sees exactly the GPUs the plan gives it."""
    name = "gpus"
    if probe.error:
        return failed(name, f"cannot count GPUs: {probe.error}")
    found = len(probe.devices)
    models = sorted({str(d["name"]) for d in probe.devices})
    data = {"found": found, "expected": expected, "models": models}
    if found != expected:
        cvd = probe.cuda_visible_devices
        hint = f" (CUDA_VISIBLE_DEVICES={cvd!r})" if cvd is not None else ""
        return failed(
            name,
            f"{found} GPUs visible{hint}, the plan expects {expected}; the pod's nvidia.com/gpu "
            f"request, Ray's "
            "num-gpus and miles's --num-gpus-per-node must agree",
            **data,
        )
    if len(models) > 1:
        return warned(name, f"{found} GPUs as planned, but of mixed models: {', '.join(models)}", **data)
    return passed(name, f"{found} x {models[0] if models else 'GPU'} as planned", **data)


def check_free_memory(probe: GpuProbe, min_free_gib: float) -> CheckResult:
    """Every GPU has at least the plan's per-GPU estimate free."""
    name = "gpu-memory"
    if probe.error:
        return failed(name, f"cannot read GPU memory: {probe.error}")
    if not probe.devices:
        return failed(name, "no GPU to read memory from")
    free = [gib(d["free"]) for d in probe.devices]
    total = [gib(d["total"]) for d in probe.devices]
    data = {"free_gib": [round(f, 1) for f in free], "total_gib": round(total[0], 1)}
    short = [i for i, f in enumerate(free) if f < min_free_gib]
    if short:
        listing = ", ".join(f"GPU {i}: {free[i]:.1f} GiB" for i in short)
        return failed(
            name,
            f"free memory below the plan's {min_free_gib:g} GiB per GPU ({listing}); another process holds "
            "memory or the plan does not fit this GPU",
            **data,
        )
    busy = [i for i, (f, t) in enumerate(zip(free, total, strict=True)) if f < BUSY_FRACTION * t]
    if busy:
        listing = ", ".join(f"GPU {i}: {free[i]:.1f} of {total[i]:.1f} GiB free" for i in busy)
        return warned(
            name,
            f"enough for the plan ({min_free_gib:g} GiB) but memory is already in use: {listing}",
            **data,
        )
    return passed(name, f"min free {min(free):.1f} GiB per GPU (>= {min_free_gib:g} GiB)", **data)


def run_allreduce(
    gpus: int, python: str = sys.executable, timeout: float = 300, sizes: Sequence[int] = DEFAULT_SIZES
) -> dict[str, Any]:
    """Run the all-reduce benchmark in its own session (so a hang can be killed whole) and return its JSON."""
    with tempfile.TemporaryDirectory(prefix="grpo-allreduce-") as tmp:
        out = Path(tmp) / "allreduce.json"
        argv = [python, "-m", "grpo_launcher.allreduce", "--gpus", str(gpus), "--out", str(out)]
        argv += ["--sizes", ",".join(str(s) for s in sizes)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"the all-reduce did not finish within {timeout:g} s (an NCCL hang)"}
        if proc.returncode != 0 or not out.exists():
            lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
            tail = next(
                (ln for ln in reversed(lines) if ln.startswith("all-reduce failed")),
                lines[-1] if lines else "",
            )
            return {"error": f"exited {proc.returncode}: {tail or 'no output'}"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def format_table(result: dict[str, Any]) -> list[str]:
    """The bandwidth table, one line per size, for the log."""
    lines = [f"all-reduce {result['dtype']} over {result['world']} GPU(s), NCCL {result['nccl']}:"]
    lines.append(f"{'size':>10} {'time_us':>10} {'algbw_GB/s':>11} {'busbw_GB/s':>11} correct")
    single = int(result["world"]) == 1  # one rank: NCCL copies nothing, so bandwidths mean nothing
    for row in result["rows"]:
        size = row["bytes"]
        label = f"{size // 2**30} GiB" if size >= 2**30 else f"{size // 2**20} MiB"
        algbw = f"{'n/a':>11}" if single else f"{row['algbw_gbps']:11.1f}"
        busbw = f"{'n/a':>11}" if single else f"{row['busbw_gbps']:11.1f}"
        correct = "yes" if row["correct"] else "NO"
        lines.append(f"{label:>10} {row['seconds'] * 1e6:10.1f} {algbw} {busbw} {correct}")
    return lines


def check_allreduce(result: dict[str, Any], floor_gbps: float) -> CheckResult:
    """The all-reduce summed right at every size and its bus bandwidth at the largest size meets the floor."""
    name = "nccl-allreduce"
    if "error" in result:
        return failed(name, f"all-reduce over the local GPUs failed: {result['error']}")
    rows = result["rows"]
    wrong = [r["bytes"] for r in rows if not r["correct"]]
    if wrong:
        return failed(name, f"all-reduce returned a wrong sum at {len(wrong)} size(s), first at {wrong[0]} bytes")
    world, last = int(result["world"]), rows[-1]
    peak = max(r["busbw_gbps"] for r in rows)
    size = f"{last['bytes'] / 2**20:g} MiB"
    data = {
        "world": world,
        "busbw_gbps_largest": round(last["busbw_gbps"], 1),
        "peak_busbw_gbps": round(peak, 1),
    }
    data["rows"] = [{k: r[k] for k in ("bytes", "busbw_gbps")} for r in rows]
    if world == 1:
        if floor_gbps > 0:
            return warned(
                name,
                f"one GPU: NCCL ran but there is no bus to measure; floor {floor_gbps:g} GB/s not checked",
                **data,
            )
        return passed(name, "one GPU: NCCL initialised and the all-reduce ran (no bus bandwidth to measure)", **data)
    measured = f"bus bandwidth {last['busbw_gbps']:.1f} GB/s at {size} over {world} GPUs"
    if floor_gbps > 0 and last["busbw_gbps"] < floor_gbps:
        return failed(name, f"{measured}, below the floor of {floor_gbps:g} GB/s", **data)
    if floor_gbps == 0:
        return passed(name, f"{measured} (report only, no floor set)", **data)
    return passed(name, f"{measured} (>= floor {floor_gbps:g} GB/s)", **data)
