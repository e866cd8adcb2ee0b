"""Guards: from the trainer's metrics, whether a run degenerates (repetition above `maxRepetitionFrac` for
`consecutiveRollouts` rollouts in a row, or reward at or below `minReward.value` once `minReward.afterRollouts`
rollouts are done) or stalls (no new rollout for `stallTimeoutSeconds` while the metrics can be read, the clock
starting `startupGraceSeconds` after the attempt's start). The state is per attempt: a resumed miles restarts its
rollout numbering at the checkpoint (docs/integrations/miles.md), so progress means "the rollout changed".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from grpo_operator.api.spec import GuardsSpec
from grpo_operator.api.status import Reason
from grpo_operator.status.observation import TrainerMetrics

DEGENERATE = Reason.DEGENERATE_OUTPUT
STALLED = Reason.STALLED


@dataclass(frozen=True)
class GuardState:
    """What the guards remember between reconciles (kept in the status)."""

    last_rollout: int | None = None
    streak: int = 0
    last_progress: datetime | None = None


@dataclass(frozen=True)
class Trip:
    reason: Reason
    message: str


def advance(state: GuardState, guards: GuardsSpec, metrics: TrainerMetrics, now: datetime) -> GuardState:
    """Fold an observed rollout (metrics with a rollout id) into the state; the same rollout seen twice counts
    once."""
    if state.last_rollout is not None and metrics.rollout == state.last_rollout:
        return state
    repetitive = metrics.repetition_frac is not None and metrics.repetition_frac > guards.max_repetition_frac
    return GuardState(last_rollout=metrics.rollout, streak=state.streak + 1 if repetitive else 0, last_progress=now)


def degenerate(state: GuardState, guards: GuardsSpec, metrics: TrainerMetrics | None) -> Trip | None:
    if metrics is None:
        return None
    if state.streak >= guards.consecutive_rollouts and metrics.repetition_frac is not None:
        return Trip(
            DEGENERATE,
            f"rollout/repetition_frac {metrics.repetition_frac:g} above guards.maxRepetitionFrac "
            f"{guards.max_repetition_frac:g} for {state.streak} consecutive rollouts",
        )
    done = metrics.rollout + 1 if metrics.rollout is not None else 0
    guard, floor = guards.min_reward, guards.min_reward.floor
    if (
        done >= guard.after_rollouts
        and metrics.raw_reward is not None
        and floor is not None
        and metrics.raw_reward <= floor
    ):
        return Trip(
            DEGENERATE,
            f"rollout/raw_reward {metrics.raw_reward:g} at or below {guard.describe()} after {done} rollouts",
        )
    return None


def stalled(
    state: GuardState, guards: GuardsSpec, attempt_since: datetime | None, now: datetime, metrics_available: bool
) -> Trip | None:
    """No progress for `stallTimeoutSeconds` since the last new rollout of this attempt, or since the attempt's
    start plus `startupGraceSeconds`; judged only while the trainer's metrics can be read."""
    if not metrics_available:
        return None
    if state.last_progress is not None:
        since, what = state.last_progress, f"rollout {state.last_rollout}"
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
