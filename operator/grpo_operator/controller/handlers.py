"""kopf handlers: thin. Each event and each timer tick runs one level-triggered reconcile of the run.

Run with `kopf run -m grpo_operator.controller.handlers` (or `python -m grpo_operator`). kopf keeps its bookkeeping in
annotations, never in `status`, which the API server would prune and which belongs to `GRPORun.status`.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import kopf
from kubernetes import client, config

from grpo_operator.api import GROUP, PLURAL, VERSION
from grpo_operator.api.status import Phase
from grpo_operator.controller.config import SettingsError, load_settings
from grpo_operator.controller.reconciler import Outcome, Reconciler
from grpo_operator.edges import opmetrics
from grpo_operator.edges.kube import Kube

log = logging.getLogger("grpo_operator")

try:
    SETTINGS = load_settings(os.environ)
except SettingsError as _exc:
    print(f"grpo-operator: {_exc}", file=sys.stderr)
    raise SystemExit(2) from None

try:  # bound before kopf starts: a port that cannot be bound stops the process with one line
    opmetrics.serve(SETTINGS.metrics_port)
except OSError as _exc:
    print(f"grpo-operator: GRPO_METRICS_PORT={SETTINGS.metrics_port}: cannot listen for /metrics "
          f"({_exc.strerror or _exc}); free the port, or set GRPO_METRICS_PORT to another (0 disables it)",
          file=sys.stderr)  # fmt: skip
    raise SystemExit(2) from None

_reconciler: Reconciler | None = None


def reconciler() -> Reconciler:
    global _reconciler  # noqa: PLW0603 - one API client per process, made after kopf has logged in
    if _reconciler is None:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        _reconciler = Reconciler(kube=Kube(client.ApiClient()), settings=SETTINGS)
    return _reconciler


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="grpo.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="grpo.dev")
    settings.posting.level = logging.WARNING
    # The namespaces to serve are given (--namespace/--all-namespaces) and the CRD is installed with the
    # chart: no cluster scan, so a namespaced install needs no cluster-wide read and starts at once.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300


def _report(outcome: Outcome, body: kopf.Body) -> None:
    status = outcome.status
    if outcome.transitioned and status.phase is not None:
        kind = "Warning" if status.phase is Phase.FAILED else "Normal"
        kopf.event(body, type=kind, reason=status.reason or status.phase.value,
                   message=f"{status.phase.value}: {status.message or ''}"[:1024])  # fmt: skip
    for warning in outcome.warnings:
        if not outcome.transitioned:
            kopf.warn(body, reason="Guard", message=warning[:1024])


def _reconcile(body: kopf.Body) -> None:
    started = time.monotonic()
    try:
        outcome = reconciler().reconcile(body)
    except Exception:
        opmetrics.RECONCILES.labels("error").inc()
        raise
    finally:
        opmetrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
    opmetrics.RECONCILES.labels("ok").inc()
    _report(outcome, body)


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
def on_change(body: kopf.Body, **_: Any) -> None:
    _reconcile(body)


@kopf.timer(GROUP, VERSION, PLURAL, interval=SETTINGS.reconcile_interval_seconds, sharp=False)
def on_timer(body: kopf.Body, **_: Any) -> None:
    _reconcile(body)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def on_delete(body: kopf.Body, **_: Any) -> None:
    reconciler().stop_for_deletion(body)
