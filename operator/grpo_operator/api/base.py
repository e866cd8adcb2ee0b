"""The one base model of the GRPORun API: camelCase on the wire, snake_case in Python, strict types.

Strict mode means a string is never silently read as a number or a boolean (`"8"`, `"true"`, `"two"`), the
class of defect where a shell recipe accepted `ACTOR_NUM_NODES=two`. Documents are validated in JSON mode
(see `grpo_operator.cli.loading`), so enum values arrive as plain strings and are still accepted.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


def wire_name(field: str) -> str:
    """camelCase with the unit spelt right: `actor_gib_per_gpu` -> `actorGiBPerGpu` (GiB, gibibytes; "Gib"
    would be gibibits), `write_gbps` -> `writeGBps` (gigabytes a second; "Gbps" would be gigabits)."""
    return re.sub(r"Gbps(?=[A-Z]|$)", "GBps", re.sub(r"Gib(?=[A-Z]|$)", "GiB", to_camel(field)))


class ApiModel(BaseModel):
    """Base of every GRPORun type: unknown fields are errors, names are camelCase on the wire."""

    model_config = ConfigDict(
        alias_generator=wire_name,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        use_enum_values=False,
        validate_default=True,
    )
