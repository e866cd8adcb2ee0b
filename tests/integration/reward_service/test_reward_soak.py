"""Soak: 5,000 requests, some pathological, leave the same processes and bounded memory behind.

Bounded in count (5,000 requests at concurrency 32) and in time (a 300 s cap on the whole run); the
server's stop at the end also checks that no process of its tree survives SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections import Counter
from collections.abc import Callable

import aiohttp
import psutil
import pytest

from tests.support.reward_harness import RewardServer, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOTAL = 5_000
CONCURRENCY = 32
HANGS = ["$\\boxed{9^{9^{9^{9}}}}$", "$\\boxed{(100!)!}$", "$\\boxed{10^{10^{10}}}$"]


def make_requests(rng: random.Random) -> list[tuple[dict[str, object], int]]:
    """(body, expected status): right, wrong and answerless responses, fractions (scored by the workers),
    bad labels, and 0.1% hangs."""
    requests: list[tuple[dict[str, object], int]] = []
    for index in range(TOTAL):
        gold = index // 8
        cot = "Working: " + " ".join(f"$x_{{{k}}} = {rng.randint(0, 99)}$" for k in range(rng.randint(5, 60)))
        roll = rng.random()
        if index % 1000 == 500:
            body: dict[str, object] = {"response": cot + HANGS[index % len(HANGS)], "label": gold}
        elif roll < 0.3:
            body = {"response": cot + f" so $\\boxed{{{gold}}}$", "label": gold}
        elif roll < 0.6:  # not integers: these go through the worker pool
            body = {
                "response": cot + f" so $\\boxed{{\\frac{{{2 * gold + 2}}}{{14}}}}$",
                "label": f"\\frac{{{gold + 1}}}{{7}}",
            }
        elif roll < 0.85:
            body = {"response": cot + f"\nAnswer: {gold + rng.randint(1, 9)}", "label": str(gold)}
        elif roll < 0.98:
            body = {"response": cot + " and I give up", "label": float(gold)}
        else:
            requests.append(({"response": cot, "label": None}, 422))
            continue
        requests.append(({"prompt": "p", **body}, 200))
    return requests


async def drive(url: str, requests: list[tuple[dict[str, object], int]]) -> Counter[str]:
    tally: Counter[str] = Counter()
    queue = iter(requests)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as s:

        async def client() -> None:
            for body, expected in queue:
                async with s.post(url + "/score", json=body) as reply:
                    await reply.read()
                    tally["as expected" if reply.status == expected else f"got {reply.status}"] += 1

        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(CONCURRENCY))), timeout=300)
    return tally


def test_five_thousand_requests_leave_no_extra_processes_and_bounded_memory(
    reward_server: Callable[..., contextlib.AbstractContextManager[RewardServer]],
) -> None:
    requests = make_requests(random.Random(5))
    with reward_server(workers="2", deadline_s="1", soft_deadline_s="0") as server:
        warm = asyncio.run(drive(server.url, requests[:200]))
        assert warm == Counter({"as expected": 200})
        processes_before = {p.pid for p in server.descendants()} - server.worker_pids()
        workers_before = len(server.worker_pids())
        rss_before = server.tree_rss()

        tally = asyncio.run(drive(server.url, requests[200:]))

        assert tally == Counter({"as expected": TOTAL - 200})
        assert server.outcome("timeout") == 5  # the hangs, each killed at the deadline ...
        # ... and its worker replaced (the replacement starts just after the answer went out)
        assert eventually(lambda: server.metric("reward_service_worker_restarts_total") == 5)
        assert eventually(lambda: len(server.worker_pids()) == workers_before)
        assert server.metric("reward_service_queue_depth") == 0
        assert {p.pid for p in server.descendants()} - server.worker_pids() == processes_before
        assert len(server.worker_pids()) == workers_before
        zombies = [p for p in server.descendants() if p.status() == psutil.STATUS_ZOMBIE]
        assert not zombies
        growth_mib = (server.tree_rss() - rss_before) / 2**20
        assert growth_mib < 150, f"the process tree grew by {growth_mib:.0f} MiB over {TOTAL} requests"
        # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught, hence -15
        assert server.stop() == -signal.SIGTERM
        assert "Application shutdown complete" in server.log()
        assert "leaked" not in server.log()
