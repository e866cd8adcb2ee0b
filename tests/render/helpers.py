"""Build runs for render tests from the examples, with patches."""

from __future__ import annotations

from typing import Any

import yaml
from grpo_operator.api import GRPORun
from grpo_operator.cli.loading import parse_run
from grpo_operator.planning.plan import make_plan
from grpo_operator.planning.validation import errors, validate
from grpo_operator.render import Rendered, RenderSettings, render

from tests.api.cases import EXAMPLES, merge

SETTINGS = RenderSettings(reward_image="registry.example/grpo-reward@sha256:" + "0" * 64)


def example(name: str, patch: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    doc = merge(doc, {"spec": patch or {}})
    doc["metadata"].update(meta)
    return doc


def run_of(doc: dict[str, Any]) -> GRPORun:
    run, problems = parse_run(doc)
    assert run is not None, [str(p) for p in problems]
    assert not errors(validate(run)), [str(p) for p in validate(run)]
    return run


def rendered(doc: dict[str, Any]) -> Rendered:
    run = run_of(doc)
    return render(run, make_plan(run), SETTINGS)


def kind(result: Rendered, wanted: str) -> dict[str, Any]:
    return next(c for c in result.children if c["kind"] == wanted)


def pod_specs(result: Rendered) -> list[dict[str, Any]]:
    specs = []
    for child in result.children:
        spec = child.get("spec", {})
        if "template" in spec:
            specs.append(spec["template"]["spec"])
        if "headGroupSpec" in spec:
            specs.append(spec["headGroupSpec"]["template"]["spec"])
            specs += [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    return specs
