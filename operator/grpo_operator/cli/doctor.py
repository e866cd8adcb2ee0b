"""`grpo doctor [-f run.yaml]`: read the cluster once (`clusterread`), judge it (`doctorchecks`) and print the table
of checks, or JSON with `-o json`. Exit status 1 when any check fails, or the cluster cannot be read (one line:
no kubeconfig, no answer, an answer that is not a Kubernetes API server's, or none within `--timeout`).
"""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Callable
from typing import Any, TextIO

from grpo_operator.api.runtime import DEFAULT_RUNTIME_NAME, GRPORuntime
from grpo_operator.cli.clusterread import STEP, ReadError, connect, read, read_runtime
from grpo_operator.cli.doctorchecks import Check, Cluster, Target, Verdict, checks
from grpo_operator.cli.yamldecode import MAX_BYTES, YamlError, decode_all
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.runtime import runtime_name

WIDTH = 110


def table(rows: list[Check]) -> str:
    name_width = max(len(r.name) for r in rows)
    indent = " " * (6 + name_width + 2)
    lines = []
    for row in rows:
        head = f"{row.verdict.value.ljust(4)}  {row.name.ljust(name_width)}  "
        lines.append(textwrap.fill(row.found, WIDTH, initial_indent=head, subsequent_indent=indent))
        if row.fix:
            lines.append(textwrap.fill("fix: " + row.fix, WIDTH, initial_indent=indent, subsequent_indent=indent))
    return "\n".join(lines)


def chart_values(path: str) -> dict[str, Any]:
    """The chart values file of `--values`, as helm reads it; `ReadError` saying why not."""
    try:
        with open(path, "rb") as handle:
            documents = decode_all(handle.read(MAX_BYTES + 1).decode("utf-8"))
    except (OSError, UnicodeDecodeError, YamlError) as exc:
        raise ReadError(f"--values {path}: cannot read it ({exc}); pass the values file given to helm install") from exc
    values = documents[0] if documents else {}
    if not isinstance(values, dict):
        raise ReadError(f"--values {path}: not a mapping of chart values; pass the values file given to helm install")
    return values


def cluster_runtime(text: str, kubeconfig: str | None, context: str | None, as_user: str | None) -> GRPORuntime | None:
    """The cluster's GRPORuntime the run in `text` resolves against, as the operator finds it: the one its
    spec.runtimeRef names, else the one named default; None for the built-in AWS types (no default runtime on the
    cluster). `ReadError` with the one line to show when the named one is missing, invalid or unreadable."""
    try:
        documents = [d for d in decode_all(text) if d is not None]
    except YamlError:
        return None  # the run's own check says what is wrong with the file
    if len(documents) != 1:
        return None
    name = runtime_name(documents[0])
    api, _ = connect(kubeconfig, context, as_user)
    with api:
        found = read_runtime(api, name, named=name != DEFAULT_RUNTIME_NAME)
    if found is None:
        if name == DEFAULT_RUNTIME_NAME:
            return None
        raise ReadError(
            f"spec.runtimeRef.name: GRPORuntime {name} is not on the cluster; the operator holds the run Pending "
            f"(RuntimeNotFound) until it exists: create it (kubectl apply -f <its file>) or fix spec.runtimeRef.name"
        )
    runtime, problems = parse_runtime(found)
    if runtime is None:
        raise ReadError(f"GRPORuntime {name} on the cluster is not valid: {problems[0]}; fix it (kubectl edit)")
    return runtime


def _judged(cluster: Cluster, target: Target | None, host: str) -> list[Check]:
    """The checks; objects that are JSON but not of Kubernetes' shape (a field of the wrong type) are one line."""
    try:
        return checks(cluster, target)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise ReadError(
            f"the server at {host} answered with objects that do not have the shape Kubernetes gives them "
            f"({type(exc).__name__}: {str(exc)[:120]}); is the kubeconfig's server address a Kubernetes API server?"
        ) from exc


def within_deadline(work: Callable[[], int], seconds: float, err: TextIO) -> int:
    """`work()`, or one line and exit 1 when it has not ended after `seconds`: a server that drips bytes or never
    answers, or a credential plugin that hangs, cannot hold the command (urllib3's timeouts are per read, and the
    kubernetes client runs exec plugins without one). The reads are GETs only, so leaving them is harmless; the
    thread is a daemon and goes with the process."""
    ended: list[int] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            ended.append(work())
        except BaseException as exc:  # handed to the caller's thread as it is
            failed.append(exc)

    thread = threading.Thread(target=body, name="grpo-doctor-reads", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        print(
            f"grpo doctor: no answer within --timeout {seconds:g} s while {STEP[0]}; check the kubeconfig's server "
            "address and credential plugin, or raise --timeout",
            file=err,
        )
        err.flush()
        return 1
    if failed:
        raise failed[0]
    return ended[0]


def run_doctor(
    target: Target | None,
    *,
    kubeconfig: str | None,
    context: str | None,
    output: str,
    out: TextIO,
    err: TextIO,
    values: str | None = None,
    as_user: str | None = None,
) -> int:
    try:
        chart = chart_values(values) if values is not None else None
        api, namespace = connect(kubeconfig, context, as_user)
        with api:
            cluster = read(api, namespace, target)
            cluster.chart_values = chart
            rows = _judged(cluster, target, str(api.configuration.host))
    except ReadError as exc:
        print(f"grpo doctor: {exc}", file=err)
        return 1
    failed = any(r.verdict is Verdict.FAIL for r in rows)
    if output == "json":
        found = [{"name": r.name, "verdict": r.verdict.value, "found": r.found, "fix": r.fix} for r in rows]
        print(json.dumps({"ok": not failed, "checks": found}, indent=2), file=out)
    else:
        print(table(rows), file=out)
    return 1 if failed else 0
