"""Conditions: lastTransitionTime moves with the status only, every condition carries the current generation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from grpo_operator.api.status import ConditionType, GRPORunStatus, Reason
from grpo_operator.status.conditions import Conditions

from tests.support.status import T0

C = ConditionType


def _after(
    prev: GRPORunStatus | None, generation: int, minutes: int, *sets: tuple[C, bool | None, Reason]
) -> GRPORunStatus:
    conds = Conditions(prev, generation, T0 + timedelta(minutes=minutes))
    for type_, status, reason in sets:
        conds.set(type_, status, reason)
    return GRPORunStatus(conditions=conds.all())


def _get(status: GRPORunStatus, type_: C) -> tuple[str, str, str, int | None]:
    c = next(c for c in status.conditions if c.type == type_)
    return c.status, c.reason, c.last_transition_time, c.observed_generation


@pytest.mark.parametrize(
    ("second", "moved"),
    [
        pytest.param(
            (C.METRICS_AVAILABLE, False, Reason.SCRAPE_OUTAGE),
            False,
            id="a new reason on the same status does not move it",
        ),  # same status, new reason
        pytest.param(
            (C.METRICS_AVAILABLE, False, Reason.SCRAPE_FAILED), False, id="an unchanged condition does not move it"
        ),  # unchanged
        pytest.param(
            (C.METRICS_AVAILABLE, True, Reason.SCRAPED), True, id="a status from False to True moves it"
        ),  # status changed
        pytest.param(
            (C.METRICS_AVAILABLE, None, Reason.NOT_RUNNING), True, id="a status from False to Unknown moves it"
        ),
    ],
)
def test_last_transition_time_moves_only_when_the_status_changes(
    second: tuple[C, bool | None, Reason], moved: bool
) -> None:
    first = _after(None, 1, 0, (C.METRICS_AVAILABLE, False, Reason.SCRAPE_FAILED))
    then = _after(first, 1, 10, second)
    assert (_get(then, C.METRICS_AVAILABLE)[2] != _get(first, C.METRICS_AVAILABLE)[2]) is moved
    assert _get(then, C.METRICS_AVAILABLE)[1] == second[2]


def test_every_condition_carries_the_generation_processed_now_even_one_not_set_again() -> None:
    first = _after(None, 1, 0, (C.VALIDATED, True, Reason.VALID), (C.HEALTHY, True, Reason.METRICS_HEALTHY))
    then = _after(first, 3, 5, (C.VALIDATED, True, Reason.VALID))
    assert [c.observed_generation for c in then.conditions] == [3, 3]
    assert _get(then, C.HEALTHY)[2] == _get(first, C.HEALTHY)[2]  # carried, not transitioned


def test_conditions_come_in_the_declared_order() -> None:
    status = _after(None, 1, 0, *((t, True, Reason.READY) for t in reversed(C)))
    assert [c.type for c in status.conditions] == list(C)
