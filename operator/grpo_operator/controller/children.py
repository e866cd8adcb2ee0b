"""Children watched instead of polled: a change of a run's RayCluster or reward Deployment (labelled with the run,
owned by it) reconciles the run at once, and `Pacing.due` lets a timer tick through only for a run with Ray work
(a job submitted, or one to submit) whose head is not in backoff; every other run is reconciled on its children's
events and at least every `resync_seconds` (pods, whose problems no watched child reports, and drift).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grpo_operator.api import GROUP, VERSION
from grpo_operator.api.status import TERMINAL_PHASES, Reason
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges import endpoints
from grpo_operator.edges.backoff import Backoff, dry_run_key, ray_key
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.render import names

RESYNC_INTERVALS = 4  # a run without Ray work is reconciled at least every 4 reconcile intervals


def resync_seconds(settings: OperatorSettings) -> float:
    return RESYNC_INTERVALS * settings.reconcile_interval_seconds


def owner_body(child: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owning GRPORun as far as the child names it (enough to reconcile it and post Events on it)."""
    meta = child.get("metadata") or {}
    run = (meta.get("labels") or {}).get(names.RUN_LABEL)
    if not run:
        return None
    ref = next(
        (r for r in meta.get("ownerReferences") or [] if r.get("kind") == "GRPORun" and r.get("name") == run), None
    )
    if ref is None:
        return None
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GRPORun",
        "metadata": {"name": run, "namespace": meta.get("namespace"), "uid": ref.get("uid")},
    }


@dataclass
class Pacing:
    """When each run was last reconciled, and whether a timer tick of it is due."""

    settings: OperatorSettings
    cache: KubeCache
    backoff: Backoff
    clock: Callable[[], float] = time.monotonic
    api_backoff: Backoff = field(default_factory=Backoff)  # the reconciler's, for dry runs the API server failed
    _last: dict[tuple[str, str], float] = field(default_factory=dict, init=False, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def reconciled(self, namespace: str, name: str) -> None:
        with self._guard:
            self._last[(namespace, name)] = self.clock()

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._last.pop((namespace, name), None)
        self.cache.forget_run(namespace, name)
        self.cache.forget_token(namespace, name)

    def ray_address(self, namespace: str, name: str) -> str:
        return endpoints.ray_address(namespace, name, self.settings)

    def due(self, body: Mapping[str, Any]) -> bool:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._guard:
            last = self._last.get(key)
        if last is None or self.clock() - last >= resync_seconds(self.settings):
            return True
        status = body.get("status") or {}
        if status.get("reason") == Reason.API_SERVER_UNAVAILABLE:  # no child to watch yet: retried on its backoff
            return self.api_backoff.waiting(dry_run_key(*key)) is None
        if status.get("phase") in {p.value for p in TERMINAL_PHASES}:
            return False  # winding down follows Ray; the resync and the RayCluster's deletion event carry it
        ray_work = bool(status.get("jobSubmissionId")) or status.get("reason") == Reason.SUBMITTING
        if not ray_work:
            return False
        token = self.cache.known_token(*key)
        return self.backoff.waiting(ray_key(self.ray_address(*key), token)) is None

    def child_changed(self, namespace: str, run: str, kind: str, deleted: bool) -> None:
        if deleted:
            self.cache.forget_run(namespace, run)
        if kind == "RayCluster":
            self.backoff.retry_now(f"ray {self.ray_address(namespace, run)} ")
