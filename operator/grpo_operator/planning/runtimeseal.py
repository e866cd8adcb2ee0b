"""The seal on the runtime copy a run keeps in its status: an HMAC-SHA256 the operator signs `status.runtime` with,
so a copy someone rewrote through the status subresource is told apart from the one the operator wrote.

`status.runtime` decides what a started run resolves against (images, nodes, locks), and anyone allowed to patch
`grporuns/status` can write it. The digest covers the copy, the run it belongs to (namespace, name, uid: a sealed
copy pasted from another run does not verify) and the status's `observedGeneration` (the generation whose edit was
last judged, so an edit cannot be passed off as judged already). The key is the operator's alone (a Secret in its
own namespace, `edges/kube.py` `status_key`); this module only computes and compares. Pure.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass

from grpo_operator.api.quote import echo
from grpo_operator.api.runtime import RuntimeRecord

SCHEME = "hmac-sha256"


@dataclass(frozen=True)
class RunRef:
    """The run a copy belongs to."""

    namespace: str
    name: str
    uid: str | None


def _payload(run: RunRef, generation: int | None, record: RuntimeRecord) -> bytes:
    # Canonical JSON of the typed copy: the API server may reformat numbers (80.0 comes back as 80), the model
    # does not. Defaults are left out, so a field a later operator adds with a default keeps old seals valid.
    copy = record.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    body = {
        "run": {"namespace": run.namespace, "name": run.name, "uid": run.uid},
        "observedGeneration": generation,
        "runtime": copy,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def seal(key: bytes, run: RunRef, generation: int | None, record: RuntimeRecord) -> str:
    """The digest `status.runtimeDigest` holds for `record` in `run`'s status at `generation`."""
    return f"{SCHEME}:{hmac.new(key, _payload(run, generation, record), hashlib.sha256).hexdigest()}"


def broken_seal(
    key: bytes, run: RunRef, generation: int | None, record: RuntimeRecord, digest: str | None
) -> str | None:
    """None when `digest` is the operator's seal of `record` (the copy may be used), else what is wrong with it, as
    the rest of a sentence about status.runtime."""
    if not digest:
        return (
            "has no status.runtimeDigest (someone removed it, or an operator from before copies were sealed wrote it)"
        )
    if not hmac.compare_digest(digest.encode(), seal(key, run, generation, record).encode()):
        return (
            f"does not match status.runtimeDigest ({echo(digest)}), the digest the operator signed it with: it was "
            "changed after the operator wrote it"
        )
    return None
