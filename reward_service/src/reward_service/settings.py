"""Configuration of the reward service, read from `REWARD_*` environment variables.

This module owns every setting, its default, its allowed values, and the one-line messages that a bad
value produces at start-up. `load_settings` is the only entry point: it returns a validated
`RewardSettings` or raises `SettingsError`, whose message names each bad variable, its value, the rule it
broke and how to fix it, without a traceback.
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "REWARD_"
REWARD_MODEL_PACKAGES = ("torch", "transformers")
DEFAULT_DEADLINE_S = {"math_verify": 2.0, "reward_model": 30.0}


class Backend(enum.StrEnum):
    """How a response is turned into a reward."""

    MATH_VERIFY = "math_verify"
    REWARD_MODEL = "reward_model"


class Extraction(enum.StrEnum):
    """Which part of the response is the final answer (math_verify backend)."""

    BOXED = "boxed"  # the content of the last \\boxed{...} (or \\fbox{...})
    ANSWER_LINE = "answer_line"  # the text after the last line starting with "Answer:"
    BOXED_OR_ANSWER_LINE = "boxed_or_answer_line"  # whichever of the two comes last


class TimeoutPolicy(enum.StrEnum):
    """What a response whose scoring overran its deadline gets."""

    ZERO = "zero"  # reward 0.0: the response itself is too expensive to verify
    UNAVAILABLE = "unavailable"  # HTTP 503, so the caller sees no reward at all


class LogLevel(enum.StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """CPUs allowed by the container's CFS quota (cgroup v2 `cpu.max`, or v1), rounded up; None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota == "max":
            return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 and period_us > 0 else None


def _default_workers() -> int:
    """One worker per CPU the process may use: its affinity, lowered to the container's CPU limit."""
    cpus = len(os.sched_getaffinity(0))
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, limit) if limit else cpus)


class RewardSettings(BaseSettings):
    """Every knob of the service; environment variable = `REWARD_` + the field name in capitals."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    backend: Backend = Backend.MATH_VERIFY
    extraction: Extraction = Extraction.BOXED_OR_ANSWER_LINE
    workers: int = Field(default_factory=_default_workers, ge=1, le=256)
    deadline_s: float | None = Field(default=None, gt=0, le=3600)
    soft_deadline_s: float | None = Field(default=None, ge=0, le=3600)
    on_timeout: TimeoutPolicy = TimeoutPolicy.ZERO
    max_queue: int = Field(default=2048, ge=1, le=100_000)
    retry_after_s: int = Field(default=1, ge=1, le=3600)
    ready_window_s: float = Field(default=60.0, gt=0, le=86_400)
    ready_min_requests: int = Field(default=20, ge=1, le=10_000)
    ready_max_error_ratio: float = Field(default=0.1, gt=0, le=1)
    inline_max_chars: int = Field(default=16384, ge=0, le=65_536)  # 0: every item goes to a worker
    cache_mib: int = Field(default=64, ge=0, le=4096)  # per worker, parses and verdicts together
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)  # larger: 413
    model_name: str = Field(
        default="OpenAssistant/reward-model-deberta-v3-large-v2",
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9._/-]+$",
    )
    max_length: int = Field(default=2048, ge=8, le=131_072)
    torch_threads: int = Field(default=1, ge=1, le=256)
    log_level: LogLevel = LogLevel.INFO
    access_log: bool = False

    @model_validator(mode="after")
    def _deadlines_are_consistent(self) -> RewardSettings:
        deadline = self.hard_deadline_s
        if self.soft_deadline_s is not None and self.soft_deadline_s >= deadline:
            raise ValueError(
                f"REWARD_SOFT_DEADLINE_S={self.soft_deadline_s:g} must be smaller than the hard deadline "
                f"REWARD_DEADLINE_S={deadline:g}: lower it, or set it to 0 to let the hard deadline alone act"
            )
        return self

    @property
    def hard_deadline_s(self) -> float:
        """Wall-clock seconds an item may run in a worker before the worker is killed and replaced."""
        if self.deadline_s is not None:
            return self.deadline_s
        return DEFAULT_DEADLINE_S[self.backend.value]

    @property
    def worker_budget_s(self) -> float:
        """Seconds after which a worker gives up on an item by itself (0: never; the hard deadline acts)."""
        if self.soft_deadline_s is not None:
            return self.soft_deadline_s
        return round(0.5 * self.hard_deadline_s, 3)

    def public_summary(self) -> dict[str, Any]:
        """The effective settings, for the start-up log line and `GET /`."""
        summary = self.model_dump(mode="json")
        summary["deadline_s"] = self.hard_deadline_s
        summary["soft_deadline_s"] = self.worker_budget_s
        return summary


class SettingsError(Exception):
    """A setting is invalid; `str(error)` is the message for the user, one line per problem."""


def _env_value(environ: Mapping[str, str], field: str) -> str | None:
    wanted = (ENV_PREFIX + field).upper()
    for name, value in environ.items():
        if name.upper() == wanted:
            return value
    return None


def _describe(error: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    loc = error.get("loc") or ()
    message = str(error.get("msg", "invalid value"))
    if not loc:  # a rule across fields: its message names the variables itself
        return message.removeprefix("Value error, ")
    field = str(loc[0])
    variable = (ENV_PREFIX + field).upper()
    value = _env_value(environ, field)
    default = RewardSettings.model_fields[field].default
    fix = "unset it to use the default" if default is not None else "unset it"
    if isinstance(default, enum.Enum):
        fix = f"unset it for the default {default.value!r}"
    shown = value if value is None or len(value) <= 60 else value[:60] + "..."
    return f"{variable}={shown!r} is invalid: {message}; {fix}"


def load_settings() -> RewardSettings:
    """Read and validate the settings from the process environment."""
    try:
        settings = RewardSettings()
    except ValidationError as error:
        lines = [_describe(e, os.environ) for e in error.errors(include_url=False)]
        raise SettingsError("\n".join(lines)) from None
    check_backend_available(settings)
    return settings


def missing_reward_model_packages() -> list[str]:
    return [name for name in REWARD_MODEL_PACKAGES if find_spec(name) is None]


def check_backend_available(settings: RewardSettings) -> None:
    """Fail at start, not at the first request, when the chosen backend cannot run here."""
    if settings.backend is Backend.REWARD_MODEL:
        missing = missing_reward_model_packages()
        if missing:
            raise SettingsError(
                "REWARD_BACKEND='reward_model' needs the optional packages "
                f"{', '.join(REWARD_MODEL_PACKAGES)} (missing here: {', '.join(missing)}); install them with "
                "pip install 'grpo-reward-service[reward-model]', or set REWARD_BACKEND=math_verify"
            )


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """`REWARD_*` variables that are not settings (a typo, or a Kubernetes service link variable)."""
    known = {(ENV_PREFIX + name).upper() for name in RewardSettings.model_fields}
    return sorted(name for name in environ if name.upper().startswith(ENV_PREFIX) and name.upper() not in known)
