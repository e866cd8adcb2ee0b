"""What the evidence capture's stacks job printed (`python -m grpo_launcher.stacks` in the trainer image), as pieces
of the bundle: `stacks.txt` with a section per process (node, pid, command line, faulthandler's dump), the Ray log
tails as `logs-<node>-<file>`, torch's flight-recorder dumps as `nccl-<node>-<file>.b64`, and, for `missing.txt`,
each node that did not answer and what a node had to leave out. Pure: the log and the job's end state in, pieces out.
The marks are the launcher's (`grpo_launcher.stacks.MARK`, `MISSING_MARK`); the operator never imports the image's
package, and `tests/edges/test_stacks_job.py` holds the two spellings equal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MARK = "GRPO_STACKS "
MISSING_MARK = "GRPO_STACKS_MISSING "
TAIL_PIECES = ("logs-", "nccl-")  # the per-node pieces, which a full bundle leaves out before any other
_KEY_CHARS = re.compile(r"[^-._a-zA-Z0-9]")  # what a ConfigMap key may hold


@dataclass(frozen=True)
class StacksRead:
    """The stacks job as the operator left it: its state (`STOPPED` when the operator stopped it at the
    capture's deadline), its message and its whole log."""

    status: str
    message: str
    log: str


@dataclass
class StacksPieces:
    stacks: list[str] = field(default_factory=list)  # a section per process, or per node without one
    pieces: dict[str, str] = field(default_factory=dict)
    missing: list[tuple[str, str]] = field(default_factory=list)


def piece_key(kind: str, node: str, name: str) -> str:
    """A bundle key (a ConfigMap key: letters, digits, `-`, `_`, `.`) for `name` of `node`."""
    return _KEY_CHARS.sub("_", f"{kind}-{node}-{name}")[:240]


def stacks_pieces(read: StacksRead) -> StacksPieces:
    out = StacksPieces()
    heard = 0
    for line in read.log.splitlines():
        if line.startswith(MARK):
            heard += _node(out, line.removeprefix(MARK))
        elif line.startswith(MISSING_MARK):
            heard += 1
            entry = _object(line.removeprefix(MISSING_MARK))
            out.missing.append((f"node {entry.get('node', '?')}", str(entry.get("why", "no reason given"))))
    if read.status != "SUCCEEDED":
        tail = (read.message or read.log)[-800:].strip()
        why = f"the stacks job ended {read.status} after {heard} node(s) reported" + (f": {tail}" if tail else "")
        out.missing.append(("stacks job", why))
    return out


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _node(out: StacksPieces, text: str) -> int:
    node = _object(text)
    if not node:
        out.missing.append(("stacks job", "a node's line is not a JSON object (cut short?)"))
        return 0
    label = str(node.get("node", "?"))
    processes = [p for p in node.get("processes", []) if isinstance(p, dict)]
    for process in processes:
        out.stacks.append(
            f"== {label} pid {process.get('pid')}: {process.get('cmdline', '?')}\n{process.get('dump', '')}"
        )
    if not processes:
        out.stacks.append(f"== {label}: no process there has the stacks hook (GRPO_STACKS_DIR unset, or no Python)\n")
    for name, encoded in dict(node.get("nccl", {})).items():  # before the logs: what a full bundle keeps longer
        out.pieces[piece_key("nccl", label, str(name)) + ".b64"] = str(encoded)
    for name, log in dict(node.get("logs", {})).items():
        out.pieces[piece_key("logs", label, str(name))] = str(log)
    out.missing += [(f"{label} {what}", "over the node's share of the bundle") for what in node.get("left_out", [])]
    return 1
