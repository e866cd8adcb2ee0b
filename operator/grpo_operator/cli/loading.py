"""Turn YAML text into typed GRPORuns and GRPORuntimes, or into problems naming where, one `Document` each.

Every way a file can be wrong ends as a `Problem` with a field path and a fix, never a traceback: not YAML,
empty, or a document `planning.documents.parse_run` or `parse_runtime` refuses. A file may hold GRPORuntimes beside
the runs, as `kubectl apply -f` takes them: a run naming one of them (spec.runtimeRef) resolves against it. YAML is
read by `yamldecode` (as kubectl reads it, with bounds on size, depth and aliases).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_operator.api import GRPORun
from grpo_operator.api.runtime import RUNTIME_KIND, GRPORuntime
from grpo_operator.cli.yamldecode import YamlError, decode_all
from grpo_operator.planning.documents import parse_run, parse_runtime, problems_from_error
from grpo_operator.planning.runtime import runtime_name
from grpo_operator.planning.validation import Problem

__all__ = ["Document", "load_documents", "load_runtime", "parse_run", "problems_from_error"]


@dataclass
class Document:
    """One YAML document: its position, the parsed run (or runtime) when valid, and its structural problems."""

    index: int
    name: str | None
    run: GRPORun | None = None
    problems: list[Problem] = field(default_factory=list)
    runtime: GRPORuntime | None = None

    @property
    def label(self) -> str:
        return self.name or f"document {self.index + 1}"


def load_runtime(text: str) -> tuple[GRPORuntime | None, list[Problem]]:
    """One GRPORuntime from YAML (`grpo validate --runtime`), or the problems naming where it is wrong."""
    try:
        raw = [d for d in decode_all(text) if d is not None]
    except YamlError as exc:
        return None, [Problem("(runtime file)", f"not valid YAML at {exc.where}: {exc.reason}")]
    if len(raw) != 1:
        return None, [Problem("(runtime file)", f"holds {len(raw)} documents; write exactly one GRPORuntime")]
    return parse_runtime(raw[0])


def _is_runtime(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == RUNTIME_KIND


def _runtime_problems(doc: object, runtime: GRPORuntime | None, in_file: dict[str, int]) -> list[Problem]:
    """A run that names another runtime than the one given: the operator would resolve it against that one."""
    named = runtime_name(doc)
    ref = isinstance(doc, dict) and isinstance(doc.get("spec"), dict) and "runtimeRef" in doc["spec"]
    if ref and named in in_file:
        return [
            Problem(
                "spec.runtimeRef.name",
                f"{named}: the GRPORuntime of that name in this file (document {in_file[named] + 1}) is invalid; fix "
                "its problems above",
            )
        ]
    if ref and runtime is None:
        return [
            Problem(
                "spec.runtimeRef.name",
                f"{named}: the run resolves against that GRPORuntime; pass its file with --runtime or put it in this "
                f"file (kubectl get grporuntime {named} -o yaml)",
            )
        ]
    if ref and runtime is not None and named != runtime.metadata.name:
        return [
            Problem(
                "spec.runtimeRef.name",
                f"{named} but --runtime gives GRPORuntime {runtime.metadata.name}; pass that runtime's file, put it "
                "in this file, or change runtimeRef",
            )
        ]
    return []


def _name_of(doc: object) -> str | None:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else None


def load_documents(text: str, runtime: GRPORuntime | None = None) -> tuple[list[Document], list[Problem]]:
    """Parse multi-document YAML, each run resolved against the GRPORuntime of this file it names, else `runtime`
    (the built-in AWS types when None); file-level problems (not YAML, empty) come back separately."""
    try:
        raw = [d for d in decode_all(text) if d is not None]
    except YamlError as exc:
        verdict = "refused" if exc.where == "whole file" else f"not valid YAML at {exc.where}"
        return [], [Problem("(file)", f"{verdict}: {exc.reason}")]
    if not raw:
        return [], [Problem("(file)", "is empty: no GRPORun document found; write one (see examples/quickstart.yaml)")]
    runtimes: dict[int, tuple[GRPORuntime | None, list[Problem]]] = {
        index: parse_runtime(doc) for index, doc in enumerate(raw) if _is_runtime(doc)
    }
    # As kubectl applies them in order: a later runtime of the same name replaces the earlier.
    valid = {rt.metadata.name: rt for rt, _ in runtimes.values() if rt is not None}
    broken = {_name_of(raw[i]) or "": i for i, (rt, _) in runtimes.items() if rt is None}
    documents = []
    for index, doc in enumerate(raw):
        name = _name_of(doc)
        if index in runtimes:
            found, problems = runtimes[index]
            documents.append(Document(index=index, name=name, problems=problems, runtime=found))
            continue
        spec = doc.get("spec") if isinstance(doc, dict) else None
        own = valid.get(runtime_name(doc)) if isinstance(spec, dict) and "runtimeRef" in spec else None
        against = own or runtime
        mismatch = [] if own is not None else _runtime_problems(doc, runtime, broken)
        run, problems = (None, mismatch) if mismatch else parse_run(doc, against)
        documents.append(Document(index=index, name=name, run=run, problems=problems))
    return documents, []
