"""Held-out evaluation: miles's eval metrics folded into `status.evaluation`, and the reward-hacking guard
(`guards.evalRegression`). Pure.

miles logs, per eval set `<name>` at each evaluation, `eval/<name>` (the mean reward, a None reward counted as 0),
`eval/<name>-truncated_ratio`, `eval/<name>-none_reward_ratio` and `eval/step` (the rollout after which it
evaluated), through the same tracking path as the training metrics (docs/integrations/miles.md: evaluation). An
evaluation whose rewards were mostly None measures the scorer, not the model: it is a warning event, not a score,
and the guard does not count it. The guard trips when the score stays more than `maxDrop` below its best for
`after` scored evaluations in a row while the training reward, at each of them, is not below its value at the best.
A scrape sees only the latest evaluation; the ones between two scrapes arrive with the end-of-run summary and take
their place in the history (and the baseline or best), while the last score and the guard follow the order seen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from grpo_operator.api.spec import EvalRegressionGuard
from grpo_operator.api.status import EvalPoint, EvalSetStatus, Reason
from grpo_operator.status.guards import Trip
from grpo_operator.status.observation import EvalReading

HISTORY = 20
NONE_HEAVY = 0.5  # more than this share of None rewards: not a score
_SET = r"[a-z0-9][a-z0-9_-]{0,62}"
_KEY = re.compile(rf"^eval/({_SET}?)(-truncated_ratio|-none_reward_ratio)?$")
FIELDS = {"": "score", "-truncated_ratio": "truncated_ratio", "-none_reward_ratio": "none_reward_ratio"}
STEP_KEY = "eval/step"


def eval_key(key: str) -> tuple[str, str] | None:
    """(eval set, field) of one of miles's eval keys; None for any other key (pass rates, per-sample stats)."""
    if key == STEP_KEY:
        return None
    found = _KEY.match(key)
    if found is None:
        return None
    return found.group(1), FIELDS[found.group(2) or ""]


def readings(step: int, values: dict[str, float]) -> tuple[EvalReading, ...]:
    """The evaluations of one eval step, one per set, from miles's keys and their values."""
    sets: dict[str, dict[str, float]] = {}
    for key, value in values.items():
        parsed = eval_key(key)
        if parsed is not None:
            sets.setdefault(parsed[0], {})[parsed[1]] = value
    return tuple(EvalReading(name, step, **fields) for name, fields in sorted(sets.items()))


def not_scored(reading: EvalReading) -> bool:
    return reading.score is None or (reading.none_reward_ratio or 0.0) > NONE_HEAVY


def _point_train_reward(history: list[EvalPoint], rollout: int | None) -> float | None:
    return next((p.train_reward for p in history if p.rollout == rollout), None)


def _regressed(entry: EvalSetStatus, score: float, train: float | None, guard: EvalRegressionGuard | None) -> int:
    """The regression streak after a scored evaluation: one more when it is more than maxDrop below the best and
    the training reward did not fall below its value at the best; else 0."""
    if guard is None or entry.best is None:
        return 0
    below = round(entry.best - score, 9) > guard.max_drop
    at_best = _point_train_reward(entry.history, entry.best_rollout)
    reward_fell = train is not None and at_best is not None and train < at_best
    return entry.regression_streak + 1 if below and not reward_fell else 0


def _scored(
    entry: EvalSetStatus, r: EvalReading, train: float | None, guard: EvalRegressionGuard | None
) -> EvalSetStatus:
    assert r.score is not None
    streak = _regressed(entry, r.score, train, guard)
    better = entry.best is None or r.score > entry.best
    point = EvalPoint(rollout=r.rollout, score=r.score, train_reward=train)
    return entry.model_copy(
        update={
            "baseline": r.score if entry.baseline is None else entry.baseline,
            "baseline_rollout": r.rollout if entry.baseline is None else entry.baseline_rollout,
            "last": r.score,
            "last_rollout": r.rollout,
            "best": r.score if better else entry.best,
            "best_rollout": r.rollout if better else entry.best_rollout,
            "regression_streak": streak,
            "history": [*entry.history, point][-HISTORY:],
        }
    )


def _late(entry: EvalSetStatus, r: EvalReading, train: float | None) -> EvalSetStatus:
    """An evaluation older than the last one recorded, first seen in the end-of-run summary (no scrape caught it):
    it takes its place in the history, and in the baseline or the best where it is one; the last score and the
    guard's count, which follow the evaluations in order, stay."""
    assert r.score is not None
    point = EvalPoint(rollout=r.rollout, score=r.score, train_reward=train)
    history = sorted([*entry.history, point], key=lambda p: p.rollout)[-HISTORY:]
    first = entry.baseline_rollout is None or r.rollout < entry.baseline_rollout
    best = (
        entry.best is None or r.score > entry.best or (r.score == entry.best and r.rollout < (entry.best_rollout or 0))
    )
    return entry.model_copy(
        update={
            "baseline": r.score if first else entry.baseline,
            "baseline_rollout": r.rollout if first else entry.baseline_rollout,
            "best": r.score if best else entry.best,
            "best_rollout": r.rollout if best else entry.best_rollout,
            "history": history,
        }
    )


def _seen(entry: EvalSetStatus, rollout: int) -> bool:
    return rollout in (entry.last_rollout, entry.not_scored_rollout) or any(p.rollout == rollout for p in entry.history)


def fold(
    prev: list[EvalSetStatus] | None,
    seen: Iterable[EvalReading],
    train_reward: Callable[[int], float | None],
    guard: EvalRegressionGuard | None,
) -> tuple[list[EvalSetStatus] | None, list[str]]:
    """The eval sets after the readings of this reconcile (each evaluation counts once), and the warnings of the
    evaluations left unscored."""
    sets = {e.name: e for e in prev or []}
    warnings: list[str] = []
    for r in seen:
        entry = sets.get(r.name) or EvalSetStatus(name=r.name)
        if _seen(entry, r.rollout):
            continue
        latest = max((x for x in (entry.last_rollout, entry.not_scored_rollout) if x is not None), default=None)
        if latest is not None and r.rollout < latest:
            sets[r.name] = entry if not_scored(r) else _late(entry, r, train_reward(r.rollout))
            continue
        ratios = {"truncated_ratio": r.truncated_ratio, "none_reward_ratio": r.none_reward_ratio}
        if not_scored(r):
            sets[r.name] = entry.model_copy(update={**ratios, "not_scored_rollout": r.rollout})
            warnings.append(
                f"eval/{r.name} at rollout {r.rollout}: {r.none_reward_ratio or 0:.0%} of its rewards were None "
                "(errored or aborted samples): not scored, and not counted by guards.evalRegression"
            )
            continue
        sets[r.name] = _scored(entry.model_copy(update=ratios), r, train_reward(r.rollout), guard)
    return (list(sets.values()) or None), warnings


def regression(sets: list[EvalSetStatus] | None, guard: EvalRegressionGuard | None) -> Trip | None:
    """The guard's verdict on the eval sets as they stand."""
    if guard is None:
        return None
    for entry in sets or []:
        if entry.regression_streak >= guard.after and entry.best is not None and entry.last is not None:
            return Trip(
                Reason.EVAL_REGRESSED,
                f"eval/{entry.name} {entry.last:g} at rollout {entry.last_rollout} is more than "
                f"guards.evalRegression.maxDrop {guard.max_drop:g} below its best {entry.best:g} (rollout "
                f"{entry.best_rollout}) for {entry.regression_streak} evaluations in a row while the training reward "
                "did not fall: the policy may be exploiting the reward",
            )
    return None
