"""The actor memory estimator agrees with what megatron-core 0.19.2 allocated on an H200.

The measurements are `benchmarks/memory/measurements.json`, made by `benchmarks/memory/measure_actor.py`
(docs/BENCHMARKS.md says how and on what). Every measured component must be within 5% of the estimate and
every measured peak within 10%. The calibration figures `grpo plan` prints (planning/calibration.py) must be
the errors this file computes, so the plan never claims a better fit than the data shows.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from grpo_operator.planning.calibration import CALIBRATIONS, calibration_of
from grpo_operator.planning.memory import GIB, Sharding, actor_estimate
from grpo_operator.planning.profiles import PROFILES, ModelProfile, ModelProfileName

from tests.support.builders import REPO
from tests.support.cli import grpo

DATA = json.loads((REPO / "benchmarks/memory/measurements.json").read_text())
CASES = [c for c in DATA["cases"] if "error" not in c and not c["env"]]  # the allocator variant is not a shape
ONE_GPU = Sharding(gpus=1)


def cut(case: dict[str, Any]) -> ModelProfile:
    return dataclasses.replace(PROFILES[ModelProfileName(case["profile"])], num_layers=case["layers"])


def measured_components(case: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(component, estimate, measured) in bytes, for every term the case measured."""
    profile = cut(case)
    est = actor_estimate(profile, ONE_GPU, 8192)
    step = case["optimizer_step"]
    rows = [
        ("weights", est.weights_gib * GIB, case["weights_bytes"]),
        ("grads", est.grads_gib * GIB, case["grad_buffer_bytes"]),
        ("optimizer", est.optimizer_gib * GIB, case["optimizer_init_bytes"] + step["after"] - step["before"]),
        ("stepTransient", est.step_transient_gib * GIB, step["peak"] - step["after"]),
    ]
    # The first micro-batch of a case also allocates cuBLAS's workspaces (2 x 32 MiB), which persist: it is
    # the harness's warm-up and is not compared.
    for run in case["runs"][1:]:
        acts = actor_estimate(profile, ONE_GPU, run["tokens"], run["temperature"]).activations
        rows.append(("logits", acts.logits, run["logits_phase_peak"] - run["after_trunk_forward"]))
        if acts.checkpoints + acts.layer_working_set > acts.embedding_grad:
            rows.append(
                ("layerWorkingSet", acts.layer_working_set, run["trunk_backward_peak"] - run["trunk_backward_start"])
            )
        if profile.moe is None:
            # Phases from the step's start: not for MoE, whose dispatcher frees the previous step's routing
            # state during the forward (75-150 MB kept between steps), offsetting every later reading.
            rows.append(("checkpoints", acts.checkpoints, run["after_trunk_forward"] - run["before_forward"]))
            rows.append(("logitsPhase", acts.logits_phase, run["logits_phase_peak"] - run["before_forward"]))
            rows.append(("trunkBackward", acts.trunk_backward, run["trunk_backward_peak"] - run["before_forward"]))
    return rows


def measured_total(case: dict[str, Any]) -> tuple[float, float]:
    final = case["final"]
    est = actor_estimate(cut(case), ONE_GPU, final["tokens"], final["temperature"])
    peak = max(final["logits_phase_peak"], final["trunk_backward_peak"], final["step_peak_allocated"])
    return est.allocated_gib * GIB, peak


def worst_errors(profile: str) -> dict[str, float]:
    """Largest relative error per component over the measurements of one profile, percent."""
    out: dict[str, float] = {}
    for case in (c for c in CASES if c["profile"] == profile):
        for name, est, got in measured_components(case):
            out[name] = max(out.get(name, 0.0), abs(est / got - 1) * 100)
        est, got = measured_total(case)
        out["total"] = max(out.get("total", 0.0), abs(est / got - 1) * 100)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_measured_model_has_the_parameters_the_profile_computes(case: dict[str, Any]) -> None:
    assert case["params"] == cut(case).total_params
    assert case["expert_params"] == cut(case).expert_params


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_every_measured_component_is_within_5_percent_of_the_estimate(case: dict[str, Any]) -> None:
    off = [
        f"{name}: estimate {est / GIB:.3f} GiB, measured {got / GIB:.3f} GiB ({(est / got - 1) * 100:+.1f}%)"
        for name, est, got in measured_components(case)
        if abs(est / got - 1) > 0.05
    ]
    assert not off, "\n".join(off)


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_measured_peak_of_a_whole_step_is_within_10_percent_of_the_estimate(case: dict[str, Any]) -> None:
    est, got = measured_total(case)
    assert est == pytest.approx(got, rel=0.10), f"estimate {est / GIB:.2f} GiB, measured {got / GIB:.2f} GiB"


def test_the_measurements_were_made_with_the_stack_the_plan_describes() -> None:
    for case in CASES:
        assert case["versions"]["megatron_core"] == "0.19.2"
        assert case["grad_dtype"] == "torch.float32"  # fp32 grad buffers, as Megatron sets for --bf16
        assert case["attention"].startswith("flash")
        assert case["device"] == "NVIDIA H200"
    assert "measure_actor.py" in DATA["command"]


@pytest.mark.parametrize("profile", sorted({c["profile"] for c in CASES}))
def test_the_calibration_grpo_plan_prints_is_what_the_measurements_show(profile: str) -> None:
    calibration = CALIBRATIONS[ModelProfileName(profile)]
    shown = calibration.error_percent
    computed = worst_errors(profile)
    assert set(shown) == set(computed)
    for name, value in computed.items():
        assert shown[name] == pytest.approx(value, abs=0.05), name


def test_a_profile_without_measurements_is_not_calibrated() -> None:
    measured = {ModelProfileName(c["profile"]) for c in CASES}
    for name in ModelProfileName:
        assert (calibration_of(name) is not None) == (name in measured)


def plan_text(example: str) -> str:
    return grpo("plan", "-f", str(REPO / "examples" / example)).stdout


def test_grpo_plan_prints_each_component_with_its_measured_error_and_the_calibration() -> None:
    text = plan_text("quickstart.yaml")
    assert "measured (the whole model, 36 layers; megatron-core 0.19.2" in text
    for line in ("grads (fp32)", "optimizer (fp32, / DP)", "logits (fp32 log-probs)", "allocator margin"):
        assert line in text
    grads = next(ln for ln in text.splitlines() if "grads (fp32)" in ln)
    assert "15.0 GiB" in grads and "measured within 0.0%" in grads


def test_grpo_plan_says_not_calibrated_for_a_profile_without_measurements() -> None:
    text = plan_text("glm-z1-9b-tp2.yaml")
    assert "not calibrated: no measurements of glm-z1-9b" in text
    total = next(ln for ln in text.splitlines() if ln.strip().startswith("total"))
    assert total.rstrip().endswith("not calibrated")
