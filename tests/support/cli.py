"""`grpo` as a user runs it: the real command in a child process, its output captured."""

from __future__ import annotations

import subprocess
import sys

GRPO = [sys.executable, "-m", "grpo_operator.cli"]

# Strings a YAML 1.1 or 1.2 reader might take for a number, boolean or null: kubectl sends them as strings.
STRINGS_THAT_LOOK_TYPED = ["1e3", "08", "0o17", "0x1F", "0b101", "1_000", ".5", "+1", "-.5e3", "0.", "yes", "y", "On"]
STRINGS_THAT_LOOK_TYPED += ["NO", "~", "null", "Null", "", "true", ".inf", "-.Inf", ".NaN", "1e+03", "012", "<<", "="]


def grpo(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRPO, *args], check=False, input=stdin, capture_output=True, text=True, timeout=60)
