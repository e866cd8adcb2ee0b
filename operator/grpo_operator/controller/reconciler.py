"""One reconcile of one GRPORun: parse -> check (validate + plan, once) -> render -> apply -> submit -> observe -> status.

Level-triggered and idempotent: every call re-reads the world, so a crash at any point converges on the
next call. The decision is the pure `lifecycle.decide`; this module only gathers the observation and
carries out the actions (apply, submit, stop, delete, patch status).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import RewardType
from grpo_operator.api.status import TERMINAL_PHASES, GRPORunStatus, Phase, RunPlan
from grpo_operator.cli.loading import parse_run
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.edges import childstate, endpoints, opmetrics, scrape
from grpo_operator.edges.kube import Kube
from grpo_operator.edges.rayjobs import RayJobs, RayUnavailable
from grpo_operator.planning.validation import check, errors
from grpo_operator.render import MissingRewardImage, Rendered, names, queueing, render
from grpo_operator.render.job import checkpoint_request
from grpo_operator.status.lifecycle import Decision, decide
from grpo_operator.status.observation import JobObservation, JobState, Observation, TrainerMetrics

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a reconcile did, for events and logs."""

    previous: Phase | None
    status: GRPORunStatus
    warnings: list[str] = field(default_factory=list)

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

    def reconcile(self, body: Mapping[str, Any]) -> Outcome:
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
        if run is None or rendered is None:
            decision = decide(prev, Observation(now=now, generation=generation, problems=tuple(problems)), None)
            return self._finish(namespace, name, body, prev, decision)

        submission_id = self._submission_id(prev, run)
        terminal = prev is not None and prev.phase in TERMINAL_PHASES
        # Before any child: the Ray pods start only with the token Secret they reference.
        token = self.kube.ray_auth_token(namespace, name, run.metadata.uid, create=not terminal)
        ray = self.ray_for(endpoints.ray_address(namespace, name, self.settings), token)
        if prev is not None and terminal:
            self._wind_down(run, ray, prev)
            return Outcome(previous=prev.phase, status=prev)
        if not run.spec.suspend:
            self._apply_children(run, rendered)
        obs = self._observe(run, ray, submission_id, plan=rendered.plan, prev=prev, now=now, generation=generation)
        decision = decide(prev, obs, run.spec)
        decision = self._act(decision, run, rendered, ray, submission_id)
        return self._finish(namespace, name, body, prev, decision)

    def _apply_children(self, run: GRPORun, rendered: Rendered) -> None:
        """Every child in place; under a Kueue queue the RayCluster is created suspended and the reward
        Deployment waits for the admission (render/queueing.apply_steps)."""
        cluster = self.kube.ray_cluster(run.metadata.namespace, run.metadata.name) if queueing.queued(run) else None
        admitted = cluster is not None and childstate.admission_queue(cluster) is None
        for how, child in queueing.apply_steps(run, rendered.children, cluster_exists=cluster is not None,
                                               admitted=admitted):  # fmt: skip
            if how == "create":
                self.kube.create(child)
            else:
                self.kube.apply(child)

    # --- observation -------------------------------------------------------------------------------
    def _submission_id(self, prev: GRPORunStatus | None, run: GRPORun) -> str:
        if prev is not None and prev.job_submission_id and prev.phase is not Phase.SUSPENDED:
            return prev.job_submission_id
        meta = run.metadata
        return names.submission_id(meta.name, meta.uid or "nouid", meta.generation or 1)

    def _observe(self, run: GRPORun, ray: RayJobs, submission_id: str, *, plan: RunPlan,
                 prev: GRPORunStatus | None, now: datetime, generation: int) -> Observation:  # fmt: skip
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
        metrics = self._trainer_metrics(job, name)
        checkpoint_job = None
        if run.spec.suspend and prev is not None and prev.suspend_requested_time:
            try:
                found = ray.find(f"{submission_id}-save")
                checkpoint_job = found.state if found else None
            except RayUnavailable as exc:
                log.info("%s/%s: %s", ns, name, exc)
        return Observation(now=now, generation=generation, plan=plan, suspend=run.spec.suspend, cluster=cluster,
                           reward=reward, reward_required=remote, job=job, checkpoint_job=checkpoint_job,
                           metrics=metrics)  # fmt: skip

    def _reward_error_ratio(self, namespace: str, name: str) -> float | None:
        url = endpoints.reward_metrics_url(namespace, name, self.settings)
        try:
            return scrape.reward_error_ratio(scrape.fetch(url, self.settings.http_timeout_seconds))
        except scrape.ScrapeError as exc:
            opmetrics.SCRAPE_ERRORS.labels("reward").inc()
            log.info("%s/%s reward metrics: %s", namespace, name, exc)
            return None

    def _trainer_metrics(self, job: JobObservation | None, name: str) -> TrainerMetrics | None:
        if job is None or job.driver_ip is None or job.state not in (JobState.RUNNING, JobState.SUCCEEDED):
            return None
        url = endpoints.trainer_metrics_url(job.driver_ip, self.settings)
        try:
            return scrape.trainer_metrics(scrape.fetch(url, self.settings.http_timeout_seconds), name)
        except scrape.ScrapeError as exc:
            opmetrics.SCRAPE_ERRORS.labels("trainer").inc()
            log.info("%s trainer metrics: %s", name, exc)
            return None

    # --- actions -----------------------------------------------------------------------------------
    def _act(self, decision: Decision, run: GRPORun, rendered: Rendered, ray: RayJobs, submission_id: str) -> Decision:
        ns, name = run.metadata.namespace, run.metadata.name
        status = decision.status
        if decision.stop_job:
            ray.stop(submission_id)
            if status.phase is Phase.FAILED and status.reason:
                opmetrics.GUARD_TRIPS.labels(ns, name, status.reason).inc()
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
            status = status.model_copy(update={
                "job_submission_id": observed.submission_id,
                "job_status": observed.state.value,
                "ray_cluster_name": names.ray_cluster(name),
                "message": f"submitted Ray job {observed.submission_id}",
            })  # fmt: skip
        return dataclasses.replace(decision, status=status)

    def _finish(self, namespace: str, name: str, body: Mapping[str, Any], prev: GRPORunStatus | None,
                decision: Decision) -> Outcome:  # fmt: skip
        patch = status_patch(body.get("status"), decision.status)
        if patch is not None:
            self.kube.patch_status(namespace, name, patch)
        opmetrics.RUNS.update(namespace, name, decision.status)
        return Outcome(previous=prev.phase if prev else None, status=decision.status, warnings=decision.warnings)

    def _wind_down(self, run: GRPORun, ray: RayJobs, prev: GRPORunStatus) -> None:
        """A finished run keeps its status and gives its GPUs back: stop the job if it still runs, then delete
        the RayCluster."""
        ns, name = run.metadata.namespace, run.metadata.name
        opmetrics.RUNS.update(ns, name, prev)
        if self.kube.ray_cluster(ns, name) is None:
            return
        job = None
        if prev.job_submission_id:
            try:
                job = ray.find(prev.job_submission_id)
            except RayUnavailable as exc:
                log.info("%s/%s: %s", ns, name, exc)
        if job is not None and job.state.active:
            ray.stop(job.submission_id)
            return  # delete the cluster once the job has stopped
        self.kube.delete_ray_cluster(ns, name)

    # --- deletion ----------------------------------------------------------------------------------
    def stop_for_deletion(self, body: Mapping[str, Any]) -> None:
        """Stop the Ray job before the children go (they follow by owner reference)."""
        meta = body["metadata"]
        prev = previous_status(body)
        opmetrics.RUNS.forget(meta["namespace"], meta["name"])
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
