"""Turn YAML text (or a dict from the API server) into typed GRPORuns, or into problems naming where.

Every way a document can be wrong ends here as a `Problem` with a field path and a fix, never a traceback:
not YAML, empty, a list where a mapping belongs, an unknown field, a wrong kind or apiVersion, a string
where a number belongs, a number out of bounds. YAML is read by `yamldecode` (as kubectl reads it, with
bounds on size, depth and aliases); values quoted back in messages are cut to a few dozen characters.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from grpo_operator.api import API_VERSION, KIND, GRPORun
from grpo_operator.cli.yamldecode import YamlError, decode_all
from grpo_operator.planning.quote import echo
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


@dataclass
class Document:
    """One YAML document: its position, the parsed run when valid, and its structural problems."""

    index: int
    name: str | None
    run: GRPORun | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or f"document {self.index + 1}"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that holds the last element of `loc` (to list the allowed fields)."""
    model: type[BaseModel] | None = GRPORun
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


def problems_from_error(error: ValidationError) -> list[Problem]:
    problems = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        path = _path(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc)
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


def parse_run(doc: Any) -> tuple[GRPORun | None, list[Problem]]:
    """Validate one decoded document (a dict from YAML or from the API server)."""
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


def load_documents(text: str) -> tuple[list[Document], list[Problem]]:
    """Parse multi-document YAML; file-level problems (not YAML, empty) come back separately."""
    try:
        raw = [d for d in decode_all(text) if d is not None]
    except YamlError as exc:
        verdict = "refused" if exc.where == "whole file" else f"not valid YAML at {exc.where}"
        return [], [Problem("(file)", f"{verdict}: {exc.reason}")]
    if not raw:
        return [], [Problem("(file)", "is empty: no GRPORun document found; write one (see examples/quickstart.yaml)")]
    documents = []
    for index, doc in enumerate(raw):
        name = None
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
            name = doc["metadata"].get("name") if isinstance(doc["metadata"].get("name"), str) else None
        run, problems = parse_run(doc)
        documents.append(Document(index=index, name=name, run=run, problems=problems))
    return documents, []
