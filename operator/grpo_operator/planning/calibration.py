"""What the actor memory estimate rests on: which profiles were measured, how, and how close the estimate came.

The measurements are `benchmarks/memory/measurements.json` (megatron-core 0.19.2 on one H200; the harness
is `benchmarks/memory/measure_actor.py`). `error_percent` is the largest relative error of the estimator
against them, per component, for that profile; `tests/planning/test_memory_calibration.py` recomputes every
figure from the data and fails if one here differs, so `grpo plan` cannot claim a better fit than measured.
A profile without measurements has no entry: its plan says "not calibrated". Pure data, no I/O.

The figures here are the unsharded ones. The division by TP, EP, PP and DP is measured separately, one
rank's shard with a fake process group (`benchmarks/memory/measurements-sharded.json`, held by
`tests/planning/test_memory_sharded.py`); CP is not measured. Not covered anywhere: NCCL's own buffers, and
the SGLang side (calibrated on observed runs only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_operator.api.catalog import ModelProfileName

SOURCE = "benchmarks/memory/measurements.json"
STACK = "megatron-core 0.19.2, torch 2.11.0+cu130, 1x NVIDIA H200, 2026-12-01"


@dataclass(frozen=True)
class Calibration:
    shape: str  # what was built: the whole model or a cut
    error_percent: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        return f"measured ({self.shape}; {STACK}; {SOURCE})"


CALIBRATIONS: dict[ModelProfileName, Calibration] = {
    ModelProfileName.QWEN3_4B: Calibration(
        "the whole model, 36 layers",
        {
            "weights": 0.7,
            "grads": 0.0,
            "optimizer": 0.08,
            "stepTransient": 0.01,
            "logits": 0.84,
            "layerWorkingSet": 0.1,
            "checkpoints": 0.26,
            "logitsPhase": 0.78,
            "trunkBackward": 0.15,
            "total": 0.13,
        },
    ),
    ModelProfileName.QWEN3_8B: Calibration(
        "cut to 4 of 36 layers",
        {
            "weights": 0.05,
            "grads": 0.0,
            "optimizer": 0.0,
            "stepTransient": 0.01,
            "logits": 0.0,
            "checkpoints": 1.04,
            "logitsPhase": 0.03,
            "trunkBackward": 0.2,
            "layerWorkingSet": 0.03,
            "total": 0.16,
        },
    ),
    ModelProfileName.QWEN3_30B_A3B: Calibration(
        "cut to 4 of 48 layers, experts as SequentialMLP",
        {
            "weights": 0.02,
            "grads": 0.0,
            "optimizer": 0.01,
            "stepTransient": 0.0,
            "logits": 0.0,
            "layerWorkingSet": 2.83,
            "total": 0.16,
        },
    ),
    ModelProfileName.QWEN25_72B: Calibration(
        "cut to 2 of 80 layers",
        {
            "weights": 0.0,
            "grads": 0.0,
            "optimizer": 0.0,
            "stepTransient": 0.0,
            "logits": 0.84,
            "checkpoints": 0.78,
            "logitsPhase": 0.83,
            "trunkBackward": 0.11,
            "layerWorkingSet": 0.03,
            "total": 0.09,
        },
    ),
}


def calibration_of(profile: ModelProfileName) -> Calibration | None:
    return CALIBRATIONS.get(profile)


def describe(profile: ModelProfileName) -> str:
    """One line for `grpo plan` and `status.plan.calibration`."""
    calibration = calibration_of(profile)
    if calibration is None:
        return (
            f"not calibrated: no measurements of {profile.value}; the terms fitted to the measured profiles "
            f"are extrapolated ({SOURCE})"
        )
    return calibration.describe()
