"""`make run` as a person starts it (`python -m grpo_dev.devrun`, the `run` target's command once `install` and
`control-plane` are done), in its own process group as a terminal's foreground job, with its output collected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class DevRun:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def quickstart_ended(self) -> str | None:
        """The last `quickstart` row of the table once it is Succeeded or Failed."""
        rows = [line for line in list(self.lines) if line.startswith("quickstart ")]
        return rows[-1] if rows and rows[-1].split()[1] in ("Succeeded", "Failed") else None

    def ctrl_c(self, timeout: float) -> int:
        """SIGINT to the process group, as Ctrl-C sends it; the exit code."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout)


@contextmanager
def make_run(**env: str) -> Iterator[DevRun]:
    """`make run` with `env` added (KUBECONFIG and GRPO_TRAINER unset unless given); killed if still running."""
    full = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("KUBECONFIG", "GRPO_TRAINER", "GRPO_REAL_NODE"):
        full.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "grpo_dev.devrun"],
        cwd=REPO,
        env={**full, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's foreground process group, which Ctrl-C signals as a whole
    )
    run = DevRun(process)
    reader = threading.Thread(target=lambda: run.lines.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        yield run
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        reader.join(timeout=30)
