"""`grpo doctor [-f run.yaml]`: read the cluster once (`clusterread`), judge it (`doctorchecks`) and print the table
of checks, or JSON with `-o json`. Exit status 1 when any check fails, or the cluster cannot be read (one line).
"""

from __future__ import annotations

import json
import textwrap
from typing import TextIO

from grpo_operator.cli.clusterread import ReadError, connect, read
from grpo_operator.cli.doctorchecks import Check, Target, Verdict, checks

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


def run_doctor(
    target: Target | None, *, kubeconfig: str | None, context: str | None, output: str, out: TextIO, err: TextIO
) -> int:
    try:
        api, namespace = connect(kubeconfig, context)
        with api:
            cluster = read(api, namespace, target)
    except ReadError as exc:
        print(f"grpo doctor: {exc}", file=err)
        return 1
    rows = checks(cluster, target)
    failed = any(r.verdict is Verdict.FAIL for r in rows)
    if output == "json":
        found = [{"name": r.name, "verdict": r.verdict.value, "found": r.found, "fix": r.fix} for r in rows]
        print(json.dumps({"ok": not failed, "checks": found}, indent=2), file=out)
    else:
        print(table(rows), file=out)
    return 1 if failed else 0
