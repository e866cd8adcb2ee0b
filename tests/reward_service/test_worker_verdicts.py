"""The reward a scoring worker gives one item: the integer shortcut the server takes itself, math_verify's verdict
on equivalent forms, a final answer missing, a gold label math_verify cannot read, and the worker's budget.

The worker runs in this process (its alarm and SIGTERM handlers restored after each test), except for the
budget, which needs a response that runs for minutes: that one runs in a spawned worker, as the pool runs it."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, ClassVar

import math_verify.grader
import math_verify.parser
import pytest
from pebble.common.process import process_exit as pebble_process_exit
from reward_service.cache import ByteLRU
from reward_service.extraction import label_text
from reward_service.settings import Backend, Extraction

from reward_service import worker

BOTH = Extraction.BOXED_OR_ANSWER_LINE
QUIETED = ("math_verify", "latex2sympy2_extended")
GUARD_S = 60  # a hang guard: a spawned worker starts in seconds and gives up after 2 s
HANGS = "Simplifying, the result is $\\boxed{9^{9^{9^{9}}}}$."  # runs for minutes without a budget
NO_MODEL = ("", 2048, 1)  # a WorkerConfig's reward-model fields (name, max length, threads), unused by math_verify


@pytest.fixture
def scoring_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Start this process as a worker; its signal handlers and the worker's state are put back after."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGALRM, signal.SIGTERM)}
    for name in QUIETED:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.getLogger(name).level)
    monkeypatch.setattr(worker, "_state", worker._WorkerState())

    def start(
        extraction: Extraction = BOTH,
        budget_s: float = 60.0,
        cache_bytes: int = 8 << 20,
        backend: Backend = Backend.MATH_VERIFY,
        model: tuple[str, int, int] = NO_MODEL,
    ) -> None:
        worker.initialize(worker.WorkerConfig(backend, extraction, budget_s, cache_bytes, *model))

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
        ("42", "Answer: 42$", 1.0),  # a closing $ without its opening one is no math delimiter pair: 42$ reads as 42
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
    scoring_worker: Callable[..., None], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a fresh worker: math_verify warns once per process, and an earlier test here may have had it warn.
    for module in (math_verify.parser, math_verify.grader):
        monkeypatch.setattr(module, "TIMEOUT_WARNING_SHOWN", False)
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
    ids=[
        "right",
        "wrong",
        "no answer",
        "right at the length limit",
        "one character over the limit",
        "a decimal answer",
        "a fraction label",
        "a fraction label without an answer",
    ],
)
def test_the_server_scores_integer_answers_itself_and_leaves_the_rest_to_a_worker(
    label: str, response: str, verdict: worker.ItemResult | None
) -> None:
    assert worker.quick_verdict(label, response, BOTH, max_chars=96) == verdict


def test_an_item_past_the_worker_budget_times_out_and_the_worker_scores_the_next() -> None:
    config = worker.WorkerConfig(Backend.MATH_VERIFY, BOTH, 2.0, 8 << 20, *NO_MODEL)
    context = multiprocessing.get_context("spawn")  # the alarm and SIGTERM setup stay out of pytest
    # A worker that ignores its budget would run for minutes: the wait is bounded and leaving the block kills it.
    with context.Pool(1, initializer=worker.initialize, initargs=(config,)) as one_worker:
        # Warmed as the pool's start warms each worker (pool.py:115): a cold first parse can take longer than a
        # budget on a loaded machine, and then the next item timed out too.
        one_worker.apply_async(worker.warm_up).get(timeout=GUARD_S)
        slow = one_worker.apply_async(worker.score, ("15", HANGS)).get(timeout=GUARD_S)
        after = one_worker.apply_async(worker.score, ("\\frac{1}{2}", "so $\\boxed{0.5}$")).get(timeout=GUARD_S)
    assert slow == worker.ItemResult(worker.TIMEOUT, 0.0, "gave up after the 2 s worker budget")
    assert after == worker.ItemResult(worker.SCORED, 1.0)


def test_a_budget_under_a_second_is_kept_too() -> None:
    # The default budget is half the hard deadline: 1 s for math_verify's default of 2 s, less when it is lowered.
    config = worker.WorkerConfig(Backend.MATH_VERIFY, BOTH, 0.25, 8 << 20, *NO_MODEL)
    with multiprocessing.get_context("spawn").Pool(1, initializer=worker.initialize, initargs=(config,)) as one_worker:
        slow = one_worker.apply_async(worker.score, ("15", HANGS)).get(timeout=GUARD_S)
    assert slow == worker.ItemResult(worker.TIMEOUT, 0.0, "gave up after the 0.25 s worker budget")


def test_an_alarm_while_the_worker_is_idle_is_ignored() -> None:
    # Only an item's own alarm may stop it: a SIGALRM before the worker's first item, or after an item (the
    # item's timer can expire just as the item ends), must not end the worker. In a spawned worker, so that a
    # worker that would die of the signal fails this test instead of ending pytest.
    config = worker.WorkerConfig(Backend.MATH_VERIFY, BOTH, 60.0, 8 << 20, *NO_MODEL)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, context, initializer=worker.initialize, initargs=(config,)) as one_worker:
        one_worker.submit(signal.raise_signal, signal.SIGALRM).result(timeout=GUARD_S)
        first = one_worker.submit(worker.score, "\\frac{1}{2}", "so $\\boxed{0.5}$").result(timeout=GUARD_S)
        one_worker.submit(signal.raise_signal, signal.SIGALRM).result(timeout=GUARD_S)
        second = one_worker.submit(worker.score, "\\frac{1}{3}", "so $\\boxed{0.5}$").result(timeout=GUARD_S)
    assert (first, second) == (worker.ItemResult(worker.SCORED, 1.0), worker.ItemResult(worker.SCORED, 0.0))


def test_a_workers_caches_stay_within_its_cache_budget_however_many_items_it_scores(
    scoring_worker: Callable[..., None],
) -> None:
    budget = 64 << 10  # REWARD_CACHE_MIB is per worker, parses and verdicts together
    scoring_worker(cache_bytes=budget)
    rewards = [worker.score(f"\\frac{{1}}{{{k}}}", f"so $\\boxed{{1/{k}}}$").reward for k in range(2, 200)]
    assert rewards == [1.0] * 198
    parses, verdicts = worker._state.parse_cached, worker._state.verify_cached
    assert isinstance(parses, ByteLRU) and isinstance(verdicts, ByteLRU)
    assert len(parses) > 100 and len(verdicts) > 50  # both caches are in use, and full
    assert parses.bytes + verdicts.bytes <= budget


def test_the_warm_up_at_start_logs_no_math_verify_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A fresh forkserver: math_verify has not yet warned that its timeouts are off (it warns once per process,
    # which in the service would read as "no timeout" when the worker's alarm is the timeout).
    for module in (math_verify.parser, math_verify.grader):
        monkeypatch.setattr(module, "TIMEOUT_WARNING_SHOWN", False)
    logger = logging.getLogger("math_verify")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    try:
        with caplog.at_level(logging.WARNING):
            worker.warm_up()
    finally:
        logger.setLevel(level)
    assert [r.getMessage() for r in caplog.records if r.name.startswith(QUIETED)] == []


# In a fresh interpreter (this one has long imported what math_verify loads lazily): warm up as the pool's
# forkserver and each worker do, start the worker, then score answer forms like the warm-up's own.
_FIRST_ITEMS_AFTER_WARM_UP = """
import sys
from reward_service import worker
from reward_service.settings import Backend, Extraction
worker.warm_up()
worker.initialize(worker.WorkerConfig(Backend.MATH_VERIFY, Extraction.BOXED, 0, 8 << 20, "", 2048, 1))
before = set(sys.modules)
items = [("\\\\frac{1}{4}", "0.25"), ("\\\\sqrt{12}", "2\\\\sqrt{3}"), ("5", "x=5"), ("(a+b)^2", "a^2+2ab+b^2"),
         ("\\\\{3,4\\\\}", "(3, 4)"), ("6", "\\\\binom{4}{2}"), ("90", "90^\\\\circ")]
