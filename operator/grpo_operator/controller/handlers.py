"""kopf handlers: thin. Each event and each timer tick runs one level-triggered reconcile of the run.

Nothing happens at import: the startup handler reads the settings, binds the metrics port, makes the API
client, the reconciler and its pacing, keeps them in kopf's operator memo (`memo.operator`, passed to every
handler) and registers the timer at the settings' interval. A bad setting or a metrics port that cannot be
bound stops the operator there with one line and exit status 2.

kopf may run the create/update/resume handlers and the timer of one run at the same time (sync handlers go
to its thread pool); `Reconciler.reconcile` serialises them per run and writes the status with optimistic
concurrency, so the handlers need no coordination of their own. kopf keeps its bookkeeping in annotations,
never in `status`, which the API server would prune and which belongs to `GRPORun.status`.
Run with `python -m grpo_operator` (or `kopf run -m grpo_operator.controller.handlers`).
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import kopf
from kubernetes import client, config

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.runtime import RUNTIME_PLURAL
from grpo_operator.api.status import ConditionType, Phase, Reason
from grpo_operator.controller.children import Pacing, owner_body, resync_seconds
from grpo_operator.controller.config import OperatorSettings, SettingsError, load_settings
from grpo_operator.controller.reconciler import Outcome, Reconciler
from grpo_operator.edges import backoff
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.kubecache import KubeCache
from grpo_operator.edges.opmetrics import OperatorMetrics
from grpo_operator.edges.scrape import Scraper
from grpo_operator.edges.watchcache import WatchView, run_key, slim_cluster, slim_deployment, slim_pod, trimmed
from grpo_operator.planning.runtime import runtime_name
from grpo_operator.render import names

log = logging.getLogger("grpo_operator")

# An unchanged child is applied again every 10 resyncs (10 min by default): drift someone made in its spec is
# undone then; a deleted child at once (its watch event).
REAPPLY_RESYNCS = 10


@dataclass
class Operator:
    """What the startup handler makes, once per process."""

    settings: OperatorSettings
    metrics: OperatorMetrics
    kube: Kube
    reconciler: Reconciler
    pacing: Pacing


def _stop(line: str) -> NoReturn:
    """One line and exit status 2, before kopf has logged anything: no traceback, no retries."""
    print(f"grpo-operator: {line}", file=sys.stderr, flush=True)
    os._exit(2)  # kopf would catch SystemExit in its activity runner and retry the handler


def _api_client(workers: int) -> client.ApiClient:
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    # One pooled connection per worker thread: the client's default pool (5 per CPU) is smaller than the
    # executor on a small node, and a full pool drops a connection after each request (a new TLS handshake).
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, workers)
    return client.ApiClient(configuration)


def build(settings: OperatorSettings, metrics: OperatorMetrics) -> Operator:
    """The operator's parts, wired: one API client, one cache, one backoff for Ray heads, one for scrapes."""
    reapply = REAPPLY_RESYNCS * resync_seconds(settings)
    kube = Kube(_api_client(settings.workers), KubeCache(resync_seconds=reapply, token_seconds=reapply))
    # A run's Ray head that failed is retried after one reconcile interval, doubling up to four.
    ray_backoff = backoff.Backoff(first=settings.reconcile_interval_seconds, most=resync_seconds(settings))
    # A dry run the API server answered 5xx is retried on the same schedule.
    api_backoff = backoff.Backoff(first=settings.reconcile_interval_seconds, most=resync_seconds(settings))
    reconciler = Reconciler(
        kube=kube,
        settings=settings,
        ray_for=backoff.ray_for(ray_backoff),
        scraper=Scraper(),
        metrics=metrics,
        api_backoff=api_backoff,
    )
    pacing = Pacing(settings, kube.cache, ray_backoff, api_backoff=api_backoff)
    return Operator(settings, metrics, kube, reconciler, pacing)


def _configure_kopf(kopf_settings: kopf.OperatorSettings, settings: OperatorSettings) -> None:
    kopf_settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="grpo.dev")
    kopf_settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="grpo.dev")
    kopf_settings.posting.level = logging.WARNING
    # The namespaces to serve are given (--namespace/--all-namespaces) and the CRD is installed with the
    # chart: no cluster scan, so a namespaced install needs no cluster-wide read and starts at once.
    kopf_settings.scanning.disabled = True
    kopf_settings.watching.server_timeout = 300
    # Reconciles are sync handlers on kopf's thread pool: sized, so many runs share a bounded set of threads
    # (a slow Ray head or scrape is backed off per run and holds one thread at most once per backoff).
    kopf_settings.execution.max_workers = settings.workers
    # Two replicas (`--peering NAME`): kopf pauses every replica but the one of the highest priority; unique
    # priorities, so exactly one is active, and a silent one is presumed dead after `lifetime` seconds.
    if kopf_settings.peering.priority == 0:
        kopf_settings.peering.priority = secrets.randbelow(2**31 - 2) + 1
    kopf_settings.peering.lifetime = settings.peering_lifetime_seconds


