"""spec.extraArgs is checked against the flag table of the miles version the run uses.

miles v0.1.0 removed `--disable-weights-backuper` (miles exits 2 at it) and gave `--use-session-server` an
optional value (`miles/utils/arguments.py:2520-2523` at v0.1.0, `nargs="?"`); docs/integrations/miles.md,
"miles v0.1.0".
"""

from __future__ import annotations

import pytest
from grpo_operator.planning.flags import check_extra_args


@pytest.mark.parametrize(
    ("version", "extra", "refused"),
    [
        pytest.param("dec268f7", ["--disable-weights-backuper"], False, id="dec268f7-accepts-disable-weights-backuper"),
        pytest.param("v0.1.0", ["--disable-weights-backuper"], True, id="v0.1.0-refuses-disable-weights-backuper"),
        pytest.param("v0.1.0", ["--use-session-server", "v2"], False, id="v0.1.0-accepts-use-session-server-v2"),
        pytest.param("v0.1.0", ["--use-session-server"], False, id="v0.1.0-accepts-use-session-server-alone"),
        pytest.param("dec268f7", ["--use-session-server", "v2"], True, id="dec268f7-refuses-use-session-server-v2"),
    ],
)
def test_extra_args_are_checked_against_the_runs_miles_version(version: str, extra: list[str], refused: bool) -> None:
    problems = check_extra_args(extra, version)
    assert bool(problems) is refused, problems
    if refused and version == "v0.1.0":  # the message names the version's pins
        assert problems[0][0] == 0
        assert problems[0][1].startswith(f"{extra[0]} is not a flag of miles radixark/miles@78527b91 ")


def test_the_versions_a_runtime_may_declare_are_those_with_a_flag_table() -> None:
    from typing import get_args

    from grpo_operator.api.runtime import MilesVersion
    from grpo_operator.planning.miles_parser import DEFAULT_MILES_VERSION, MILES_VERSIONS

    assert list(get_args(MilesVersion)) == list(MILES_VERSIONS)
    assert next(iter(MILES_VERSIONS)) == DEFAULT_MILES_VERSION
