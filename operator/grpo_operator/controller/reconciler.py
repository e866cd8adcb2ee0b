"""One reconcile of one GRPORun: parse -> check (validate + plan, once) -> render -> apply -> submit -> observe -> status.

Level-triggered and idempotent: every call re-reads the world, so a crash at any point converges on the
next call. The decision is the pure `lifecycle.decide`; this module only gathers the observation and
carries out the actions (apply, submit, stop, delete, keep the job's log tail, patch status).

One reconcile at a time per run: kopf runs the create/update/resume handlers and the timer of one object
concurrently (sync handlers on its thread pool), so `reconcile` holds a per-run lock, starts from the newest
version of the run this process knows (the operator's watch of the runs when it holds the version this process
last wrote or read, else a GET: edges/kubecache.py `get_run`; never kopf's handler body, which may predate our
last status write), and writes the status with that object's resourceVersion: a status written meanwhile makes
the write fail with 409 and the reconcile start over from a GET of the newer one, so no update (e.g. the
repetition streak) is silently lost.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import RewardType
from grpo_operator.api.status import TERMINAL_PHASES, GRPORunStatus, Phase, RunLogs, RunPlan
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges import childstate, endpoints, scrape
from grpo_operator.edges.kube import Kube, StatusConflict
from grpo_operator.edges.opmetrics import OperatorMetrics
from grpo_operator.edges.rayjobs import RayJobs, RayUnavailable
from grpo_operator.planning.documents import parse_run
from grpo_operator.planning.validation import check, errors
from grpo_operator.render import MissingRewardImage, Rendered, names, queueing, render
from grpo_operator.render.job import checkpoint_request
from grpo_operator.render.joblogs import job_logs_config_map
from grpo_operator.status import summary
from grpo_operator.status.lifecycle import Decision, decide, new_attempt
from grpo_operator.status.observation import JobObservation, JobState, Observation, TrainerMetrics

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a reconcile did, for events and logs."""

    previous: Phase | None
    status: GRPORunStatus
    warnings: list[str] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) of Normal events

    @property
    def transitioned(self) -> bool:
        return self.previous != self.status.phase


def previous_status(body: Mapping[str, Any]) -> GRPORunStatus | None:
    raw = body.get("status")
    if not raw:
        return None
    known = {k: v for k, v in raw.items() if k in GRPORunStatus.model_fields or k in _STATUS_ALIASES}
    try:
        return GRPORunStatus.model_validate_json(json.dumps(known))
    except ValidationError:
        log.warning("ignoring an unreadable status of %s", body.get("metadata", {}).get("name"))
        return None


_STATUS_ALIASES = {info.alias for info in GRPORunStatus.model_fields.values() if info.alias}


def status_patch(old: Mapping[str, Any] | None, new: GRPORunStatus) -> dict[str, Any] | None:
    """A merge patch turning `old` into `new`, or None when nothing changed."""
    wanted = new.model_dump(mode="json", by_alias=True)
    current = dict(old or {})
    if {k: v for k, v in wanted.items() if v is not None} == {k: v for k, v in current.items() if v is not None}:
        return None
    patch = dict(wanted)
    for key in current:
        patch.setdefault(key, None)
    return patch


