"""The run's conditions (metav1.Condition): each persists until set again, its lastTransitionTime moves only when
its status changes (a new reason alone does not move it), and every condition carries the generation this
reconcile processed."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from grpo_operator.api.status import Condition, ConditionType, GRPORunStatus
from grpo_operator.status.observation import rfc3339

ConditionStatus = Literal["True", "False", "Unknown"]
MAX_MESSAGE = 32000


def _text(status: bool | None) -> ConditionStatus:
    return "Unknown" if status is None else ("True" if status else "False")


class Conditions:
    def __init__(self, prev: GRPORunStatus | None, generation: int, now: datetime) -> None:
        self._old = {c.type: c for c in (prev.conditions if prev else [])}
        self._new: dict[ConditionType, Condition] = dict(self._old)
        self._generation, self._now = generation, now

    def get(self, type_: ConditionType) -> Condition | None:
        """The condition as the previous status had it."""
        return self._old.get(type_)

    def set(self, type_: ConditionType, status: bool | None, reason: str, message: str = "") -> None:
        text = _text(status)
        old = self._old.get(type_)
        since = old.last_transition_time if old is not None and old.status == text else rfc3339(self._now)
        self._new[type_] = Condition(
            type=type_,
            status=text,
            reason=reason,
            message=message[:MAX_MESSAGE],
            last_transition_time=since,
            observed_generation=self._generation,
        )

    def all(self) -> list[Condition]:
        """Every condition in `ConditionType` order, each stamped with the generation processed now."""
        rank = {t: i for i, t in enumerate(ConditionType)}
        return [
            c.model_copy(update={"observed_generation": self._generation})
            for c in sorted(self._new.values(), key=lambda c: rank[c.type])
        ]


def restamped(conditions: list[Condition], generation: int) -> list[Condition]:
    """A terminal run's conditions hold for every later generation too."""
    return [c.model_copy(update={"observed_generation": generation}) for c in conditions]
