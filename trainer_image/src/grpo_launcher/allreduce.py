"""An NCCL all-reduce over the local GPUs, one process per GPU, measuring bus bandwidth by message size.

Run as ``python -m grpo_launcher.allreduce --gpus N --out FILE``. Each rank fills a bf16 tensor with
``rank + 1`` and checks the reduced value (the sum ``N(N+1)/2``) before timing, so a wrong result is
reported, not timed. Times come from CUDA events around ``iters`` back-to-back all-reduces after a warm-up;
the slowest rank's time counts. Bus bandwidth follows nccl-tests: ``algbw * 2 (N - 1) / N``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

MIB = 2**20
DEFAULT_SIZES = tuple(MIB * 2**i for i in range(11))  # 1 MiB .. 1 GiB


def nccl_version_string(version: object) -> str:
    """torch.cuda.nccl.version() is a tuple on current torch and an int on old ones."""
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version)
    return str(version)


def bus_factor(world: int) -> float:
    return 2 * (world - 1) / world


def _iterations(size: int) -> int:
    return 50 if size <= 64 * MIB else 20


def _worker(rank: int, world: int, port: int, sizes: list[int], out: str) -> None:
    import torch  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415
    import torch.distributed as dist  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    rows: list[dict[str, Any]] = []
    expected = world * (world + 1) / 2
    for size in sizes:
        x = torch.empty(size // 2, dtype=torch.bfloat16, device=device)
        x.fill_(rank + 1)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        correct = bool((x == expected).all().item())
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        iters = _iterations(size)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(x)
        end.record()
        torch.cuda.synchronize()
        seconds = torch.tensor([start.elapsed_time(end) / 1000 / iters], dtype=torch.float64, device=device)
        ok = torch.tensor([1 if correct else 0], dtype=torch.int32, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        t = float(seconds.item())
        algbw = size / t / 1e9
        rows.append(
            {
                "bytes": size,
                "seconds": t,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * bus_factor(world),
                "correct": bool(ok.item()),
            }
        )
        del x
    if rank == 0:
        payload = {
            "world": world,
            "dtype": "bfloat16",
            "nccl": nccl_version_string(torch.cuda.nccl.version()),
            "rows": rows,
        }
        Path(out).write_text(json.dumps(payload))
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_launcher.allreduce")
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="bytes, comma-separated")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    import torch.multiprocessing as mp  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    from grpo_launcher.allreduce import _worker as worker  # noqa: PLC0415 (pickled by this name, not __main__)

    try:
        mp.spawn(worker, args=(args.gpus, free_port(), sizes, args.out), nprocs=args.gpus, join=True)
    except Exception as exc:  # a rank died: report the cause on one line to the parent
        sys.stderr.write(f"all-reduce failed: {type(exc).__name__}: {' '.join(str(exc).split())[-400:]}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
