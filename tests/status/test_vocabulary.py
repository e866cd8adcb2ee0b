"""Phases, reasons and condition types are the `StrEnum`s of `api/status.py`: a bare string of one of them
anywhere else in the operator is a reason a typo could fork, so this scan fails on it."""

from __future__ import annotations

import ast
from pathlib import Path

import grpo_operator
from grpo_operator.api.status import CONDITION_REASONS, PHASE_REASONS, ConditionType, MetricsSource, Phase, Reason

PACKAGE = Path(grpo_operator.__file__).parent
HOME = PACKAGE / "api" / "status.py"
VOCABULARY = {*Reason, *ConditionType, *Phase, *MetricsSource}
# The same words in another system's vocabulary, (file, word): a Kubernetes pod's phase, the Ready condition
# of Kubernetes nodes and pods that grpo doctor reads, and the reasons of a Kueue Workload's Evicted condition.
FOREIGN: set[tuple[str, str]] = {
    ("edges/childstate.py", "Succeeded"),
    ("edges/childstate.py", "Failed"),
    ("cli/doctorchecks/model.py", "Ready"),
    ("edges/childstate.py", "Evicted"),
    ("status/admission.py", "Preempted"),
    ("status/admission.py", "PodsReadyTimeout"),
    ("status/admission.py", "Deactivated"),
}


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_phase_reason_or_condition_literal_outside_api_status() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        where = str(path.relative_to(PACKAGE))
        found += [
            f"{where}:{line}: {value!r}"
            for line, value in _literals(path)
            if value in VOCABULARY and (where, value) not in FOREIGN
        ]
    assert not found, "use Phase, Reason or ConditionType from grpo_operator.api.status:\n" + "\n".join(found)


def test_every_reason_belongs_to_a_phase_a_condition_or_an_event() -> None:
    used = {r for rs in PHASE_REASONS.values() for r in rs} | {r for rs in CONDITION_REASONS.values() for r in rs}
    events = {
        Reason.LOGS_KEPT,
        Reason.ATTEMPT_ENDED,
        Reason.ROLLOUTS_LOST,
        Reason.RESTARTED,
        Reason.EVIDENCE_CAPTURED,
        Reason.SAVED_BEFORE_STOP,
        Reason.NOT_SAVED_BEFORE_STOP,
        Reason.CAPTURE_SKIPPED,
        Reason.CAPTURE_FAILED,
        Reason.EVAL_NOT_SCORED,
    }
    triggers = {Reason.CAPTURE_REQUESTED}  # an evidence bundle's trigger (status.forensics)
    assert set(Reason) - used == events | triggers
    assert set(CONDITION_REASONS) == set(ConditionType) and set(PHASE_REASONS) == set(Phase)
