"""README's "Run status" tables say exactly which phases, conditions and reasons the operator writes: a reason
added to or dropped from `grpo_operator.api.status` without the README (or the other way) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_operator.api.status import CONDITION_REASONS, PHASE_REASONS, ConditionType, Phase

README = Path(__file__).resolve().parents[2] / "README.md"


def _tables() -> dict[str, dict[str, set[str]]]:
    """First column -> the backticked words of the second column, per table of the Run status section."""
    text = README.read_text()
    section = text.split("\n## Run status\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, set[str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 3 or cells[0] in ("phase", "condition") or set(cells[0]) <= {"-"}:
            continue
        kind = "phase" if cells[0].strip("`") in {p.value for p in Phase} else "condition"
        tables.setdefault(kind, {})[cells[0].strip("`")] = set(re.findall(r"`([A-Za-z]+)`", cells[1]))
    return tables


def test_the_readme_phase_table_lists_every_phase_and_exactly_its_reasons() -> None:
    documented = _tables()["phase"]
    assert documented == {phase.value: set(reasons) for phase, reasons in PHASE_REASONS.items()}
    assert set(documented) == {p.value for p in Phase}


def test_the_readme_condition_table_lists_every_condition_and_exactly_its_reasons() -> None:
    documented = _tables()["condition"]
    assert documented == {kind.value: set(reasons) for kind, reasons in CONDITION_REASONS.items()}
    assert list(documented) == [c.value for c in ConditionType]
