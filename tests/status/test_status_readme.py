"""The status tables say exactly which phases, conditions and reasons the operator writes, in both places a user
reads them: the README's "What status says" (the short tables) and docs/reference/status.md (each reason in full).
A reason added to or dropped from `grpo_operator.api.status` without the docs (or the other way) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grpo_operator.api.status import CONDITION_REASONS, PHASE_REASONS, ConditionType, Phase

REPO = Path(__file__).resolve().parents[2]
# (doc, the sections holding its phase and condition tables)
DOCS = [("README.md", ("What status says",)), ("docs/reference/status.md", ("Phases and their reasons", "Conditions"))]


def _tables(doc: str, headings: tuple[str, ...]) -> dict[str, dict[str, set[str]]]:
    """First column -> the backticked words of the second column, per table of the sections."""
    text = (REPO / doc).read_text()
    sections = [text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0] for heading in headings]
    tables: dict[str, dict[str, set[str]]] = {}
    for line in "\n".join(sections).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 3 or cells[0] in ("phase", "condition") or set(cells[0]) <= {"-"}:
            continue
        kind = "phase" if cells[0].strip("`") in {p.value for p in Phase} else "condition"
        tables.setdefault(kind, {})[cells[0].strip("`")] = set(re.findall(r"`([A-Za-z]+)`", cells[1]))
    return tables


@pytest.mark.parametrize(("doc", "headings"), DOCS, ids=[d for d, _ in DOCS])
def test_the_phase_table_lists_every_phase_and_exactly_its_reasons(doc: str, headings: tuple[str, ...]) -> None:
    documented = _tables(doc, headings)["phase"]
    assert documented == {phase.value: set(reasons) for phase, reasons in PHASE_REASONS.items()}
    assert set(documented) == {p.value for p in Phase}


@pytest.mark.parametrize(("doc", "headings"), DOCS, ids=[d for d, _ in DOCS])
def test_the_condition_table_lists_every_condition_and_exactly_its_reasons(doc: str, headings: tuple[str, ...]) -> None:
    documented = _tables(doc, headings)["condition"]
    assert documented == {kind.value: set(reasons) for kind, reasons in CONDITION_REASONS.items()}
    assert list(documented) == [c.value for c in ConditionType]
