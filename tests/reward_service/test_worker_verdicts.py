"""The reward a scoring worker gives one item: the integer shortcut the server takes itself, math_verify's verdict
on equivalent forms, a final answer missing, a gold label math_verify cannot read, and the worker's budget.

The worker runs in this process (its alarm and SIGTERM handlers restored after each test), except for the
budget, which needs a response that runs for minutes: that one runs in a spawned worker, as the pool runs it."""

from __future__ import annotations

import logging
import multiprocessing
import signal
from collections.abc import Callable, Iterator

import pytest
from reward_service.settings import Backend, Extraction

from reward_service import worker

BOTH = Extraction.BOXED_OR_ANSWER_LINE
QUIETED = ("math_verify", "latex2sympy2_extended")
GUARD_S = 60  # a hang guard: a spawned worker starts in seconds and gives up after 0.5 s
HANGS = "Simplifying, the result is $\\boxed{9^{9^{9^{9}}}}$."  # runs for minutes without a budget


@pytest.fixture
def scoring_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Start this process as a worker; its signal handlers and the worker's state are put back after."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGALRM, signal.SIGTERM)}
    for name in QUIETED:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    monkeypatch.setattr(worker, "_state", worker._WorkerState())

    def start(extraction: Extraction = BOTH, budget_s: float = 60.0) -> None:
        worker.initialize(worker.WorkerConfig(Backend.MATH_VERIFY, extraction, budget_s, cache_bytes=8 << 20))

    yield start
    signal.setitimer(signal.ITIMER_REAL, 0)
    for number, handler in saved.items():
        signal.signal(number, handler)


@pytest.mark.parametrize(
    ("label", "response", "reward"),
    [
        ("15", "so $\\boxed{15}$", 1.0),
        ("15", "so $\\boxed{16}$", 0.0),
        ("-7", "Answer: -7", 1.0),
        ("\\frac{1}{2}", "so $\\boxed{0.5}$", 1.0),
        ("\\frac{1}{3}", "so $\\boxed{0.5}$", 0.0),
        ("15", "so $\\boxed{15.0}$", 1.0),  # not a canonical integer: math_verify decides
        ("2\\sqrt{2}", "so $\\boxed{\\sqrt{8}}$", 1.0),
        ("\\frac{1}{2}", "so $\\boxed{\\\\}$", 0.0),  # an answer math_verify cannot read earns nothing
    ],
)
def test_a_scored_item_gets_math_verifys_verdict(
    label: str, response: str, reward: float, scoring_worker: Callable[..., None]
) -> None:
    scoring_worker()
    assert worker.score(label, response) == worker.ItemResult(worker.SCORED, reward)


@pytest.mark.parametrize("label", ["15", "\\frac{1}{2}"])
def test_a_response_without_a_final_answer_scores_zero_as_no_answer(
    label: str, scoring_worker: Callable[..., None]
) -> None:
    scoring_worker()
    assert worker.score(label, "the answer is 15, I think") == worker.ItemResult(worker.NO_ANSWER, 0.0)


def test_the_extraction_mode_decides_which_final_answer_counts(scoring_worker: Callable[..., None]) -> None:
    scoring_worker(Extraction.ANSWER_LINE)
    assert worker.score("3", "Answer: 4\nso $\\boxed{3}$").reward == 0.0
    assert worker.score("4", "Answer: 4\nso $\\boxed{3}$").reward == 1.0


def test_a_gold_label_math_verify_cannot_read_is_a_bad_label_naming_it(scoring_worker: Callable[..., None]) -> None:
    scoring_worker()
    result = worker.score("\\boxed{}", "so $\\boxed{1}$")
    assert result == worker.ItemResult(worker.BAD_LABEL, 0.0, "math_verify cannot parse the gold label '\\\\boxed{}'")


def test_a_worker_does_not_log_math_verifys_warning_for_every_item(
    scoring_worker: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    scoring_worker()
    with caplog.at_level(logging.WARNING):
        worker.score("\\frac{1}{2}", "so $\\boxed{0.5}$")
    assert [r.getMessage() for r in caplog.records if r.name.startswith(QUIETED)] == []


def test_a_worker_used_before_it_was_started_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "_state", worker._WorkerState())
    with pytest.raises(RuntimeError, match="before initialize"):
        worker.score("1", "$\\boxed{1}$")


@pytest.mark.parametrize(
    ("label", "response", "verdict"),
    [
        ("15", "so $\\boxed{15}$", worker.ItemResult(worker.SCORED, 1.0)),
        ("15", "so $\\boxed{16}$", worker.ItemResult(worker.SCORED, 0.0)),
        ("15", "no final answer", worker.ItemResult(worker.NO_ANSWER, 0.0)),
        ("15", "x" * 84 + "$\\boxed{15}$", worker.ItemResult(worker.SCORED, 1.0)),  # exactly the limit
        ("15", "x" * 85 + "$\\boxed{15}$", None),  # one character over: a worker scores it
        ("15", "so $\\boxed{15.0}$", None),
        ("\\frac{1}{2}", "so $\\boxed{0.5}$", None),
        ("\\frac{1}{2}", "no final answer", None),
    ],
)
def test_the_server_scores_integer_answers_itself_and_leaves_the_rest_to_a_worker(
    label: str, response: str, verdict: worker.ItemResult | None
) -> None:
    assert worker.quick_verdict(label, response, BOTH, max_chars=96) == verdict


def test_an_item_past_the_worker_budget_times_out_and_the_worker_scores_the_next() -> None:
    config = worker.WorkerConfig(Backend.MATH_VERIFY, BOTH, budget_s=0.5, cache_bytes=8 << 20)
    context = multiprocessing.get_context("spawn")  # the alarm and SIGTERM setup stay out of pytest
    # A worker that ignores its budget would run for minutes: the wait is bounded and leaving the block kills it.
    with context.Pool(1, initializer=worker.initialize, initargs=(config,)) as one_worker:
        slow = one_worker.apply_async(worker.score, ("15", HANGS)).get(timeout=GUARD_S)
        after = one_worker.apply_async(worker.score, ("\\frac{1}{2}", "so $\\boxed{0.5}$")).get(timeout=GUARD_S)
    assert slow == worker.ItemResult(worker.TIMEOUT, 0.0, "gave up after the 0.5 s worker budget")
    assert after == worker.ItemResult(worker.SCORED, 1.0)
