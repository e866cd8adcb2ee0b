"""Test harness: a real `python -m reward_service` on 127.0.0.1 on a free port.

`run_server(tmp_path, **settings)` starts the service as a subprocess with REWARD_* settings, waits
until it answers `/healthz`, and on exit sends SIGTERM and checks that the server and every process
it started (the forkserver, the workers, the resource tracker) are gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("REWARD_")}
    env.update({f"REWARD_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def eventually(condition: Callable[[], bool], within_s: float = 10.0) -> bool:
    """Poll `condition` until it holds (True) or `within_s` passed (False); for asynchronous effects."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@dataclass
class RewardServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def worker_pids(self) -> set[int]:
        """Pids of the scoring workers: the children of the multiprocessing forkserver."""
        pids: set[int] = set()
        for child in psutil.Process(self.process.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if "forkserver" in " ".join(child.cmdline()):
                    pids.update(p.pid for p in child.children() if p.status() != psutil.STATUS_ZOMBIE)
        return pids

    def tree_rss(self) -> int:
        total = 0
        for proc in [psutil.Process(self.process.pid), *self.descendants()]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
        return total

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return values

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics()[(name, tuple(sorted(labels.items())))]

    def outcome(self, outcome: str) -> float:
        return self.metric("reward_service_requests_total", outcome=outcome)

    def score(self, response: str, label: object = "42", timeout: float = 60.0) -> httpx.Response:
        return httpx.post(
            self.url + "/score", json={"prompt": "p", "response": response, "label": label}, timeout=timeout
        )

    def stop(self) -> int:
        """SIGTERM, wait, and return the exit code; fails if any process of the tree survives."""
        tree = self.descendants()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError("the reward service did not exit within 60 s of SIGTERM") from None
        _, alive = psutil.wait_procs(tree, timeout=15)
        for proc in alive:
            proc.kill()
        assert not alive, f"processes left behind after the server exited: {[p.pid for p in alive]}"
        return code


@contextlib.contextmanager
def run_server(tmp_path: Path, **settings: str) -> Iterator[RewardServer]:
    port = free_port()
    log_path = tmp_path / f"reward-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "reward_service", "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            env=service_env(**settings),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = RewardServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise AssertionError(f"reward service exited with {process.returncode}:\n{server.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"reward service did not come up in 90 s:\n{server.log()}")
            time.sleep(0.1)
        yield server
    finally:
        server.stop()
