"""The ConfigMap that keeps a finished job's log tail once the RayCluster, and Ray's copy of the log, are gone.

Pure: the reconciler reads the log through the Ray Jobs API (`RayJobs.logs`) before it deletes the RayCluster
and applies this manifest, owned by the run (so it goes when the run is deleted); `status.logs` says where it
is. The tail is bounded: a ConfigMap holds at most 1 MiB in all, so the last `TAIL_BYTES` bytes are kept,
cut at a line start. The run's secrets are redacted first (render/redaction.py), as in an evidence bundle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo_operator.api.status import RunLogs
from grpo_operator.render import names
from grpo_operator.render.redaction import redact

TAIL_BYTES = 900 * 1024
KEY = "job.log"


def tail(text: str, limit: int = TAIL_BYTES) -> tuple[str, bool]:
    """The last `limit` bytes of `text` (UTF-8), starting at a line; whether anything was cut."""
    raw = text.encode("utf-8", errors="replace")
    if len(raw) <= limit:
        return raw.decode("utf-8", errors="replace"), False
    cut = raw[-limit:]
    newline = cut.find(b"\n")
    at_line_start = raw[-limit - 1] == ord("\n")  # the cut starts a line: its first line is whole
    if not at_line_start and 0 <= newline < len(cut) - 1:
        cut = cut[newline + 1 :]
    return cut.decode("utf-8", errors="ignore"), True


def job_logs_config_map(
    namespace: str, run: str, uid: str | None, submission_id: str, text: str, *, secrets: Sequence[str] = ()
) -> tuple[dict[str, Any], RunLogs]:
    """The ConfigMap keeping the tail of `text`, redacted of `secrets` (render/redaction.py), and where it is."""
    kept, truncated = tail(redact(text, secrets))
    meta: dict[str, Any] = {
        "name": names.job_logs(run),
        "namespace": namespace,
        "labels": names.labels(run, "job-logs"),
        "annotations": {"grpo.dev/submission-id": submission_id},
    }
    if uid:
        meta["ownerReferences"] = [names.owner_reference(run, uid)]
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {KEY: kept}}
    ref = RunLogs(
        config_map=names.job_logs(run),
        key=KEY,
        submission_id=submission_id,
        bytes=len(kept.encode("utf-8")),
        truncated=truncated,
    )
    return manifest, ref
