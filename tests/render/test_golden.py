"""`grpo render` output for every example is reviewed and checked in; any change shows up as a diff."""

from __future__ import annotations

import pytest

from tests.render.golden import GOLDEN, rendered
from tests.support.builders import valid_examples


@pytest.mark.parametrize("path", valid_examples(), ids=lambda p: p.stem)
def test_render_matches_the_golden_files_run_make_golden_after_a_deliberate_change(path) -> None:  # type: ignore[no-untyped-def]
    for name, text in rendered(path).items():
        golden = GOLDEN / name
        assert golden.exists(), f"{golden} is missing: run make golden"
        assert golden.read_text() == text, f"{golden} differs: review the change, then run make golden"


def test_every_valid_example_has_golden_files() -> None:
    names = {p.name for p in GOLDEN.iterdir()}
    assert names == {n for p in valid_examples() for n in (f"{p.stem}.yaml", f"{p.stem}.job.json")}
