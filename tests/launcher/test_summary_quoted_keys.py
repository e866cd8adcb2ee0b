"""A miles metrics line whose other keys hold quotes or backslashes (Python's repr escapes them) still gives the
rollout's reward: the reader skips an escaped character inside a quoted key instead of ending the key there."""

from __future__ import annotations

import pytest
from grpo_launcher.summary import parse_metrics_line


@pytest.mark.parametrize("odd_key", ["a'b\"c, d: e", "C:\\", "\\", "x\\'"])
def test_a_key_with_quotes_or_a_trailing_backslash_does_not_hide_the_reward(odd_key: str) -> None:
    metrics = {odd_key: 1.0, "rollout/raw_reward": 0.5, "rollout/repetition_frac": 0.25}
    line = f"rollout 3: {metrics!r}"
    assert "\\" in line
    assert parse_metrics_line(line) == (3, {"raw_reward": 0.5, "repetition_frac": 0.25})
