"""`grpo` as a user runs it: the real command in a child process, its output captured."""

from __future__ import annotations

import subprocess
import sys

GRPO = [sys.executable, "-m", "grpo_operator.cli"]


def grpo(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRPO, *args], check=False, input=stdin, capture_output=True, text=True, timeout=60)
