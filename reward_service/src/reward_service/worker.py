"""What runs inside a scoring worker process: one item in, one `ItemResult` out.

Each worker scores in its own main thread, so a signal-based budget is legal here: `score` arms one
`setitimer` alarm of `budget_s` around the whole item (math_verify's own timeouts stay off, since a
process has only one alarm), and an item that overruns returns `timeout` while the worker stays alive and
warm. What a signal cannot interrupt (a long GMP call, a stuck C extension) is the parent's business: the
pool kills the worker at the hard deadline. SIGTERM is reset to its default action so that such a kill
takes effect at once. Parses are cached per worker: 8-16 samples share one gold, and often one answer.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, NamedTuple

from reward_service.cache import ByteLRU
from reward_service.extraction import (
    answer_latex,
    extract_final_answer,
    gold_latex,
    integer_verdict,
    is_plain_integer,
)
from reward_service.reward_model import RewardModel
from reward_service.settings import Backend, Extraction

# Without gmpy2, sympy's integer arithmetic returns to the interpreter often enough for the alarm to
# interrupt it; with gmpy2 a single huge GMP call cannot be interrupted (see the module docstring).
os.environ.setdefault("SYMPY_GROUND_TYPES", "python")

from math_verify import parse, verify  # must follow the ground-types choice

SCORED = "scored"
NO_ANSWER = "no_answer"
TIMEOUT = "timeout"
BAD_LABEL = "bad_label"


class ItemResult(NamedTuple):
    """The verdict on one item. `status` is one of SCORED, NO_ANSWER, TIMEOUT, BAD_LABEL."""

    status: str
    reward: float
    detail: str = ""


@dataclass(frozen=True)
class WorkerConfig:
    backend: Backend
    extraction: Extraction
    budget_s: float
    cache_bytes: int
    model_name: str
    max_length: int
    torch_threads: int


class _BudgetExceeded(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` in a library swallows it."""


def _parse_uncached(text: str) -> list[Any]:
    return list(parse(text, parsing_timeout=None))


def _verify_uncached(pair: tuple[str, str]) -> bool:
    gold_text, answer_text = pair
    gold, predicted = _state.parse_cached(gold_text), _state.parse_cached(answer_text)
    return bool(predicted) and bool(verify(gold, predicted, timeout_seconds=None))


class _WorkerState:
    """This process's configuration, parse cache and alarm flag (set by `initialize`).

    One LRU cache serves gold labels and extracted answers: both are `\\boxed{...}` strings, so the
    samples of a prompt that give the gold answer verbatim reuse the gold's parse. A second one keeps
    the verdict per (gold, answer) pair, for the samples that repeat an answer. Both hold pure results
    of math_verify (sympy objects are immutable), so a hit changes nothing but the time. Both are
    bounded in bytes (`cache.ByteLRU`; REWARD_CACHE_MIB per worker, three quarters for parses).
    """

    def __init__(self) -> None:
        self.config: WorkerConfig | None = None
        self.armed = False
        self.parse_cached: Callable[[str], list[Any]] = _parse_uncached
        self.verify_cached: Callable[[tuple[str, str]], bool] = _verify_uncached
        self.reward_model: Any = None


_state = _WorkerState()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if _state.armed:
        raise _BudgetExceeded


def initialize(config: WorkerConfig) -> None:
    """pebble initializer: runs once in every new worker, after pebble installed its own handlers."""
    _state.config = config
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGALRM, _on_alarm)
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    _state.parse_cached = ByteLRU(_parse_uncached, config.cache_bytes * 3 // 4)
    _state.verify_cached = ByteLRU(_verify_uncached, config.cache_bytes // 4)
    if config.backend is Backend.REWARD_MODEL:
        _state.reward_model = RewardModel(config.model_name, config.max_length, config.torch_threads)


_WARM_UP_PAIRS = (
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("3", "x=3"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\pi}{4}", "0.785398"),
    ("\\{1,2\\}", "(1, 2)"),
    ("10", "\\binom{5}{2}"),
    ("42", "42^\\circ"),
)


def warm_up() -> None:
    """Load math_verify's grammar and the sympy modules its comparisons import lazily (about 1 s).

    Run once in the forkserver (see `preload`), so each forked worker, including every replacement,
    starts with them loaded instead of paying for the imports during its first requests.
    """
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    for gold, answer in _WARM_UP_PAIRS:
        verify(
            parse("\\boxed{" + gold + "}", parsing_timeout=None),
            parse("\\boxed{" + answer + "}", parsing_timeout=None),
            timeout_seconds=None,
        )


def quick_verdict(label: str, response: str, extraction: Extraction, max_chars: int) -> ItemResult | None:
    """The verdict without math_verify, when there is one: an integer gold label and a response of at
    most `max_chars` whose final answer is missing or a plain integer. The work is one scan of the
    response, linear whatever its characters (`extraction.Work` counts it; tests/reward_service/
    test_reward_linear.py), and `max_chars` is at most 65536, so the server process may run it
    itself instead of sending the item to a worker. None: the item needs math_verify.
    """
    if len(response) > max_chars or not is_plain_integer(label):
        return None
    answer = extract_final_answer(response, extraction)
    if answer is None:
        return ItemResult(NO_ANSWER, 0.0)
    exact = integer_verdict(label, answer)
    return None if exact is None else ItemResult(SCORED, exact)


def _score_math(label: str, response: str, extraction: Extraction) -> ItemResult:
    gold_text = gold_latex(label)
    if not _state.parse_cached(gold_text):
        return ItemResult(BAD_LABEL, 0.0, f"math_verify cannot parse the gold label {label[:200]!r}")
    answer = extract_final_answer(response, extraction)
    if answer is None:
        return ItemResult(NO_ANSWER, 0.0)
    exact = integer_verdict(label, answer)
    if exact is not None:
        return ItemResult(SCORED, exact)
    return ItemResult(SCORED, 1.0 if _state.verify_cached((gold_text, answer_latex(answer))) else 0.0)


def score(label: str | None, response: str, prompt: Any = None) -> ItemResult:
    """Score one item within the worker's budget. `label` is already normalised text (or None)."""
    config = _state.config
    if config is None:
        raise RuntimeError("worker used before initialize()")
    try:
        try:
            if config.budget_s > 0:
                _state.armed = True
                signal.setitimer(signal.ITIMER_REAL, config.budget_s)
            if config.backend is Backend.REWARD_MODEL:
                result = ItemResult(SCORED, _state.reward_model.score(prompt, response))
            else:
                if label is None:
                    raise RuntimeError("math_verify item without a label reached a worker")
                result = _score_math(label, response, config.extraction)
        finally:
            _state.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _BudgetExceeded:
        return ItemResult(TIMEOUT, 0.0, f"gave up after the {config.budget_s:g} s worker budget")
    return result
