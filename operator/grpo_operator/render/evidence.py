"""The ConfigMap that keeps what was captured from a run's job before the operator stopped it (the stall or the
degenerate-output guard under `guards.action: Stop`): Ray's view of the job, the Python stacks of its processes
and the driver's log tail. Pure. Owned by the run, so it outlives the RayCluster and goes with the run. Bounded:
each piece keeps its last `PIECE_BYTES` (cut at a line start) and is gzip-compressed into `binaryData`; pieces
that would take the whole past `TOTAL_BYTES` as base64 (a ConfigMap holds at most 1 MiB) are listed as left out. Every
secret the caller names (render/redaction.py: the run's Ray token, its secretEnv values) and anything shaped like a
Hugging Face token is redacted first.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_operator.render import names
from grpo_operator.render.joblogs import tail
from grpo_operator.render.redaction import redact

PIECE_BYTES = 256 * 1024
TOTAL_BYTES = 900 * 1024
INDEX = "index.txt"


def _compressed(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8", errors="replace"), compresslevel=6, mtime=0)


def evidence_config_map(
    namespace: str,
    run: str,
    uid: str | None,
    name: str,
    *,
    header: Mapping[str, str],
    pieces: Mapping[str, str],
    secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """The bundle `name`: `header` (trigger, job, time) and an index line per piece, each piece gzip'd."""
    lines = [f"{k}: {redact(v, secrets)}" for k, v in header.items()]
    binary: dict[str, bytes] = {}
    used = 0
    for key, text in pieces.items():
        kept, truncated = tail(redact(text, secrets), PIECE_BYTES)
        packed = _compressed(kept)
        size = len(kept.encode("utf-8"))
        wire = 4 * ((len(packed) + 2) // 3)  # as base64, the way it travels and is counted in the request
        if used + wire > TOTAL_BYTES:
            lines.append(f"{key}: left out, the bundle is full ({size} bytes)")
            continue
        used += wire
        binary[f"{key}.gz"] = packed
        lines.append(f"{key}.gz: {size} bytes{', the tail of a longer text' if truncated else ''}")
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": names.labels(run, "forensics")}
    if uid:
        meta["ownerReferences"] = [names.owner_reference(run, uid)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {INDEX: "\n".join(lines) + "\n"},
        "binaryData": {k: base64.b64encode(v).decode("ascii") for k, v in binary.items()},
    }