@dataclass
class Reconciler:
    kube: Kube
    settings: OperatorSettings
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    ray_for: Callable[[str, str | None], RayJobs] = field(default=RayJobs)  # (Jobs API address, auth token)
    scraper: scrape.Scraper = field(default_factory=scrape.Scraper)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)

    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict, init=False, repr=False)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    conflict_retries: int = 5

    def reconcile(self, body: Mapping[str, Any]) -> Outcome:
        """One reconcile of the run `body` names, serialised per run and started from the API server's copy."""
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._locks_guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            for attempt in range(self.conflict_retries):
                # The watch's copy first (edges/kubecache.py: only when no newer one is known); a GET after a 409.
                current = self.kube.get_run(*key) if attempt == 0 else self.kube.get_run_fresh(*key)
                if current is None:  # deleted meanwhile: nothing to do, nothing to report
                    last = previous_status(body) or GRPORunStatus()
                    return Outcome(previous=last.phase, status=last)
                try:
                    return self._reconcile_once(current)
                except StatusConflict:
                    log.info("%s/%s: the status changed meanwhile; reconciling again from the newer one", *key)
            raise StatusConflict(f"{key[0]}/{key[1]}: status kept changing under {self.conflict_retries} reconciles")

    def forget(self, namespace: str, name: str) -> None:
        with self._locks_guard:
            self._locks.pop((namespace, name), None)

    def _reconcile_once(self, body: Mapping[str, Any]) -> Outcome:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        generation = int(meta.get("generation") or 1)
        prev = previous_status(body)
        now = self.clock()
        doc = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
        run, structural = parse_run(doc)
        problems = [str(p) for p in structural]
        rendered: Rendered | None = None
        if run is not None:
            checked = check(run)  # the plan is made once per reconcile, here
            problems += [str(p) for p in errors(checked.problems)]
            if not problems and checked.plan is not None:
                try:
                    rendered = render(run, checked.plan, self.settings.render)
                except MissingRewardImage as exc:
                    problems.append(str(exc))
            if rendered is not None:  # Kubernetes' own pod rules, before any child exists
                problems += self.kube.pod_template_problems(namespace, rendered.children)
                rendered = None if problems else rendered
        if run is None or rendered is None:
            decision = decide(prev, Observation(now=now, generation=generation, problems=tuple(problems)), None)
            return self._finish(namespace, name, body, prev, decision)

        submission_id = self._submission_id(prev, run)
        terminal = prev is not None and prev.phase in TERMINAL_PHASES
        # Before any child: the Ray pods start only with the token Secret they reference.
        token = self.kube.ray_auth_token(namespace, name, run.metadata.uid, create=not terminal)
        ray = self.ray_for(endpoints.ray_address(namespace, name, self.settings), token)
        if prev is not None and terminal:
            logs = self._wind_down(run, ray, prev)
            decision = decide(prev, Observation(now=now, generation=generation, logs=logs), run.spec)
            return self._finish(namespace, name, body, prev, decision)
        if not run.spec.suspend:
            self._apply_children(run, rendered)
        obs = self._observe(run, ray, submission_id, plan=rendered.plan, prev=prev, now=now, generation=generation)
        obs = self._ended(run, ray, obs)
        decision = decide(prev, obs, run.spec)
        decision = self._act(decision, run, rendered, ray, submission_id)
        return self._finish(namespace, name, body, prev, decision)

    def _apply_children(self, run: GRPORun, rendered: Rendered) -> None:
        """Every child in place; under a Kueue queue the RayCluster is created suspended and the reward
        Deployment waits for the admission (render/queueing.apply_steps)."""
        cluster = self.kube.ray_cluster(run.metadata.namespace, run.metadata.name) if queueing.queued(run) else None
        admitted = cluster is not None and childstate.admission_queue(cluster) is None
        for how, child in queueing.apply_steps(
            run, rendered.children, cluster_exists=cluster is not None, admitted=admitted
        ):
            if how == "create":
                self.kube.create(child)
            else:
                self.kube.apply(child)

    # --- observation -------------------------------------------------------------------------------
    def _submission_id(self, prev: GRPORunStatus | None, run: GRPORun) -> str:
        if prev is not None and prev.job_submission_id and prev.phase is not Phase.SUSPENDED:
            return prev.job_submission_id
        meta = run.metadata
        first = names.submission_id(meta.name, meta.uid or "nouid", meta.generation or 1)
        # A later attempt of the same generation (the resume after a Kueue preemption, which edits no spec) needs an
        # id of its own: the Ray head, or its GCS store, may still know the stopped job by the earlier one. Still
        # deterministic: the attempt count moves only with the status write after a submission.
        return f"{first}-a{prev.attempt + 1}" if prev is not None and prev.attempt else first

    def _observe(
        self,
        run: GRPORun,
        ray: RayJobs,
        submission_id: str,
        *,
        plan: RunPlan,
        prev: GRPORunStatus | None,
        now: datetime,
        generation: int,
    ) -> Observation:
        ns, name = run.metadata.namespace, run.metadata.name
        cluster_obj = self.kube.ray_cluster(ns, name)
        pods = self.kube.run_pods(ns, name) if cluster_obj is not None else []
        cluster = childstate.cluster_observation(cluster_obj, plan.worker_replicas, pods)
        remote = run.spec.reward.type is RewardType.REMOTE
        reward = None
        if remote:
            deployment = self.kube.reward_deployment(ns, name)
            ratio = self._reward_error_ratio(ns, name) if deployment is not None else None
            reward = childstate.reward_observation(deployment, ratio, self.settings.reward_error_ratio_max)
        job: JobObservation | None = None
        if (cluster is not None and cluster.ready) or (prev is not None and prev.job_submission_id):
            try:
                job = ray.find(submission_id)
            except RayUnavailable as exc:
                log.info("%s/%s: %s", ns, name, exc)
        metrics, metrics_error = self._trainer_metrics(job, name)
        image, image_id = childstate.trainer_image(pods)
        checkpoint_job = None
        if run.spec.suspend and prev is not None and prev.suspend_requested_time:
            try:
                found = ray.find(f"{submission_id}-save")
                checkpoint_job = found.state if found else None
            except RayUnavailable as exc:
                log.info("%s/%s: %s", ns, name, exc)
        return Observation(
            now=now,
            generation=generation,
            plan=plan,
            suspend=run.spec.suspend,
            cluster=cluster,
            reward=reward,
            reward_required=remote,
            job=job,
            checkpoint_job=checkpoint_job,
            metrics=metrics,
            metrics_error=metrics_error,
            trainer_image=image,
            trainer_image_id=image_id,
        )

    def _ended(self, run: GRPORun, ray: RayJobs, obs: Observation) -> Observation:
        """Once the job has ended: keep its log tail (before anything deletes the RayCluster) and read the
        launcher's end-of-run summary from it."""
        if obs.job is None or obs.job.state.active:
            return obs
        text, logs = self._keep_logs(run, ray, obs.job.submission_id)
        parsed = summary.parse(text) if text is not None else None
        return dataclasses.replace(obs, summary=parsed, logs=logs)

    def _keep_logs(self, run: GRPORun, ray: RayJobs, submission_id: str) -> tuple[str | None, RunLogs | None]:
        ns, name = run.metadata.namespace, run.metadata.name
        try:
            text = ray.logs(submission_id)
        except RayUnavailable as exc:
            log.info("%s/%s: the log of %s cannot be read: %s", ns, name, submission_id, exc)
            return None, None
        manifest, ref = job_logs_config_map(ns, name, run.metadata.uid, submission_id, text)
        self.kube.apply(manifest)
        return text, ref

    def _reward_error_ratio(self, namespace: str, name: str) -> float | None:
        url = endpoints.reward_metrics_url(namespace, name, self.settings)
        try:
            return scrape.reward_error_ratio(self.scraper.fetch(url, self.settings.http_timeout_seconds))
        except scrape.ScrapeError as exc:
            self.metrics.scrape_errors.labels("reward").inc()
            log.info("%s/%s reward metrics: %s", namespace, name, exc)
            return None

    def _trainer_metrics(self, job: JobObservation | None, name: str) -> tuple[TrainerMetrics | None, str | None]:
        """The trainer's gauges, or why they could not be read; (None, None) when there is nothing to scrape."""
        if job is None or job.driver_ip is None or job.state is not JobState.RUNNING:
            return None, None
        url = endpoints.trainer_metrics_url(job.driver_ip, self.settings)
        try:
            return scrape.trainer_metrics(self.scraper.fetch(url, self.settings.http_timeout_seconds), name), None
        except scrape.ScrapeError as exc:
            self.metrics.scrape_errors.labels("trainer").inc()
            log.info("%s trainer metrics: %s", name, exc)
            return None, str(exc)

    # --- actions -----------------------------------------------------------------------------------
    def _act(self, decision: Decision, run: GRPORun, rendered: Rendered, ray: RayJobs, submission_id: str) -> Decision:
        ns, name = run.metadata.namespace, run.metadata.name
        status = decision.status
        if decision.stop_job:
            ray.stop(submission_id)
        if decision.request_checkpoint:
            try:
                ray.submit(checkpoint_request(run, rendered.plan, self.settings.render, submission_id))
            except RayUnavailable as exc:
                log.info("%s/%s: checkpoint request not sent: %s", ns, name, exc)
        if decision.delete_cluster:
            self.kube.delete_ray_cluster(ns, name)
        if decision.submit_job:
            job = dataclasses.replace(rendered.job, submission_id=submission_id)
            try:
                observed = ray.submit(job)
            except RayUnavailable as exc:
                return dataclasses.replace(decision, status=status.model_copy(update={"message": str(exc)}))
            # A new attempt only for a job this status does not know: when a Ray API hiccup hid the current job,
            # the submit finds that job again, and its guard state (e.g. the repetition streak) must stay.
            known = observed.submission_id == status.job_submission_id
            status = (
                status.model_copy(update={"job_status": observed.state.value})
                if known
                else new_attempt(status, observed.submission_id, observed.state)
            ).model_copy(
                update={
                    "ray_cluster_name": names.ray_cluster(name),
                    "message": f"submitted Ray job {observed.submission_id}",
                }
            )
        return dataclasses.replace(decision, status=status)

    def _finish(
        self, namespace: str, name: str, body: Mapping[str, Any], prev: GRPORunStatus | None, decision: Decision
    ) -> Outcome:
        patch = status_patch(body.get("status"), decision.status)
        if patch is not None:
            self.kube.patch_status(namespace, name, patch, resource_version=body["metadata"].get("resourceVersion"))
        self.metrics.runs.update(namespace, name, decision.status)
        notes = []
        logs = decision.status.logs
        if logs is not None and (prev is None or prev.logs != logs):
            notes.append(
                (
                    "LogsKept",
                    f"the log tail of Ray job {logs.submission_id} ({logs.bytes} bytes"
                    f"{', truncated' if logs.truncated else ''}) is kept in ConfigMap "
                    f"{logs.config_map}, key {logs.key}",
                )
            )
        return Outcome(
            previous=prev.phase if prev else None, status=decision.status, warnings=decision.warnings, notes=notes
        )

    def _wind_down(self, run: GRPORun, ray: RayJobs, prev: GRPORunStatus) -> RunLogs | None:
        """A finished run keeps its status and gives its GPUs back: stop the job if it still runs, keep its log
        tail unless that is done, then delete the RayCluster. Returns where the log tail was kept now."""
        ns, name = run.metadata.namespace, run.metadata.name
        self.metrics.runs.update(ns, name, prev)
        if self.kube.ray_cluster(ns, name) is None:
            return None
        job = None
        if prev.job_submission_id:
            try:
                job = ray.find(prev.job_submission_id)
            except RayUnavailable as exc:
                log.info("%s/%s: %s", ns, name, exc)
        if job is not None and job.state.active:
            ray.stop(job.submission_id)
            return None  # delete the cluster once the job has stopped
        logs = None
        if prev.logs is None and prev.job_submission_id:
            _, logs = self._keep_logs(run, ray, prev.job_submission_id)
        self.kube.delete_ray_cluster(ns, name)
        return logs

    # --- deletion ----------------------------------------------------------------------------------
    def stop_for_deletion(self, body: Mapping[str, Any]) -> None:
        """Stop the Ray job before the children go (they follow by owner reference)."""
        meta = body["metadata"]
        prev = previous_status(body)
        self.metrics.runs.forget(meta["namespace"], meta["name"])
        self.forget(meta["namespace"], meta["name"])
        if prev is None or not prev.job_submission_id:
            return
        token = self.kube.ray_auth_token(meta["namespace"], meta["name"], meta.get("uid"), create=False)
        ray = self.ray_for(endpoints.ray_address(meta["namespace"], meta["name"], self.settings), token)
        try:
            job = ray.find(prev.job_submission_id)
        except RayUnavailable as exc:
            log.info("not stopping %s: %s", prev.job_submission_id, exc)
            return
        if job is not None and job.state.active:
            ray.stop(prev.job_submission_id)
