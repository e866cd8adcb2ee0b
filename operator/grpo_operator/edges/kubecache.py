"""`Kube` that does not re-send what it has just applied: the operator's steady-state cost in API requests.

Every reconcile renders a run's children and server-side applies them. Applying an unchanged manifest changes
nothing on the server but is still one PATCH per child per reconcile, the largest share of an idle run's
requests. `CachingKube.apply` remembers the digest of the manifest it last applied for each object and skips
a manifest it applied within `resync_seconds`: a changed spec renders a changed manifest and goes out at once,
a child deleted by someone is seen by the child watch (controller/children.py calls `forget_run`), and drift
someone made in a child's spec is corrected at the first reconcile after `resync_seconds` (the operator passes
10 resyncs, 10 minutes by default: level-triggered, as before, only less often).

It reads the run and its children from the operator's watches when it has them (`view`, edges/watchcache.py:
kopf indices), falling back to a GET for what they do not hold yet; without a view every read is a request.

It remembers each run's Ray auth token for `token_seconds` (the Secret is immutable when this operator made it,
render/auth.py; a token someone replaced in their own Secret is read within that time), so a timer tick
costs no Secret read, and the timer can tell whether that run's Ray head is in backoff (edges/backoff.py keys a
head by address and token).
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
from grpo_operator.edges.watchcache import WatchView
from grpo_operator.render import names

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
_UNKNOWN, _GONE = "<no version known>", "<gone>"  # never a resourceVersion


class CachingKube(Kube):
    def __init__(
        self,
        api_client: client.ApiClient,
        resync_seconds: float,
        token_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(api_client)
        self.resync_seconds = resync_seconds
        self.token_seconds = resync_seconds if token_seconds is None else token_seconds
        self.view: WatchView | None = None  # set by the handlers once kopf has passed its indices
        self._clock = clock
        self._applied: dict[Key, tuple[str, float, tuple[str, str] | None]] = {}
        self._tokens: dict[tuple[str, str], tuple[str | None, str | None, float]] = {}  # (uid, token, read at)
        self._versions: dict[tuple[str, str], str | None] = {}  # the run's newest resourceVersion seen here
        self._guard = threading.Lock()

    # --- reads: the watches first -----------------------------------------------------------------
    def get_run(self, namespace: str, run: str) -> dict[str, Any] | None:
        """The run from the watch when no newer version is known to this process: it has never read or written
        the run (a new run, or the first reconcile after a start), or the watch holds the very version it last
        read or wrote (by resourceVersion). So a reconcile never acts on a version older than its own last status
        write, whose watch event may still be in flight. Otherwise a GET, whose version becomes the one known."""
        found = self.view.run(namespace, run) if self.view is not None else None
        version = (found or {}).get("metadata", {}).get("resourceVersion")
        with self._guard:
            known = self._versions.get((namespace, run), _UNKNOWN)
        if found is not None and version is not None and known in (_UNKNOWN, version):
            with self._guard:
                self._versions.setdefault((namespace, run), version)
            return found
        return self.get_run_fresh(namespace, run)

    def get_run_fresh(self, namespace: str, run: str) -> dict[str, Any] | None:
        found = super().get_run_fresh(namespace, run)
        with self._guard:  # gone: no watch copy of it is taken again (a run made anew is read, then written)
            self._versions[(namespace, run)] = _GONE if found is None else found["metadata"].get("resourceVersion")
        return found

    def patch_status(
        self, namespace: str, run: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        version = super().patch_status(namespace, run, status, resource_version)
        with self._guard:
            self._versions[(namespace, run)] = version
        return version

    def ray_cluster(self, namespace: str, run: str) -> dict[str, Any] | None:
        found = self.view.ray_cluster(namespace, run) if self.view is not None else None
        return found if found is not None else super().ray_cluster(namespace, run)

    def run_pods(self, namespace: str, run: str) -> list[client.V1Pod]:
        return self.view.run_pods(namespace, run) if self.view is not None else super().run_pods(namespace, run)

    def reward_deployment(self, namespace: str, run: str) -> client.V1Deployment | None:
        found = self.view.reward_deployment(namespace, run) if self.view is not None else None
        return found if found is not None else super().reward_deployment(namespace, run)

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
        now = self._clock()
        with self._guard:
            known = self._tokens.get((namespace, run))
        if known is not None and known[0] == uid and known[1] is not None and now - known[2] < self.token_seconds:
            return known[1]
        token = super().ray_auth_token(namespace, run, uid, create=create)
        with self._guard:
            self._tokens[(namespace, run)] = (uid, token, now)
        return token

    def known_token(self, namespace: str, run: str) -> str | None:
        with self._guard:
            known = self._tokens.get((namespace, run))
        return known[1] if known is not None else None

    def forget_token(self, namespace: str, run: str) -> None:
        """The run is being deleted: its token goes, and no watch copy of it is taken again."""
        with self._guard:
            self._tokens.pop((namespace, run), None)
            self._versions[(namespace, run)] = _GONE
