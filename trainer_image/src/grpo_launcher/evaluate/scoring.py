"""Scoring with math_verify (mathematical equivalence, not string equality) and the pass@k estimator.

math_verify's timeouts use signals, so ``score`` must run on the main thread; the runner scores responses
there as they arrive from the request threads.
"""

from __future__ import annotations

import logging
from math import comb
from typing import Any

_EXTRACTION: list[Any] | None = None


def _extraction() -> list[Any]:
    global _EXTRACTION  # noqa: PLW0603 (built once: math_verify's configs are costly to create)
    if _EXTRACTION is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify  # noqa: PLC0415

        configs = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
        # The first parse loads the LaTeX grammar and sympy's lazy modules (about 1 s idle, several under load):
        # done once here without a time limit, so math_verify's 5 s limits bound each answer, not that start,
        # and the first prompt's label and answers are not scored as unparseable on a busy node.
        logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # its "timeout is disabled" warning
        half = parse("$\\frac{1}{2}$", configs, parsing_timeout=None)
        verify(half, parse("$0.5$", configs, parsing_timeout=None), timeout_seconds=None)
        _EXTRACTION = configs
    return _EXTRACTION


def parse_label(label: str) -> list[Any]:
    """The reference answer as math_verify parses it (a bare number or a LaTeX expression)."""
    from math_verify import parse  # noqa: PLC0415

    text = label if label.startswith("$") or "\\boxed" in label else f"${label}$"
    return list(parse(text, extraction_config=_extraction()))


def score(response: str, gold: list[Any]) -> tuple[bool, str]:
    """Whether the response's final answer equals the gold answer, and the answer it extracted."""
    from math_verify import parse, verify  # noqa: PLC0415

    predicted = parse(response, extraction_config=_extraction())
    if not predicted or not gold:
        return False, ""
    return bool(verify(gold, predicted)), str(predicted[-1])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with ``n`` samples of which ``c`` are correct (Chen et al., 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)
