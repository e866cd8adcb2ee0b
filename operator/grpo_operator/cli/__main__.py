"""`python -m grpo_operator.cli`: the `grpo` command."""

from __future__ import annotations

from grpo_operator.cli import entrypoint

if __name__ == "__main__":
    entrypoint()