# async: it runs on kopf's loop before any watch starts, so a refusal stops the process before any other work.
@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    try:
        operator_settings = load_settings(os.environ)
    except SettingsError as exc:
        _stop(str(exc))
    _configure_kopf(settings, operator_settings)
    metrics = OperatorMetrics()
    try:
        metrics.serve(operator_settings.metrics_port)
    except OSError as exc:
        _stop(
            f"GRPO_METRICS_PORT={operator_settings.metrics_port}: cannot listen for /metrics "
            f"({exc.strerror or exc}); free the port, or set GRPO_METRICS_PORT to another (0 disables it)"
        )
    memo.operator = build(operator_settings, metrics)
    # The first tick one interval after a run appears: its create (or resume) handler has reconciled it then.
    interval = operator_settings.reconcile_interval_seconds
    kopf.timer(GROUP, VERSION, PLURAL, interval=interval, sharp=False, initial_delay=interval)(on_timer)


def _operator(memo: Any) -> Operator:
    return cast(Operator, memo.operator)


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
    for reason, message in outcome.notes:  # kopf.info would drop them: posting.level keeps kopf's own logs off
        kopf.event(body, type="Normal", reason=reason, message=message[:1024])
    for reason, message in outcome.alerts:  # a warning of its own reason (RuntimeAltered), transition or not
        kopf.event(body, type="Warning", reason=reason, message=message[:1024])


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


def _reconcile(operator: Operator, body: kopf.Body, kwargs: dict[str, Any]) -> None:
    cache = operator.kube.cache
    if cache.view is None:  # the indices exist from the first handler call on
        cache.view = WatchView(
            runs=kwargs["grpo_runs"],
            clusters=kwargs["ray_clusters"],
            pods=kwargs["run_pods"],
            deployments=kwargs["reward_deployments"],
        )
    metrics = operator.metrics
    started = time.monotonic()
    try:
        outcome = operator.reconciler.reconcile(body)
    except Exception as exc:
        metrics.reconciles.labels("error").inc()
        # The error contract's last rule (edges/errors.py): what a reconcile did not expect is retried by kopf after
        # one line naming the run and the error, never a traceback per retry in the operator's log.
        meta = body["metadata"]
        said = f"{meta['namespace']}/{meta['name']}: reconcile not finished: {type(exc).__name__}: {exc}"
        log.warning("%s; retried in %.0f s", said[:2000], operator.settings.reconcile_interval_seconds)
        raise kopf.TemporaryError(said[:2000], delay=operator.settings.reconcile_interval_seconds) from None
    finally:
        metrics.reconcile_seconds.observe(time.monotonic() - started)
        operator.pacing.reconciled(body["metadata"]["namespace"], body["metadata"]["name"])
    metrics.reconciles.labels("ok").inc()
    _report(outcome, body)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def on_change(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    _reconcile(_operator(memo), body, kwargs)


def on_timer(body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    """Registered by `start` at the settings' interval."""
    operator = _operator(memo)
    if operator.pacing.due(body):  # children are watched: a tick polls Ray and the metrics (controller/children.py)
        _reconcile(operator, body, kwargs)


@kopf.on.event("ray.io", "v1", "rayclusters", labels={names.RUN_LABEL: kopf.PRESENT})
@kopf.on.event("apps", "v1", "deployments", labels={names.RUN_LABEL: kopf.PRESENT})
def on_child(body: kopf.Body, type: str | None, memo: kopf.Memo, **kwargs: Any) -> None:
    owner = owner_body(body)
    # None: the initial listing, which the runs' resume handles; ADDED: the child this operator has just applied
    # (only the reconcile creates children), which that reconcile has observed already.
    if owner is None or type in (None, "ADDED"):
        return
    operator = _operator(memo)
    meta = owner["metadata"]
    operator.pacing.child_changed(meta["namespace"], meta["name"], str(body.get("kind")), deleted=type == "DELETED")
    _reconcile(operator, cast(kopf.Body, owner), kwargs)


@kopf.on.event(GROUP, VERSION, RUNTIME_PLURAL)
def on_runtime(body: kopf.Body, type: str | None, memo: kopf.Memo, **kwargs: Any) -> None:
    """A GRPORuntime appeared or changed: the runs waiting for it start now (Pending/RuntimeNotFound, or held since
    their status.runtime failed its digest). A run planned already keeps its recorded copy (status.runtime), so
    nothing else is reconciled."""
    if type == "DELETED":
        return
    operator = _operator(memo)
    name = body.metadata.name
    for found in list(kwargs["grpo_runs"].values()):
        for run in list(found):
            if _waits_for_runtime(run.get("status") or {}) and runtime_name(run) == name:
                _reconcile(operator, cast(kopf.Body, run), kwargs)


def _waits_for_runtime(status: dict[str, Any]) -> bool:
    held = any(
        c.get("type") == ConditionType.VALIDATED and c.get("reason") == Reason.RUNTIME_ALTERED
        for c in status.get("conditions") or []
    )
    return held or status.get("reason") == Reason.RUNTIME_NOT_FOUND


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    operator = _operator(memo)
    operator.reconciler.stop_for_deletion(body)
    operator.pacing.forget(body["metadata"]["namespace"], body["metadata"]["name"])
