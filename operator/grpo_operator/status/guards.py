"""Guards: decide from the trainer's metrics whether a run degenerates or stalls. Pure.

The seed's 30B MoE run finished SUCCEEDED with reward 0.0 and repetition 0.56 after 20 minutes on 16 GPUs;
these rules are what would have stopped it: repetition above `maxRepetitionFrac` for `consecutiveRollouts`
rollouts in a row, reward at or below `minReward.value` once `minReward.afterRollouts` rollouts are done,
or no rollout progress for `stallTimeoutSeconds` while the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from grpo_operator.api.spec import GuardsSpec
from grpo_operator.status.observation import TrainerMetrics

DEGENERATE = "DegenerateOutput"
STALLED = "Stalled"


@dataclass(frozen=True)
class GuardState:
    """What the guards remember between reconciles (kept in the status)."""

    last_rollout: int | None = None
    streak: int = 0
    last_progress: datetime | None = None


@dataclass(frozen=True)
class Trip:
    reason: str
    message: str


def advance(state: GuardState, guards: GuardsSpec, metrics: TrainerMetrics | None, now: datetime) -> GuardState:
    """Fold a newly scraped rollout into the state; the same rollout seen twice counts once."""
    if metrics is None or metrics.rollout is None:
        return state
    if state.last_rollout is not None and metrics.rollout <= state.last_rollout:
        return state
    repetitive = metrics.repetition_frac is not None and metrics.repetition_frac > guards.max_repetition_frac
    return GuardState(last_rollout=metrics.rollout, streak=state.streak + 1 if repetitive else 0, last_progress=now)


def degenerate(state: GuardState, guards: GuardsSpec, metrics: TrainerMetrics | None) -> Trip | None:
    if metrics is None:
        return None
    if state.streak >= guards.consecutive_rollouts and metrics.repetition_frac is not None:
        return Trip(DEGENERATE,
                    f"rollout/repetition_frac {metrics.repetition_frac:g} above guards.maxRepetitionFrac "
                    f"{guards.max_repetition_frac:g} for {state.streak} consecutive rollouts")  # fmt: skip
    done = metrics.rollout + 1 if metrics.rollout is not None else 0
    floor = guards.min_reward
    if done >= floor.after_rollouts and metrics.raw_reward is not None and metrics.raw_reward <= floor.value:
        return Trip(DEGENERATE,
                    f"rollout/raw_reward {metrics.raw_reward:g} at or below guards.minReward.value {floor.value:g} "
                    f"after {done} rollouts")  # fmt: skip
    return None


def stalled(state: GuardState, guards: GuardsSpec, running_since: datetime | None, now: datetime) -> Trip | None:
    since = state.last_progress or running_since
    if since is None:
        return None
    idle = (now - since).total_seconds()
    if idle > guards.stall_timeout_seconds:
        what = f"rollout {state.last_rollout}" if state.last_rollout is not None else "the job started"
        return Trip(STALLED, f"no rollout progress for {int(idle)} s since {what} "
                             f"(guards.stallTimeoutSeconds {guards.stall_timeout_seconds})")  # fmt: skip
    return None
