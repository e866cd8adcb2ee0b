from __future__ import annotations

from typing import Any

import pytest
from grpo_operator.api import GRPORun
from grpo_operator.planning.validation import Problem, errors

from tests.support.builders import base, check, merge


@pytest.fixture
def spec_with():  # type: ignore[no-untyped-def]
    """Validate the base example with a spec patch; returns (run, error problems)."""

    def build(patch: dict[str, Any]) -> tuple[GRPORun | None, list[Problem]]:
        run, problems = check(merge(base(), {"spec": patch}))
        return run, errors(problems)

    return build