print([worker.score(gold, "so \\\\boxed{" + answer + "}").reward for gold, answer in items])
print(sorted(set(sys.modules) - before))
"""


def test_a_warmed_up_worker_imports_nothing_while_it_scores_its_first_items() -> None:
    # The warm-up is there so that a new worker's (or a replacement's) first requests do not pay for the
    # parser's and sympy's lazy imports, about 1 s; an import while scoring is that cost, paid inside the budget.
    run = subprocess.run(
        [sys.executable, "-c", _FIRST_ITEMS_AFTER_WARM_UP], capture_output=True, text=True, timeout=GUARD_S, check=True
    )
    rewards, imported = run.stdout.splitlines()
    assert rewards == str([1.0] * 7)
    assert imported == "[]"


class FakeRewardModel:
    """Stands in for reward_model.RewardModel, a Hugging Face classifier that needs torch (not in the unit tier):
    the same constructor and `score(prompt, response)`; it scores the response's length plus 0.5 for the prompt
    "p", so a reward shows which item and prompt were scored."""

    loaded: ClassVar[list[tuple[str, int, int]]] = []

    def __init__(self, model_name: str, max_length: int, torch_threads: int) -> None:
        self.loaded.append((model_name, max_length, torch_threads))

    def score(self, prompt: object, response: str) -> float:
        return len(response) + (0.5 if prompt == "p" else 0.0)


def test_the_reward_model_backend_gives_the_models_score_without_a_label(
    scoring_worker: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "RewardModel", FakeRewardModel)
    monkeypatch.setattr(FakeRewardModel, "loaded", [])
    scoring_worker(backend=Backend.REWARD_MODEL, model=("org/rm", 512, 2))
    assert worker.score(None, "four", "p") == worker.ItemResult(worker.SCORED, 4.5)
    assert worker.score(None, "sixsix", None) == worker.ItemResult(worker.SCORED, 6.0)
    assert FakeRewardModel.loaded == [("org/rm", 512, 2)]  # loaded once, as configured


def _a_worker_stuck_in_c_code(config: worker.WorkerConfig, started: Any) -> None:
    # pebble's worker process installs its own SIGTERM handler before it runs the initializer
    # (pebble 5.2.3 pool/process.py:485-486; docs/integrations/pebble.md).
    signal.signal(signal.SIGTERM, pebble_process_exit)
    worker.initialize(config)
    started.set()
    sum(itertools.repeat(1, 10**13))  # one C call that never returns to the interpreter, as a stuck GMP call


def test_a_worker_stuck_in_c_code_dies_at_once_when_the_pool_terminates_it() -> None:
    # The pool's kill at the hard deadline is a SIGTERM; a Python handler would run only once the C call returned
    # (pebble then waits 3 s and sends SIGKILL). Killed by the signal itself, the worker is replaced at once.
    config = worker.WorkerConfig(Backend.MATH_VERIFY, BOTH, 0.5, 8 << 20, *NO_MODEL)
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    stuck = context.Process(target=_a_worker_stuck_in_c_code, args=(config, started))
    stuck.start()
    try:
        assert started.wait(GUARD_S)
        stuck.terminate()
        stuck.join(GUARD_S)
        assert stuck.exitcode == -signal.SIGTERM
    finally:
        stuck.kill()
        stuck.join()


@pytest.mark.parametrize(
    ("label", "response", "reward"),
    [
        pytest.param(50, "so $\\boxed{50\\%}$", 1.0, id="percent-answer-against-the-number"),
        pytest.param(0.5, "so $\\boxed{50\\%}$", 0.0, id="percent-answer-against-the-fraction"),
        pytest.param("\\frac{1}{2}", "so $\\boxed{50\\%}$", 0.0, id="percent-answer-against-a-latex-fraction"),
        pytest.param("50\\%", "so $\\boxed{50}$", 1.0, id="percent-gold-against-the-number"),
        pytest.param("50\\%", "so $\\boxed{0.5}$", 0.0, id="percent-gold-against-the-fraction"),
        pytest.param("50\\%", "Answer: 50%", 1.0, id="percent-both-plain-text"),
        pytest.param("12.5", "so $\\boxed{12.5\\,\\%}$", 1.0, id="thin-space-before-the-sign"),
        pytest.param(50, "so $\\boxed{50\\text{\\%}}$", 1.0, id="text-percent"),
    ],
)
def test_a_percent_is_graded_as_the_number_before_its_sign_never_also_as_its_hundredth(
    label: object, response: str, reward: float, scoring_worker: Callable[..., None]
) -> None:
    """`\\boxed{50\\%}` is 50: it matches a gold 50 or 50%, never 0.5 (math_verify alone gave 1.0 against both)."""
    scoring_worker()
    assert worker.score(label_text(label), response).reward == reward  # type: ignore[arg-type]
