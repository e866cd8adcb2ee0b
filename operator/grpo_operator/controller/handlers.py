"""kopf handlers: thin. Each event and each timer tick runs one level-triggered reconcile of the run.

kopf may run the create/update/resume handlers and the timer of one run at the same time (sync handlers go
to its thread pool); `Reconciler.reconcile` serialises them per run and writes the status with optimistic
concurrency, so the handlers need no coordination of their own.

Run with `kopf run -m grpo_operator.controller.handlers` (or `python -m grpo_operator`). kopf keeps its bookkeeping in
annotations, never in `status`, which the API server would prune and which belongs to `GRPORun.status`.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from typing import Any, cast

import kopf
from kubernetes import client, config

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.status import Phase
from grpo_operator.controller.children import Pacing, owner_body, resync_seconds
from grpo_operator.controller.config import SettingsError, load_settings
from grpo_operator.controller.reconciler import Outcome, Reconciler
from grpo_operator.edges import backoff, opmetrics
from grpo_operator.edges.kubecache import CachingKube
from grpo_operator.edges.watchcache import WatchView, run_key, slim_cluster, slim_deployment, slim_pod, trimmed
from grpo_operator.render import names

log = logging.getLogger("grpo_operator")

try:
    SETTINGS = load_settings(os.environ)
except SettingsError as _exc:
    print(f"grpo-operator: {_exc}", file=sys.stderr)
    raise SystemExit(2) from None

try:  # bound before kopf starts: a port that cannot be bound stops the process with one line
    opmetrics.serve(SETTINGS.metrics_port)
except OSError as _exc:
    print(
        f"grpo-operator: GRPO_METRICS_PORT={SETTINGS.metrics_port}: cannot listen for /metrics "
        f"({_exc.strerror or _exc}); free the port, or set GRPO_METRICS_PORT to another (0 disables it)",
        file=sys.stderr,
    )
    raise SystemExit(2) from None

_reconciler: Reconciler | None = None
_pacing: Pacing | None = None
# An unchanged child is applied again every 10 resyncs (10 min by default): drift someone made in its spec is
# undone then; a deleted child at once (its watch event).
REAPPLY_RESYNCS = 10
# A run's Ray head that failed is retried after one reconcile interval, doubling up to four (edges/backoff.py).
RAY_BACKOFF = backoff.Backoff(first=SETTINGS.reconcile_interval_seconds, most=resync_seconds(SETTINGS))


def reconciler() -> Reconciler:
    global _reconciler, _pacing  # noqa: PLW0603 - one API client per process, made after kopf has logged in
    if _reconciler is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        # One pooled connection per worker thread: the client's default pool (5 per CPU) is smaller than the
        # executor on a small node, and a full pool drops a connection after each request (a new TLS handshake).
        configuration = client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, SETTINGS.workers)
        kube = CachingKube(
            client.ApiClient(configuration),
            resync_seconds=REAPPLY_RESYNCS * resync_seconds(SETTINGS),
            token_seconds=REAPPLY_RESYNCS * resync_seconds(SETTINGS),
        )
        _pacing = Pacing(SETTINGS, kube, RAY_BACKOFF)
        _reconciler = Reconciler(kube=kube, settings=SETTINGS, ray_for=backoff.ray_for(RAY_BACKOFF))
    return _reconciler


def pacing() -> Pacing:
    reconciler()
    assert _pacing is not None
    return _pacing


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="grpo.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="grpo.dev")
    settings.posting.level = logging.WARNING
    # The namespaces to serve are given (--namespace/--all-namespaces) and the CRD is installed with the
    # chart: no cluster scan, so a namespaced install needs no cluster-wide read and starts at once.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    # Reconciles are sync handlers on kopf's thread pool: sized, so many runs share a bounded set of threads
    # (a slow Ray head or scrape is backed off per run and holds one thread at most once per backoff).
    settings.execution.max_workers = SETTINGS.workers
    # Two replicas (chart `replicas: 2`, `--peering NAME` instead of `--standalone`): kopf's peering pauses every
    # replica but the one of the highest priority; unique priorities, so exactly one is active. A replica
    # killed without notice is presumed dead `lifetime` seconds after its last keep-alive, then the next
    # takes over (kopf/_core/engines/peering.py process_peering_event, keepalive).
    if settings.peering.priority == 0:
        settings.peering.priority = secrets.randbelow(2**31 - 2) + 1
    settings.peering.lifetime = SETTINGS.peering_lifetime_seconds


def _report(outcome: Outcome, body: kopf.Body) -> None:
    status = outcome.status
    if outcome.transitioned and status.phase is not None:
        kind = "Warning" if status.phase is Phase.FAILED else "Normal"
        kopf.event(
            body,
            type=kind,
            reason=status.reason or status.phase.value,
            message=f"{status.phase.value}: {status.message or ''}"[:1024],
        )
    for warning in outcome.warnings:
        if not outcome.transitioned:
            kopf.warn(body, reason="Guard", message=warning[:1024])
    for reason, message in outcome.notes:
        kopf.info(body, reason=reason, message=message[:1024])


# The runs and their children as the watches see them (edges/watchcache.py): a reconcile reads them from here
# instead of a GET or LIST each. kopf fills these before it calls any other handler, and passes them to every
# handler by name.
@kopf.index(GROUP, VERSION, PLURAL)
def grpo_runs(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(body.metadata.namespace, body.metadata.name): trimmed(body)}


@kopf.index("ray.io", "v1", "rayclusters", labels={names.RUN_LABEL: kopf.PRESENT})
def ray_clusters(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = run_key(body)
    return {key: slim_cluster(body)} if key else {}


@kopf.index("v1", "pods", labels={names.RUN_LABEL: kopf.PRESENT})
def run_pods(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = run_key(body)
    return {key: slim_pod(body)} if key else {}


@kopf.index("apps", "v1", "deployments", labels={names.RUN_LABEL: kopf.PRESENT})
def reward_deployments(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    key = run_key(body)
    return {key: slim_deployment(body)} if key else {}


def _watched(kwargs: dict[str, Any]) -> None:
    kube = reconciler().kube
    if isinstance(kube, CachingKube) and kube.view is None:
        kube.view = WatchView(
            runs=kwargs["grpo_runs"],
            clusters=kwargs["ray_clusters"],
            pods=kwargs["run_pods"],
            deployments=kwargs["reward_deployments"],
        )


def _reconcile(body: kopf.Body, kwargs: dict[str, Any]) -> None:
    started = time.monotonic()
    _watched(kwargs)
    try:
        outcome = reconciler().reconcile(body)
    except Exception:
        opmetrics.RECONCILES.labels("error").inc()
        raise
    finally:
        opmetrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        pacing().reconciled(body["metadata"]["namespace"], body["metadata"]["name"])
    opmetrics.RECONCILES.labels("ok").inc()
    _report(outcome, body)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def on_change(body: kopf.Body, **kwargs: Any) -> None:
    _reconcile(body, kwargs)


# The first tick one interval after a run appears: its create (or resume) handler has reconciled it just then.
@kopf.timer(
    GROUP,
    VERSION,
    PLURAL,
    interval=SETTINGS.reconcile_interval_seconds,
    sharp=False,
    initial_delay=SETTINGS.reconcile_interval_seconds,
)
def on_timer(body: kopf.Body, **kwargs: Any) -> None:
    if pacing().due(body):  # children are watched: a tick polls Ray and the metrics (controller/children.py)
        _reconcile(body, kwargs)


@kopf.on.event("ray.io", "v1", "rayclusters", labels={names.RUN_LABEL: kopf.PRESENT})
@kopf.on.event("apps", "v1", "deployments", labels={names.RUN_LABEL: kopf.PRESENT})
def on_child(body: kopf.Body, type: str | None, **kwargs: Any) -> None:
    owner = owner_body(body)
    # None: the initial listing, which the runs' resume handles; ADDED: the child this operator has just applied
    # (only the reconcile creates children), which that reconcile has observed already.
    if owner is None or type in (None, "ADDED"):
        return
    meta = owner["metadata"]
    pacing().child_changed(meta["namespace"], meta["name"], str(body.get("kind")), deleted=type == "DELETED")
    _reconcile(cast(kopf.Body, owner), kwargs)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_delete(body: kopf.Body, **_: Any) -> None:
    reconciler().stop_for_deletion(body)
    pacing().forget(body["metadata"]["namespace"], body["metadata"]["name"])
