"""What runs inside a scoring worker process: one item in, one `ItemResult` out.

Each worker scores in its own main thread, so a signal-based budget is legal here: `score` arms one
`setitimer` alarm of `budget_s` around the whole item (math_verify's own timeouts stay off, since a
process has only one alarm), and an item that overruns returns `timeout` while the worker stays alive and
warm. What a signal cannot interrupt (a long GMP call, a stuck C extension) is the parent's business: the
pool kills the worker at the hard deadline. SIGTERM is reset to its default action so that such a kill
takes effect at once. The parsed gold answer is cached per worker, since 8-16 samples share one gold.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, NamedTuple

from reward_service.extraction import answer_latex, extract_final_answer, gold_latex
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
    gold_cache_size: int
    model_name: str = ""
    max_length: int = 2048
    torch_threads: int = 1


class _BudgetExceeded(BaseException):
    """Raised by the alarm; a BaseException so that no `except Exception` in a library swallows it."""


def _parse_uncached(text: str) -> list[Any]:
    return list(parse(text, parsing_timeout=None))


class _WorkerState:
    """This process's configuration, gold cache and alarm flag (set by `initialize`)."""

    def __init__(self) -> None:
        self.config: WorkerConfig | None = None
        self.armed = False
        self.parse_gold: Callable[[str], list[Any]] = _parse_uncached
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
    _state.parse_gold = functools.lru_cache(maxsize=config.gold_cache_size)(_parse_uncached)
    if config.backend is Backend.REWARD_MODEL:
        _state.reward_model = RewardModel(config.model_name, config.max_length, config.torch_threads)


def warm_up() -> None:
    """Load math_verify's grammar and regexes (about 0.1 s), so a freshly forked worker starts warm."""
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    verify(parse("\\boxed{\\frac{1}{2}}", parsing_timeout=None), parse("$0.5$", parsing_timeout=None),
           timeout_seconds=None)


def _score_math(label: str, response: str, extraction: Extraction) -> ItemResult:
    gold = _state.parse_gold(gold_latex(label))
    if not gold:
        return ItemResult(BAD_LABEL, 0.0, f"math_verify cannot parse the gold label {label[:200]!r}")
    answer = extract_final_answer(response, extraction)
    if answer is None:
        return ItemResult(NO_ANSWER, 0.0)
    predicted = parse(answer_latex(answer), parsing_timeout=None)
    if not predicted:
        return ItemResult(SCORED, 0.0, "unparseable final answer")
    return ItemResult(SCORED, 1.0 if verify(gold, predicted, timeout_seconds=None) else 0.0)


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
            _state.armed = False
        finally:
            _state.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _BudgetExceeded:
        return ItemResult(TIMEOUT, 0.0, f"gave up after the {config.budget_s:g} s worker budget")
    return result
