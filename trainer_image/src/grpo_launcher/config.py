"""The run config the operator renders for the launcher, parsed into typed models.

The operator writes ``/etc/grpo/run-config.json`` (ConfigMap key ``run-config.json``). The launcher relies on
``preflight``, ``argv`` and ``env``; ``run``, ``spec`` and ``plan`` are carried for provenance and logs, and
unknown keys there are tolerated because they evolve with the operator. A malformed file is reported as a
``ConfigError`` whose message names the field, the value, the rule and the fix, never as a traceback.
Types are strict, as the operator renders them: ``"gpus": "8"`` or ``true`` is refused, not read as 8 or 1.
A file that is not UTF-8, larger than a ConfigMap can hold, or nested deeper than Python's JSON decoder
goes is one line naming what and where. Values quoted back are JSON, cut to ``ECHO_CHARS``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

DEFAULT_CONFIG_PATH = Path("/etc/grpo/run-config.json")
DEFAULT_METRICS_PORT = 9465
MAX_CONFIG_BYTES = 1024 * 1024  # ConfigMap data is at most 1 MiB (Kubernetes' ValidateConfigMap uses MaxSecretSize)
ECHO_CHARS = 80


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """`value` as a message quotes it: as JSON (control characters escaped), cut to about `limit`."""
    if isinstance(value, str):
        value = value[: limit + 1]
    text = json.dumps(value, default=str) if _small(value) else f"<a {type(value).__name__} of {len(value)} items>"  # type: ignore[arg-type]
    return text if len(text) <= limit + 2 else text[:limit] + "..."


def _small(value: object) -> bool:
    """Cheap to serialise for a message: scalars, and containers of a few items."""
    if isinstance(value, list | dict):
        return len(value) <= 16 and all(
            isinstance(v, str | int | float | bool) or v is None
            for v in (value.values() if isinstance(value, dict) else value)
        )
    return True


class ConfigError(Exception):
    """A run config that cannot be used; the message is meant for a user, not a developer."""


class _Strict(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True, allow_inf_nan=False
    )


class _Open(BaseModel):
    """camelCase on the wire, unknown keys kept (these sections evolve with the operator)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True, strict=True)


class RunRef(_Open):
    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)
    uid: str = ""


class Plan(_Open):
    worker_replicas: int | None = None
    gpus_per_node: int | None = None
    total_gpus: int | None = None
    efa_per_node: int | None = None
    fits: bool | None = None


# The fabrics the preflight has a check for (host_checks.FABRIC_CHECKS); the operator's api.runtime.FabricType.
FabricType = Literal["efa", "infiniband", "roce", "none"]


class FabricSpec(_Strict):
    """The fabric between nodes: its type picks the preflight's check (host_checks.FABRIC_CHECKS)."""

    type: FabricType = Field(description="efa, infiniband, roce or none")
    devices: int = Field(ge=0, description="devices of the fabric the pod must see; 0: none expected (one node)")


class PreflightSpec(_Strict):
    """What the preflight checks on the pod the launcher runs in."""

    gpus: int = Field(ge=0, description="GPUs this pod must see")
    min_free_gpu_memory_gib: float = Field(
        ge=0, alias="minFreeGpuMemoryGiB", description="free memory each GPU must have, GiB"
    )
    shm_min_gib: float = Field(ge=0, alias="shmMinGiB", description="minimum size of /dev/shm, GiB")
    fabric: FabricSpec = Field(description="the node type's fabric: which device check runs, against how many")
    gdrcopy: bool = Field(description="whether /dev/gdrdrv must be present")
    checkpoint_dir: str = Field(min_length=1, description="directory miles saves checkpoints into")
    checkpoint_gib: float = Field(ge=0, alias="checkpointGiB", description="size of one checkpoint, GiB")
    shared_mount: str | None = Field(
        default=None, min_length=1, description="where the shared volume is mounted; checkpoints must be under it"
    )
    min_bus_bandwidth_gbps: float = Field(
        default=0.0, ge=0, alias="minBusBandwidthGBps", description="all-reduce floor; 0 reports only"
    )
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535, description="0 disables it")

    @model_validator(mode="before")
    @classmethod
    def _fabric_of_an_older_operator(cls, data: Any) -> Any:
        # Until one release after preflight.fabric became {type, devices}: an older operator wrote the type as a
        # string beside efaDevices and infinibandDevices (or efaDevices alone, which meant EFA).
        if not isinstance(data, dict) or isinstance(data.get("fabric"), dict):
            return data
        old = {k: v for k, v in data.items() if k not in ("fabric", "efaDevices", "infinibandDevices")}
        kind = data.get("fabric", "efa")
        devices = data.get("infinibandDevices", 0) if kind == "infiniband" else data.get("efaDevices", 0)
        return {**old, "fabric": {"type": kind, "devices": devices if kind != "none" else 0}}


