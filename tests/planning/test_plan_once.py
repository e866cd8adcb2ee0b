"""A reconcile makes the plan once: `check` (the reconciler's and the CLI's one entry into planning) enters
planning/plan.py a single time, and validation judges the plan it made rather than recomputing parts of it."""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from grpo_operator.planning import plan as plan_module
from grpo_operator.planning.validation import check

from tests.support.builders import base, merge
from tests.support.builders import check as parse

PLAN_FILE = str(Path(plan_module.__file__).resolve())


def entries_into_plan(call: Any) -> int:
    """How many times control passes into plan.py from code outside it while `call()` runs."""
    entries = 0

    def profile(frame: FrameType, event: str, _: object) -> None:
        nonlocal entries
        if event != "call" or str(Path(frame.f_code.co_filename).resolve()) != PLAN_FILE:
            return
        caller = frame.f_back
        if caller is None or str(Path(caller.f_code.co_filename).resolve()) != PLAN_FILE:
            entries += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entries


@pytest.mark.parametrize(
    "patch",
    [
        {},
        {"topology": {"placement": "Disaggregated", "actor": {"nodes": 2}, "rollout": {"gpus": 8}}},
        {"training": {"maxTokensPerGpu": 1_048_576}},  # a plan whose memory rules refuse it
    ],
    ids=["colocated", "disaggregated", "over-memory"],
)
def test_checking_a_run_enters_the_plan_once(patch: dict[str, Any]) -> None:
    run, _ = parse(merge(base(), {"spec": patch}))
    assert run is not None
    result: list[object] = []
    assert entries_into_plan(lambda: result.append(check(run))) == 1
    assert result[0].plan is not None  # type: ignore[attr-defined]


def test_the_over_memory_case_is_refused_by_the_plans_memory_rules() -> None:
    run, _ = parse(merge(base(), {"spec": {"training": {"maxTokensPerGpu": 1_048_576}}}))
    assert run is not None
    assert [p.path for p in check(run).problems if "GiB per GPU" in p.message] == ["spec.topology"]
