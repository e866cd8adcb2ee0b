"""What `Kube` remembers between reconciles, so that an unchanged run costs the API server nothing: the manifests
it applied, each run's Ray auth token, the newest version of each run it has seen, and the operator's watches.

Applying an unchanged manifest changes nothing on the server but is one PATCH per child per reconcile, the
largest share of an idle run's requests: a manifest applied within `resync_seconds` is not sent again (a changed
spec renders a changed manifest and goes out at once; a child someone deleted is seen by the child watch,
which calls `forget_run`; drift in a child's spec is undone at the first reconcile after `resync_seconds`).
A token is kept `token_seconds` (the Secret this operator makes, render/auth.py, is immutable; a token someone replaced in
their own Secret is read within that time), so a timer tick costs no Secret read and the timer can tell
whether that run's Ray head is in backoff (edges/backoff.py keys a head by address and token).
Reads come from `view` (edges/watchcache.py) once the handlers have set it. `KubeCache(resync_seconds=0)` with
no view remembers nothing: every call is a request.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpo_operator.edges.watchcache import WatchView
from grpo_operator.render import names

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
_UNKNOWN, _GONE = "<no version known>", "<gone>"  # never a resourceVersion


def _key(manifest: dict[str, Any]) -> Key:
    meta = manifest["metadata"]
    return (manifest["apiVersion"], manifest["kind"], meta.get("namespace") or "", meta["name"])


def _digest(manifest: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(manifest, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class KubeCache:
    resync_seconds: float = 0.0
    token_seconds: float | None = None  # None: as `resync_seconds`
    clock: Callable[[], float] = time.monotonic
    view: WatchView | None = None  # set by the handlers once kopf has passed its indices
    _applied: dict[Key, tuple[str, float, tuple[str, str] | None]] = field(default_factory=dict, init=False)
    _tokens: dict[tuple[str, str], tuple[str | None, str | None, float]] = field(default_factory=dict, init=False)
    _versions: dict[tuple[str, str], str | None] = field(default_factory=dict, init=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    # --- the run: the watch's copy unless a newer version is known here ---------------------------------
    def watched_run(self, namespace: str, run: str) -> dict[str, Any] | None:
        """The run from the watch when no newer version is known to this process: it has never read or written
        the run (a new run, or the first reconcile after a start), or the watch holds the very version it last
        read or wrote. So a reconcile never acts on a version older than its own last status write, whose watch
        event may still be in flight. None: read it by a GET."""
        found = self.view.run(namespace, run) if self.view is not None else None
        version = (found or {}).get("metadata", {}).get("resourceVersion")
        with self._guard:
            known = self._versions.get((namespace, run), _UNKNOWN)
            if found is None or version is None or known not in (_UNKNOWN, version):
                return None
            self._versions.setdefault((namespace, run), version)
        return found

    def saw_run(self, namespace: str, run: str, version: str | None, *, gone: bool = False) -> None:
        """The version of the run this process has just read or written (gone: no watch copy is taken again)."""
        with self._guard:
            self._versions[(namespace, run)] = _GONE if gone else version

    # --- applied manifests --------------------------------------------------------------------------
    def applied_recently(self, manifest: dict[str, Any]) -> bool:
        with self._guard:
            last = self._applied.get(_key(manifest))
        return last is not None and last[0] == _digest(manifest) and self.clock() - last[1] < self.resync_seconds

    def applied(self, manifest: dict[str, Any]) -> None:
        key = _key(manifest)
        run = (manifest["metadata"].get("labels") or {}).get(names.RUN_LABEL)
        with self._guard:
            self._applied[key] = (_digest(manifest), self.clock(), (key[2], run) if run else None)

    def forget_run(self, namespace: str, run: str) -> None:
        """Apply this run's children again at its next reconcile (one of them changed or went away)."""
        with self._guard:
            for key in [k for k, v in self._applied.items() if v[2] == (namespace, run)]:
                del self._applied[key]

    def forget_all(self) -> None:
        with self._guard:
            self._applied.clear()

    # --- Ray auth tokens ----------------------------------------------------------------------------
    def token(self, namespace: str, run: str, uid: str | None) -> str | None:
        """The run's token read within `token_seconds` for this very run (its uid), else None."""
        most = self.resync_seconds if self.token_seconds is None else self.token_seconds
        with self._guard:
            known = self._tokens.get((namespace, run))
        if known is not None and known[0] == uid and known[1] is not None and self.clock() - known[2] < most:
            return known[1]
        return None

    def remember_token(self, namespace: str, run: str, uid: str | None, token: str | None) -> None:
        with self._guard:
            self._tokens[(namespace, run)] = (uid, token, self.clock())

    def known_token(self, namespace: str, run: str) -> str | None:
        with self._guard:
            known = self._tokens.get((namespace, run))
        return known[1] if known is not None else None

    def forget_token(self, namespace: str, run: str) -> None:
        """The run is being deleted: its token goes, and no watch copy of it is taken again."""
        with self._guard:
            self._tokens.pop((namespace, run), None)
            self._versions[(namespace, run)] = _GONE
