"""The guards' memory is one object, `status.guards`: kept whole from one reconcile to the next, reset whole when an
attempt starts, and read and written field by field only in status/guards.py. A guard with a streak of its own is a
row of `guards.DEGENERATION` and one field of the memory: the example below adds one in this test alone."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from grpo_operator.api.spec import GuardsSpec
from grpo_operator.api.status import GuardMemory, Phase, Reason
from grpo_operator.status import guards
from grpo_operator.status.guards import Guard, Trip
from grpo_operator.status.observation import JobState, TrainerMetrics

from tests.support.status import READY, T0, at, healthy, intent, job, run_through, spec

PRODUCT = Path(__file__).resolve().parents[2] / "operator" / "grpo_operator"
# The progress pair every guard shares: the suspend's checkpoint wait reads the last rollout counted too.
SHARED = {"last_rollout", "last_progress_time"}


def test_a_new_attempt_starts_with_the_whole_memory_afresh_and_the_same_attempt_keeps_it() -> None:
    s = intent(spec({"guards": {"consecutiveRollouts": 3}}))
    running = run_through(s, at(cluster=READY, job=job(JobState.RUNNING), metrics=healthy(4, repetition=0.9)))
    assert running.status.guards == GuardMemory(
        last_rollout=4, repetition_streak=1, last_progress_time="2026-11-30T12:00:00Z"
    )
    later = at(T0 + timedelta(minutes=1), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(5, repetition=0.9))
    assert run_through(s, later, prev=running.status).status.guards == GuardMemory(
        last_rollout=5, repetition_streak=2, last_progress_time="2026-11-30T12:01:00Z"
    )
    resumed = at(cluster=READY, job=job(JobState.RUNNING, submission_id="grpo-x-2"))  # a job this status has not seen
    assert run_through(s, resumed, prev=running.status).status.guards == GuardMemory()


# --- a guard with a streak, added in this test alone: it remembers one field, `truncation_streak`, and nothing
# outside status/guards.py's table changes. In the product the field goes on `GuardMemory` (api/status.py, then
# `make crds`) and the row into `guards.DEGENERATION`; here both live in the test.


class _Memory(GuardMemory):
    truncation_streak: int = 0


TRUNCATED_ABOVE, IN_A_ROW = 0.5, 2


def _truncation_fold(memory: GuardMemory, spec_: GuardsSpec, metrics: TrainerMetrics) -> GuardMemory:
    truncated = metrics.truncated_ratio is not None and metrics.truncated_ratio > TRUNCATED_ABOVE
    streak = getattr(memory, "truncation_streak", 0)
    return memory.model_copy(update={"truncation_streak": streak + 1 if truncated else 0})


def _truncation_trip(memory: GuardMemory, spec_: GuardsSpec, metrics: TrainerMetrics) -> Trip | None:
    streak = getattr(memory, "truncation_streak", 0)
    if streak < IN_A_ROW:
        return None
    return Trip(Reason.DEGENERATE_OUTPUT, f"truncated_ratio above {TRUNCATED_ABOVE} for {streak} rollouts")


TABLE = (*guards.DEGENERATION, Guard(_truncation_fold, _truncation_trip))


def _rollouts(*ratios: float) -> tuple[GuardMemory, Trip | None]:
    """Fold rollouts 0, 1, ... with these truncated ratios; the memory after them and the verdict on the last."""
    memory: GuardMemory = _Memory()
    s = spec().guards
    metrics = TrainerMetrics()
    for rollout, ratio in enumerate(ratios):
        metrics = TrainerMetrics(rollout=rollout, raw_reward=0.5, repetition_frac=0.0, truncated_ratio=ratio)
        memory = guards.advance(memory, s, metrics, T0 + timedelta(seconds=rollout), TABLE)
    return memory, guards.degenerate(memory, s, metrics, TABLE)


@pytest.mark.parametrize(
    ("ratios", "streak", "trips"),
    [
        pytest.param((0.6,), 1, False, id="one truncated rollout is not yet a streak"),
        pytest.param((0.6, 0.7), 2, True, id="two in a row trip it"),
        pytest.param((0.6, 0.2, 0.7), 1, False, id="a clean rollout between resets the streak"),
        pytest.param((0.5, 0.5), 0, False, id="at the limit is not above it"),
    ],
)
def test_a_guard_with_a_streak_of_its_own_needs_only_its_table_row_and_one_field(
    ratios: tuple[float, ...], streak: int, trips: bool
) -> None:
    memory, trip = _rollouts(*ratios)
    assert isinstance(memory, _Memory) and memory.truncation_streak == streak
    assert memory.repetition_streak == 0 and memory.last_rollout == len(ratios) - 1  # the others' fields as ever
    assert (trip is not None) is trips


def test_the_new_guards_rollout_seen_twice_counts_once_like_every_guards() -> None:
    memory, _ = _rollouts(0.6)
    again = guards.advance(memory, spec().guards, TrainerMetrics(rollout=0, truncated_ratio=0.6), T0, TABLE)
    assert again == memory


def test_only_status_guards_reads_or_writes_a_guards_own_fields() -> None:
    """What makes a new guard one file and one field: nothing else in the operator names a guard's own memory."""
    own = set(GuardMemory.model_fields) - SHARED
    for path in PRODUCT.rglob("*.py"):
        if path.relative_to(PRODUCT).as_posix() in ("status/guards.py", "api/status.py"):
            continue
        text = path.read_text()
        named = {field for field in own if re.search(rf"\b{field}\b", text)}
        assert not named, f"{path.relative_to(PRODUCT)} names {sorted(named)}: read and write them in status/guards.py"


def test_a_streak_that_trips_fails_the_run_with_the_guards_message() -> None:
    s = intent(spec({"guards": {"consecutiveRollouts": 2}}))
    readings = [
        at(T0 + timedelta(minutes=i), cluster=READY, job=job(JobState.RUNNING), metrics=healthy(i, repetition=0.9))
        for i in range(2)
    ]
    d = run_through(s, *readings)
    assert (d.status.phase, d.status.reason) == (Phase.FAILED, Reason.DEGENERATE_OUTPUT)
    assert d.status.guards is not None and d.status.guards.repetition_streak == 2
