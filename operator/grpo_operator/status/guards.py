"""Guards: from the trainer's metrics, whether a run degenerates (repetition above `maxRepetitionFrac` for
`consecutiveRollouts` rollouts in a row, or reward at or below `minReward.value` once `minReward.afterRollouts`
rollouts are done) or stalls (no new rollout for `stallTimeoutSeconds` while the metrics can be read, the clock
starting `startupGraceSeconds` after the attempt's start). What they remember between reconciles is one object,
`status.guards` (`GuardMemory`): this module reads and writes its fields, the rest of the operator keeps it or resets
it whole. It is per attempt: a resumed miles restarts its rollout numbering at the checkpoint
(docs/integrations/miles.md), so progress means "the rollout changed". A guard on the rollouts is a row of
`DEGENERATION`: how a new rollout changes its part of the memory, and when it trips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from grpo_operator.api.spec import GuardsSpec
from grpo_operator.api.status import GRPORunStatus, GuardMemory, Reason
from grpo_operator.status.observation import TrainerMetrics, parse_rfc3339, rfc3339

DEGENERATE = Reason.DEGENERATE_OUTPUT
STALLED = Reason.STALLED


@dataclass(frozen=True)
class Trip:
    reason: Reason
    message: str


@dataclass(frozen=True)
class Guard:
    """One guard on the rollouts: `fold` takes a new rollout's metrics into the guard's own fields of the memory
    (the memory as it was, for a guard that remembers nothing); `trip` says whether the memory and the latest
    metrics trip it."""

    fold: Callable[[GuardMemory, GuardsSpec, TrainerMetrics], GuardMemory]
    trip: Callable[[GuardMemory, GuardsSpec, TrainerMetrics], Trip | None]


def _remembers_nothing(memory: GuardMemory, guards: GuardsSpec, metrics: TrainerMetrics) -> GuardMemory:
    return memory


def _repetition_fold(memory: GuardMemory, guards: GuardsSpec, metrics: TrainerMetrics) -> GuardMemory:
    repetitive = metrics.repetition_frac is not None and metrics.repetition_frac > guards.max_repetition_frac
    return memory.model_copy(update={"repetition_streak": memory.repetition_streak + 1 if repetitive else 0})


def _repetition_trip(memory: GuardMemory, guards: GuardsSpec, metrics: TrainerMetrics) -> Trip | None:
    if memory.repetition_streak < guards.consecutive_rollouts or metrics.repetition_frac is None:
        return None
    return Trip(
        DEGENERATE,
        f"rollout/repetition_frac {metrics.repetition_frac:g} above guards.maxRepetitionFrac "
        f"{guards.max_repetition_frac:g} for {memory.repetition_streak} consecutive rollouts",
    )


def _min_reward_trip(memory: GuardMemory, guards: GuardsSpec, metrics: TrainerMetrics) -> Trip | None:
    done = metrics.rollout + 1 if metrics.rollout is not None else 0
    guard, floor = guards.min_reward, guards.min_reward.floor
    if done < guard.after_rollouts or metrics.raw_reward is None or floor is None or metrics.raw_reward > floor:
        return None
    return Trip(
        DEGENERATE, f"rollout/raw_reward {metrics.raw_reward:g} at or below {guard.describe()} after {done} rollouts"
    )


# In the order they are judged: the first to trip says why.
DEGENERATION = (Guard(_repetition_fold, _repetition_trip), Guard(_remembers_nothing, _min_reward_trip))


def remembered(prev: GRPORunStatus | None, same_attempt: bool) -> GuardMemory:
    """What the guards remember of this attempt; a new attempt starts from nothing."""
    if prev is None or not same_attempt or prev.guards is None:
        return GuardMemory()
    return prev.guards


def advance(
    memory: GuardMemory,
    guards: GuardsSpec,
    metrics: TrainerMetrics,
    now: datetime,
    table: tuple[Guard, ...] = DEGENERATION,
) -> GuardMemory:
    """Fold an observed rollout (metrics with a rollout id) into the memory; the same rollout seen twice counts
    once."""
    if memory.last_rollout is not None and metrics.rollout == memory.last_rollout:
        return memory
    for guard in table:
        memory = guard.fold(memory, guards, metrics)
    return memory.model_copy(update={"last_rollout": metrics.rollout, "last_progress_time": rfc3339(now)})


def degenerate(
    memory: GuardMemory, guards: GuardsSpec, metrics: TrainerMetrics | None, table: tuple[Guard, ...] = DEGENERATION
) -> Trip | None:
    if metrics is None:
        return None
    return next((trip for guard in table if (trip := guard.trip(memory, guards, metrics)) is not None), None)


def stalled(
    memory: GuardMemory, guards: GuardsSpec, attempt_since: datetime | None, now: datetime, metrics_available: bool
) -> Trip | None:
    """No progress for `stallTimeoutSeconds` since the last new rollout of this attempt, or since the attempt's
    start plus `startupGraceSeconds`; judged only while the trainer's metrics can be read."""
    if not metrics_available:
        return None
    last_progress = parse_rfc3339(memory.last_progress_time)
    if last_progress is not None:
        since, what = last_progress, f"rollout {memory.last_rollout}"
    elif attempt_since is not None:
        since = attempt_since + timedelta(seconds=guards.startup_grace_seconds)
        what = f"the job started (+ guards.startupGraceSeconds {guards.startup_grace_seconds})"
    else:
        return None
    idle = (now - since).total_seconds()
    if idle > guards.stall_timeout_seconds:
        return Trip(
            STALLED,
            f"no rollout progress for {int(idle)} s since {what} "
            f"(guards.stallTimeoutSeconds {guards.stall_timeout_seconds})",
        )
    return None
