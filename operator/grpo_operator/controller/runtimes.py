"""Which runtime one reconcile resolves a run against, and the seal on the copy of it the status keeps.

Before a run is planned, the GRPORuntime it names (GET; the built-in AWS types when the default one is not
installed). After, the copy in `status.runtime`, but only while the operator's seal on it (`status.runtimeDigest`,
planning/runtimeseal.py) verifies: anyone allowed to patch `grporuns/status` can write that copy. A copy that does
not verify is not used: the run is checked against the GRPORuntime it names, as before it was planned, and held as
it is when there is none. An edit of a started run (a generation the sealed status has not judged) is held to the
locks of the live GRPORuntime as well as the copy's. The reconciler seals the copy it writes, in its one status
write (`sealed`), and only a copy this reconcile resolved against.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_operator.api.quote import echo
from grpo_operator.api.runtime import DEFAULT_RUNTIME_NAME, GRPORuntime, RuntimeRecord
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges.kube import Kube
from grpo_operator.planning.documents import parse_runtime
from grpo_operator.planning.instances import DEFAULT_RUNTIME
from grpo_operator.planning.runtime import runtime_from_record, runtime_name
from grpo_operator.planning.runtimeseal import RunRef, broken_seal, seal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeFound:
    """The runtime a reconcile resolves the run against, or why there is none (`missing`, `unreadable`); the live
    GRPORuntime whose locks an edit keeps too; and, when status.runtime failed its digest, what the event says."""

    runtime: GRPORuntime | None = None
    live: GRPORuntime | None = None
    missing: str | None = None
    unreadable: tuple[str, ...] = ()
    altered: str | None = None


def run_ref(body: Mapping[str, Any]) -> RunRef:
    meta = body["metadata"]
    return RunRef(meta["namespace"], meta["name"], meta.get("uid"))


@dataclass
class Runtimes:
    kube: Kube
    settings: OperatorSettings

    def find(self, body: Mapping[str, Any], prev: GRPORunStatus | None, generation: int) -> RuntimeFound:
        """The runtime the run resolves against: the copy in its status once it was planned, if its digest
        verifies, with the live GRPORuntime's locks for an edit (a generation the status has not judged); a copy
        that does not verify is not used: the GRPORuntime the run names is, as before the run was planned, and the
        run is held when it does not exist."""
        record = prev.runtime if prev is not None else None
        if prev is None or record is None:
            return self.named(runtime_name(body))
        run = run_ref(body)
        broken = broken_seal(self._key(), run, prev.observed_generation, record, prev.runtime_digest)
        if broken is None:
            edited = generation != prev.observed_generation
            return RuntimeFound(runtime_from_record(record), live=self._live(record.name) if edited else None)
        name = runtime_name(body)
        found = self.named(name)
        what = (
            f"status.runtime (the copy of GRPORuntime {echo(record.name)} GRPORun {echo(run.namespace)}/"
            f"{echo(run.name)} was planned against) {broken}, so it is not used"
        )
        who = "; only the operator should patch grporuns/status (grpo doctor names who else may)"
        if found.runtime is not None:
            return dataclasses.replace(found, altered=f"{what}: the run is checked against GRPORuntime {name}{who}")
        why = "; ".join(found.unreadable) or f"GRPORuntime {echo(name)} does not exist"
        held = (
            f"{what}, and there is no runtime to check the run against instead ({why}): the run is not planned again, "
            f"nothing is applied and its job is left as it is until spec.runtimeRef's GRPORuntime {echo(name)} can be "
            f"read; create or fix it (kubectl apply -f <runtime>.yaml){who}"
        )
        return RuntimeFound(missing=held, altered=held)

    def named(self, name: str) -> RuntimeFound:
        """The GRPORuntime `name` from the API server (the built-in AWS types for the default one when it is not
        installed); else why not: it does not exist (the run waits for it), or it cannot be read."""
        found = self.kube.runtime(name)
        if found is None:
            if name == DEFAULT_RUNTIME_NAME:
                return RuntimeFound(DEFAULT_RUNTIME)
            missing = (
                f"spec.runtimeRef.name: GRPORuntime {echo(name)} does not exist; create it (kubectl apply -f "
                "<runtime>.yaml) or name one of kubectl get grporuntimes; the run starts once it exists"
            )
            return RuntimeFound(missing=missing)
        runtime, problems = parse_runtime(found)
        if runtime is None:  # the API server's schema let through what the operator's model refuses
            return RuntimeFound(unreadable=tuple(f"GRPORuntime {echo(name)}: {p}" for p in problems))
        return RuntimeFound(runtime)

    def sealed(self, body: Mapping[str, Any], status: GRPORunStatus, trusted: RuntimeRecord | None) -> GRPORunStatus:
        """`status` with status.runtime sealed when it is `trusted`, the copy this reconcile resolved against; any
        other copy (one that failed its digest and is held) is written unsealed, never signed."""
        record = status.runtime
        if record is None or trusted is None or record != trusted:
            return status.model_copy(update={"runtime_digest": None})
        digest = seal(self._key(), run_ref(body), status.observed_generation, record)
        return status.model_copy(update={"runtime_digest": digest})

    def _live(self, name: str) -> GRPORuntime | None:
        """The GRPORuntime a started run was planned against as it is now, whose locks an edit must keep too; None
        when it is gone or unreadable (the recorded copy alone judges then)."""
        found = self.kube.runtime(name)
        runtime, problems = parse_runtime(found) if found is not None else (None, [])
        if problems:
            log.info("GRPORuntime %s cannot be read, so its locks do not judge an edit: %s", name, problems[0])
        return runtime

    def _key(self) -> bytes:
        return self.kube.status_key(*self.settings.status_key_ref)
