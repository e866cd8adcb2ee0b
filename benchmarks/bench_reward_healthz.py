"""Liveness of the reward service while large batches are scored: `/healthz` latency during three concurrent
15 MB `POST /score/batch` requests, for the service of this tree and, in the same run, the service as it was at a
baseline commit (its `reward_service/src` exported with `git archive`).

    .venv/bin/python benchmarks/bench_reward_healthz.py [--baseline b7ae9af]   (part of `make bench-reward`)

Workload (seeded): each batch is 600 items of 25,000 characters (a chain of thought of words and inline LaTeX
ending in `\\boxed{n}`, integer gold labels, half right), about 15 MB of JSON; the three are sent at once. A
poller sends `GET /healthz` every 100 ms from the moment the batches start until all three are answered, and the
table gives its p50, p99 and worst latency (a kubelet's liveness probe times out after 5 s by default; the service
promises under 1 s). The service runs with its defaults on 127.0.0.1; client and service share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
ITEMS, CHARS, BATCHES = 600, 25_000, 3


def _batch(seed: int) -> bytes:
    rng = random.Random(seed)
    words = ("we", "note", "that", "$x^2+1$", "sum", "hence", "\\frac{a}{b}", "each", "value", "therefore")
    items = []
    for _ in range(ITEMS):
        gold = rng.randrange(1000)
        text = " ".join(rng.choice(words) for _ in range(CHARS // 6))[: CHARS - 20]
        answer = gold if rng.random() < 0.5 else gold + 1
        items.append({"prompt": "p", "response": f"{text} so $\\boxed{{{answer}}}$", "label": gold})
    return json.dumps(items).encode()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(1200):
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            try:
                async with session.get(f"{url}/ready") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("the service never became ready")


async def _measure(url: str, bodies: list[bytes]) -> dict[str, float]:
    latencies: list[float] = []
    done = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as probes, aiohttp.ClientSession(timeout=timeout) as batches:

        async def poll() -> None:
            while not done.is_set():
                started = time.perf_counter()
                async with probes.get(f"{url}/healthz") as resp:
                    await resp.read()
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.1)

        async def send(body: bytes) -> int:
            headers = {"Content-Type": "application/json"}
            async with batches.post(f"{url}/score/batch", data=body, headers=headers) as resp:
                await resp.read()
                return resp.status

        poller = asyncio.create_task(poll())
        started = time.perf_counter()
        statuses = await asyncio.gather(*(send(body) for body in bodies))
        wall = time.perf_counter() - started
        done.set()
        await poller
    latencies.sort()
    return {
        "answered": sum(status == 200 for status in statuses),
        "wall": wall,
        "probes": len(latencies),
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max": latencies[-1],
    }


def _service(source: Path, bodies: list[bytes]) -> dict[str, float]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(source), "REWARD_WORKERS": os.environ.get("REWARD_WORKERS", "2")}
    argv = [sys.executable, "-m", "reward_service", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(_ready(url, proc))
        return asyncio.run(_measure(url, bodies))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="b7ae9af", help="the commit whose service is the baseline")
    args = parser.parse_args()
    bodies = [_batch(seed) for seed in range(BATCHES)]
    mb = sum(len(b) for b in bodies) / BATCHES / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.baseline, "reward_service/src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        load_before = os.getloadavg()[0]
        rows = [
            (f"baseline ({args.baseline})", _service(Path(tmp) / "reward_service" / "src", bodies)),
            ("this tree", _service(REPO / "reward_service" / "src", bodies)),
        ]
    print(
        f"three concurrent batches of {ITEMS} items, {mb:.1f} MB each; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print("| service | answered | wall s | /healthz probes | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['answered']:.0f}/{BATCHES} | {r['wall']:.1f} | {r['probes']:.0f} | {r['p50'] * 1000:.0f} "
            f"| {r['p99'] * 1000:.0f} | {r['max'] * 1000:.0f} |"
        )


if __name__ == "__main__":
    main()
