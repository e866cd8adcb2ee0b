"""`grpo results RUN`: what a run produced, read from its GRPORun on the API server: the eval scores per set
(baseline, best, last, the history), the last Megatron checkpoint and the Hugging Face export. Text for people,
`--json` for scripts (the status's own `evaluation` and `outputs`, camelCase as stored). The reading is pure
(`results_text`, `results_json`); the one GET goes through `clusterread`.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from pydantic import ValidationError

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.status import EvalSetStatus, GRPORunStatus, RunOutputs
from grpo_operator.cli.clusterread import Reader, ReadError, connect


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _at(value: float | None, rollout: int | None) -> str:
    return "-" if value is None else f"{_num(value)} @{rollout}"


def _eval_lines(sets: list[EvalSetStatus]) -> list[str]:
    if not sets:
        return ["evaluation: none reported (the run has no spec.eval, or miles has not evaluated yet)"]
    header = ("eval set", "baseline", "best", "last", "truncated", "none-reward")
    rows = [
        (
            e.name,
            _at(e.baseline, e.baseline_rollout),
            _at(e.best, e.best_rollout),
            _at(e.last, e.last_rollout),
            _num(e.truncated_ratio),
            _num(e.none_reward_ratio),
        )
        for e in sets
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    for e in sets:
        points = ", ".join(f"{p.rollout}:{_num(p.score)}" for p in e.history)
        lines.append(f"history {e.name} (rollout:score): {points or '-'}")
        if e.not_scored_rollout is not None:
            lines.append(f"  not scored: rollout {e.not_scored_rollout} (mostly None rewards)")
    return lines


def _output_lines(outputs: RunOutputs | None) -> list[str]:
    if outputs is None or outputs.checkpoint_iteration is None:
        checkpoint = "none reported yet (the launcher reports it when the job ends)"
    else:
        checkpoint = f"iteration {outputs.checkpoint_iteration} in {outputs.checkpoint_path}"
    lines = [f"megatron checkpoint: {checkpoint}"]
    if outputs is not None and outputs.huggingface_path is not None:
        verified = "verified" if outputs.huggingface_verified else "NOT complete"
        lines.append(f"hugging face export: {outputs.huggingface_path} ({verified})")
    return lines


def results_text(name: str, status: GRPORunStatus) -> str:
    head = f"{name}: {status.phase.value if status.phase else 'no status yet'}"
    head += f"/{status.reason}" if status.reason else ""
    head += f", {status.progress} rollouts" if status.progress else ""
    return "\n".join([head, *_eval_lines(status.evaluation or []), *_output_lines(status.outputs)])


def results_json(name: str, namespace: str, status: GRPORunStatus) -> dict[str, Any]:
    dumped = status.model_dump(
        mode="json", by_alias=True, exclude_none=True, include={"phase", "reason", "evaluation", "outputs"}
    )
    return {"name": name, "namespace": namespace, **dumped}


def run_results(
    name: str, namespace: str | None, kubeconfig: str | None, context: str | None, *, as_json: bool, out: TextIO
) -> tuple[int, str]:
    """Exit status and, when not 0, the one line saying why."""
    try:
        api, default_namespace = connect(kubeconfig, context)
        namespace = namespace or default_namespace
        reader = Reader(api)
        found = reader.get(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}", PLURAL)
    except ReadError as exc:
        return 1, str(exc)
    if found is None:
        why = "may not be read (forbidden)" if PLURAL in reader.cluster.unreadable else "does not exist"
        return 1, f"GRPORun {name} in namespace {namespace} {why}; list them with kubectl get grporuns -n {namespace}"
    try:
        status = GRPORunStatus.model_validate_json(json.dumps(found.get("status") or {}))
    except ValidationError as exc:
        return (
            1,
            f"GRPORun {name}: its status does not read as this grpo's ({exc.error_count()} problem(s)); is it newer?",
        )
    if as_json:
        print(json.dumps(results_json(name, namespace, status), indent=2), file=out)
    else:
        print(results_text(name, status), file=out)
    return 0, ""