# What a process environment can hold (execve's `NAME=value` strings): no '=' in a name, no NUL anywhere. The
# operator renders only names of the API server's grammar, so anything else is a corrupted or hand-edited file.
def _env_name(name: str) -> str:
    if not name or "=" in name or "\x00" in name:
        raise PydanticCustomError(
            "env_name", "an environment variable name must be non-empty, without '=' or NUL (execve splits at '=')"
        )
    return name


def _env_value(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("env_value", "an environment variable value may not hold NUL (execve ends it there)")
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, AfterValidator(_env_value)]


class RunConfig(_Strict):
    api_version: Literal["grpo.dev/v1alpha1"]
    kind: Literal["RunConfig"]
    run: RunRef
    spec: dict[str, Any] = Field(default_factory=dict)
    plan: Plan = Field(default_factory=Plan)
    preflight: PreflightSpec
    argv: list[str] | None = Field(default=None, min_length=1)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)


_FIXES = {
    "missing": "add it (the operator renders it; re-render the run config)",
    "extra_forbidden": "remove it, or update the launcher image to one that knows it",
    "literal_error": "use the value the operator renders",
}


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        name = echo(str(part)).strip('"') if not str(part).isprintable() else str(part)[:ECHO_CHARS]
        out += f"[{part}]" if isinstance(part, int) else (f".{name}" if out else name)
    return out


def format_validation_error(source: str, error: ValidationError) -> str:
    """One line per problem: field, value, rule, fix."""
    lines = [f"run config {source} is invalid:"]
    for item in error.errors(include_url=False):
        where = _location(item["loc"]) or "(top level)"
        value = "absent" if item["type"] == "missing" else echo(item.get("input"))
        fix = _FIXES.get(item["type"], "correct the value and re-render the run config")
        lines.append(f"  {where}: {value}: {item['msg']}; fix: {fix}")
    return "\n".join(lines)


def parse_run_config(text: str, source: str = "<string>") -> RunConfig:
    """Parse the JSON text of a run config, raising ConfigError with a user-facing message."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"run config {source} is {len(text)} characters, more than a ConfigMap holds "
            f"({MAX_CONFIG_BYTES} bytes); fix: re-render it"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"run config {source} is not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}; "
            "fix: render it with json.dumps"
        ) from None
    except RecursionError:
        raise ConfigError(
            f"run config {source} is nested too deeply to read; no run config field is nested "
            "more than a few levels: fix: re-render it"
        ) from None
    except ValueError:  # an integer longer than Python converts (sys.get_int_max_str_digits)
        raise ConfigError(
            f"run config {source} holds a number of more than {sys.get_int_max_str_digits()} digits, larger than "
            "any field takes; fix: re-render it"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"run config {source}: top level is {type(data).__name__}, must be an object")
    try:
        return RunConfig.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(source, exc)) from None
    except RecursionError:
        raise ConfigError(f"run config {source} is nested too deeply to validate; fix: re-render it") from None


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"))
    return next((name for test, name in kinds if test(mode)), "special file")


def load_run_config(path: Path) -> RunConfig:
    """Read and parse the run config at ``path``."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever; it is refused below instead.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as handle:
            kind = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(kind):
                raise ConfigError(
                    f"run config {path} is not a regular file (a {_file_kind(kind)}); fix: mount the ConfigMap key "
                    f"run-config.json at {path.parent}"
                )
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(
            f"run config {path} does not exist; fix: mount the ConfigMap key run-config.json at {path.parent}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"run config {echo(str(path))} cannot be read: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"run config {path} is larger than a ConfigMap holds ({MAX_CONFIG_BYTES} bytes); fix: re-render it"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"run config {path} is not UTF-8 text (byte {exc.start + 1}); fix: re-render it as JSON"
        ) from None
    return parse_run_config(text, str(path))
