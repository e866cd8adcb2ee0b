"""`Kube` that does not re-send what it has just applied: the operator's steady-state cost in API requests.

Every reconcile renders a run's children and server-side applies them. Applying an unchanged manifest changes
nothing on the server but is still one PATCH per child per reconcile, the largest share of an idle run's
requests. `CachingKube.apply` remembers the digest of the manifest it last applied for each object and skips
a manifest it applied within `resync_seconds`: a changed spec renders a changed manifest and goes out at once,
a child deleted by someone is seen by the child watch (controller/children.py calls `forget_run`), and drift
someone made in a child's spec is corrected at the first reconcile after `resync_seconds` (the operator passes
10 resyncs, 10 minutes by default: level-triggered, as before, only less often).

It also remembers each run's Ray auth token as read (never instead of reading it), so the timer can tell
whether that run's Ray head is in backoff (edges/backoff.py keys a head by address and token).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from grpo_operator.edges.kube import Kube
from grpo_operator.render import names

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


class CachingKube(Kube):
    def __init__(self, api_client: client.ApiClient, resync_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        super().__init__(api_client)
        self.resync_seconds = resync_seconds
        self._clock = clock
        self._applied: dict[Key, tuple[str, float, tuple[str, str] | None]] = {}
        self._tokens: dict[tuple[str, str], str | None] = {}
        self._guard = threading.Lock()

    def apply(self, manifest: dict[str, Any]) -> None:
        meta = manifest["metadata"]
        key: Key = (manifest["apiVersion"], manifest["kind"], meta.get("namespace") or "", meta["name"])
        digest = hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()
        now = self._clock()
        with self._guard:
            last = self._applied.get(key)
        if last is not None and last[0] == digest and now - last[1] < self.resync_seconds:
            return
        super().apply(manifest)
        run = (meta.get("labels") or {}).get(names.RUN_LABEL)
        with self._guard:
            self._applied[key] = (digest, now, (key[2], run) if run else None)

    def forget_run(self, namespace: str, run: str) -> None:
        """Apply this run's children again at its next reconcile (one of them changed or went away)."""
        with self._guard:
            for key in [k for k, v in self._applied.items() if v[2] == (namespace, run)]:
                del self._applied[key]

    def forget_all(self) -> None:
        with self._guard:
            self._applied.clear()

    def ray_auth_token(self, namespace: str, run: str, uid: str | None, *, create: bool = True) -> str | None:
        token = super().ray_auth_token(namespace, run, uid, create=create)
        with self._guard:
            self._tokens[(namespace, run)] = token
        return token

    def known_token(self, namespace: str, run: str) -> str | None:
        with self._guard:
            return self._tokens.get((namespace, run))

    def forget_token(self, namespace: str, run: str) -> None:
        with self._guard:
            self._tokens.pop((namespace, run), None)
