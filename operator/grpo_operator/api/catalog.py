"""The names of the catalogues a spec may pick from: model profiles and instance types.

Only the names live here, so the spec's enums (and the CRD's) need nothing from planning; what each name
means (its architecture, its GPUs and memory) is planning's (`planning.profiles`, `planning.instances`).
"""

from __future__ import annotations

from enum import StrEnum


class InstanceTypeName(StrEnum):
    """Names accepted in `spec.topology.instanceType`."""

    P5 = "p5.48xlarge"
    P5EN = "p5en.48xlarge"
    P6_B200 = "p6-b200.48xlarge"
    P6_B300 = "p6-b300.48xlarge"


class ModelProfileName(StrEnum):
    """Names accepted in `spec.model.profile`."""

    QWEN3_0_6B = "qwen3-0.6b"
    QWEN3_4B = "qwen3-4b"
    QWEN3_8B = "qwen3-8b"
    QWEN3_30B_A3B = "qwen3-30b-a3b"
    GLM_Z1_9B = "glm-z1-9b"
    QWEN25_72B = "qwen2.5-72b"
