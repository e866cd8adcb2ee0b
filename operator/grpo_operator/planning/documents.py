"""One decoded document (from YAML or from the API server) as a typed GRPORun, or the problems naming where it
is wrong: a wrong kind or apiVersion, an unknown field, a string where a number belongs, a bound broken.

Below both the CLI (`grpo validate`) and the controller (every reconcile), so both read a run the same way.
Values quoted back in messages go through `echo`: repr-escaped and cut to a few dozen characters.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from grpo_operator.api import API_VERSION, KIND, GRPORun
from grpo_operator.api.quote import echo
from grpo_operator.api.runtime import RUNTIME_KIND, GRPORuntime
from grpo_operator.planning.validation import Problem

_TYPE_FIXES = {
    "int_type": "write a whole number without quotes",
    "int_from_float": "write a whole number",
    "float_type": "write a number without quotes",
    "bool_type": "write true or false without quotes",
    "string_type": "write a string",
    "model_type": "write a mapping (key: value lines)",
    "dict_type": "write a mapping (key: value lines)",
    "list_type": "write a list (- item lines)",
    "missing": "add it",
}


def _model_at(loc: tuple[int | str, ...], root: type[BaseModel] = GRPORun) -> type[BaseModel] | None:
    """The model class that holds the last element of `loc` (to list the allowed fields)."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        match = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        model = _unwrap_model(match.annotation) if match else None
    return model


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{echo(part)}" if out else echo(part))
    return out or "(document)"


def problems_from_error(error: ValidationError, root: type[BaseModel] = GRPORun) -> list[Problem]:
    problems = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        path = _path(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc, root)
            allowed = ", ".join(f.alias or n for n, f in model.model_fields.items()) if model else "see kubectl explain"
            problems.append(Problem(path, f"unknown field; allowed here: {allowed}"))
            continue
        if kind == "missing":
            problems.append(Problem(path, "required field is missing; add it"))
            continue
        value = echo(json.dumps(err.get("input"), default=str))
        if kind == "string_pattern_mismatch" and "\\x00-\\x1f" in str((err.get("ctx") or {}).get("pattern")):
            problems.append(
                Problem(
                    path,
                    f"{value} contains a control character (NUL, tab, newline, ESC, ...), which "
                    "the process would receive as is; remove it",
                )
            )
            continue
        fix = _TYPE_FIXES.get(kind)
        message = f"{value} is invalid: {err['msg']}" + (f"; {fix}" if fix else "")
        problems.append(Problem(path, message))
    return problems


def parse_run(
    doc: Any, runtime: GRPORuntime | None = None, live: GRPORuntime | None = None
) -> tuple[GRPORun | None, list[Problem]]:
    """One decoded run document (a dict from YAML or from the API server) resolved against its runtime (the
    built-in AWS types when None), and held to the locks of `live` too when given: `planning.runtime.resolve`."""
    from grpo_operator.planning.runtime import resolve  # noqa: PLC0415 (resolve parses with parse_document)

    return resolve(doc, runtime, live)


def parse_runtime(doc: Any) -> tuple[GRPORuntime | None, list[Problem]]:
    """Validate one decoded document as a GRPORuntime: its schema, then what a run on it could not start with
    (`planning.runtimerules`)."""
    if not isinstance(doc, dict) or doc.get("apiVersion") != API_VERSION or doc.get("kind") != RUNTIME_KIND:
        found = f"{type(doc).__name__}" if not isinstance(doc, dict) else f"kind {echo(repr(doc.get('kind')))}"
        return None, [
            Problem(
                "(document)", f"{found} is not a GRPORuntime: set apiVersion: {API_VERSION} and kind: {RUNTIME_KIND}"
            )
        ]
    from grpo_operator.planning.runtimerules import runtime_problems  # noqa: PLC0415 (it reads Problem from here)

    try:
        runtime = GRPORuntime.model_validate_json(json.dumps(doc, default=str), by_name=False)
    except ValidationError as exc:
        return None, problems_from_error(exc, GRPORuntime)
    problems = runtime_problems(runtime)
    return (None, problems) if problems else (runtime, [])


def parse_document(doc: Any) -> tuple[GRPORun | None, list[Problem]]:
    """Validate one decoded document as a GRPORun, as it stands (no runtime applied)."""
    if not isinstance(doc, dict):
        kind = "list" if isinstance(doc, list) else type(doc).__name__
        return None, [Problem("(document)", f"expected a mapping (a GRPORun object), got a {kind}")]
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        found = f"apiVersion {echo(repr(doc.get('apiVersion')))}, kind {echo(repr(doc.get('kind')))}"
        return None, [
            Problem("(document)", f"{found} is not a GRPORun: set apiVersion: {API_VERSION} and kind: {KIND}")
        ]
    try:
        # Wire names only: the API server refuses `batch_size` where `batchSize` belongs (unknown field).
        return GRPORun.model_validate_json(json.dumps(doc, default=str), by_name=False), []
    except ValidationError as exc:
        return None, problems_from_error(exc)
