"""The GRPORun API (group grpo.dev, version v1alpha1): spec, status and the resource envelope."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from grpo_operator.api.base import ApiModel
from grpo_operator.api.spec import DnsLabel, GRPORunSpec
from grpo_operator.api.status import GRPORunStatus, Phase, RunPlan

GROUP = "grpo.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GRPORun"
PLURAL = "grporuns"
SINGULAR = "grporun"
SHORT_NAMES = ["grpo"]
CATEGORIES = ["ml", "rl"]
MAX_NAME_LENGTH = 40  # child names append suffixes (KubeRay adds up to ~20 characters to pod names)


class ObjectMeta(ApiModel):
    """The part of metadata the operator reads; everything else is accepted and ignored."""

    model_config = ApiModel.model_config | {"extra": "ignore"}
    name: Annotated[str, StringConstraints(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=MAX_NAME_LENGTH)] = (
        Field(description="Run name: a DNS-1035 label of at most 40 characters.")
    )
    # The API server only stores a run in a namespace that exists, and a namespace's name is a DNS label.
    namespace: DnsLabel = "default"
    uid: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None


class GRPORun(ApiModel):
    api_version: Literal["grpo.dev/v1alpha1"] = Field(description="grpo.dev/v1alpha1")
    kind: Literal["GRPORun"] = Field(description="GRPORun")
    metadata: ObjectMeta
    spec: GRPORunSpec
    status: GRPORunStatus | None = None


__all__ = [
    "API_VERSION",
    "CATEGORIES",
    "GROUP",
    "KIND",
    "MAX_NAME_LENGTH",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "GRPORun",
    "GRPORunSpec",
    "GRPORunStatus",
    "ObjectMeta",
    "Phase",
    "RunPlan",
]
