"""One reconcile of one GRPORun: parse, check (the plan once), render, observe, `decide`, carry out the decision's
actions in order, write the status once. Level-triggered and idempotent: every call re-reads the world, so a
crash at any point converges on the next call. One reconcile at a time per run, started from the newest version
of the run this process knows (edges/kubecache.py `get_run`), and the status is written with that version's
resourceVersion: a status written meanwhile fails the write with 409 and the reconcile starts over from a GET,
so no update (e.g. the repetition streak) is silently lost. The runtime copy in `status.runtime` is used only when
its digest, sealed with the operator's key in that same write, verifies (`controller/runtimes.py`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grpo_operator.api import GRPORun
from grpo_operator.api.runtime import GRPORuntime, RuntimeRecord
from grpo_operator.api.spec import RewardType
from grpo_operator.api.status import KUEUE_EVICTIONS, TERMINAL_PHASES, GRPORunStatus, Phase, Reason
from grpo_operator.controller.config import OperatorSettings
from grpo_operator.controller.intent import intent_of
from grpo_operator.controller.runtimes import RuntimeFound, Runtimes
from grpo_operator.edges import childstate, endpoints, scrape
from grpo_operator.edges.backoff import Backoff, dry_run_key
from grpo_operator.edges.errors import Unavailable
from grpo_operator.edges.kube import ChildRefused, Kube, StatusConflict
from grpo_operator.edges.opmetrics import OperatorMetrics
from grpo_operator.edges.rayjobs import RayJobs, RayUnavailable
from grpo_operator.edges.stackslog import TAIL_PIECES
from grpo_operator.planning import grace
from grpo_operator.planning.documents import parse_run
from grpo_operator.planning.runtime import record_of
from grpo_operator.planning.validation import check, errors
from grpo_operator.render import MissingRewardImage, Rendered, names, queueing, render
from grpo_operator.render.evidence import evidence_config_map
from grpo_operator.render.job import checkpoint_request, stacks_job
from grpo_operator.render.joblogs import KEY as LOG_KEY
from grpo_operator.render.joblogs import job_logs_config_map
from grpo_operator.render.raycluster import ptrace_granted
from grpo_operator.render.redaction import redact, run_secrets
from grpo_operator.status import admission, attempts, summary
from grpo_operator.status.decision import (
    Action,
    ApplyChildren,
    CaptureEvidence,
    CreateTokenSecret,
    Decision,
    DeleteRayCluster,
    KeepLogs,
    RequestCheckpoint,
    StopJob,
    Submit,
)
from grpo_operator.status.intent import Intent, NoPlan
from grpo_operator.status.lifecycle import decide, on_delete, unplanned
from grpo_operator.status.observation import (
    JobObservation,
    JobState,
    Resume,
    RewardObservation,
    Seen,
    TrainerMetrics,
    rfc3339,
)

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a reconcile did, for events and logs."""

    previous: Phase | None
    status: GRPORunStatus
    warnings: list[str] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (reason, message) of Normal events
    alerts: list[tuple[str, str]] = field(default_factory=list)  # Warning events with a reason of their own
    decision: Decision | None = None  # what the reconcile decided and carried out

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
    if _present(wanted) == _present(current):
        return None
    patch: dict[str, Any] = _removing(wanted, current)
    return patch


def _removing(wanted: Any, current: Any) -> Any:
    """`wanted` with a null for every key of `current` it lacks, at any depth: a merge patch keeps the keys of a
    mapping it does not name (a key of status.runtime's env that the copy written now does not have would stay)."""
    if not (isinstance(wanted, dict) and isinstance(current, dict)):
        return wanted
    out = {key: _removing(value, current.get(key)) for key, value in wanted.items()}
    for key in current:
        out.setdefault(key, None)
    return out


def _present(value: Any) -> Any:
    """The value as the API server keeps it after a merge patch: a null removes its key, at any depth."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_present(v) for v in value]
    return value


def _history(prev: GRPORunStatus | None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """What the run's status keeps that a new plan reads: the nodes to avoid, the rollout times seen."""
    avoided = tuple(prev.avoided_nodes or ()) if prev is not None else ()
    return avoided, grace.observed_rollout_seconds(prev.accounting if prev is not None else None)


@dataclass
class Reconciler:
    kube: Kube
    settings: OperatorSettings
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    ray_for: Callable[[str, str | None], RayJobs] = field(default=RayJobs)  # (Jobs API address, auth token)
    scraper: scrape.Scraper = field(default_factory=scrape.Scraper)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    # Dry runs of a run's children the API server could not answer (5xx, 429), per run: `Pacing.due` retries such
    # a run when its backoff ends (controller/children.py).
    api_backoff: Backoff = field(default_factory=Backoff)

    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict, init=False, repr=False)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    conflict_retries: int = 5

    def __post_init__(self) -> None:
        self.runtimes = Runtimes(self.kube, self.settings)  # the runtime a run resolves against, the copy's seal

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
        prev = previous_status(body)
        now, generation = self.clock(), int(meta.get("generation") or 1)
        avoided, recent = _history(prev)
        found = self.runtimes.find(body, prev, generation)
        altered = found.altered
        if found.runtime is None:
            return self._without_runtime(body, prev, found, now, generation)
        if prev is not None and altered is not None:  # the copy is replaced by the runtime found instead
            prev = prev.model_copy(update={"runtime": None})
        trusted = record_of(found.runtime)
        try:
            run, rendered, problems = self._checked(body, found.runtime, avoided, recent, found.live)
        except Unavailable as exc:  # a dry run the API server could not answer: say so, apply nothing, retry
            log.warning("%s/%s: %s", namespace, name, exc)
            self.api_backoff.failed(dry_run_key(namespace, name), str(exc))
            why = NoPlan(generation, api_unavailable=str(exc), runtime_altered=altered)
            return self._finish(body, prev, unplanned(prev, why, now), trusted=trusted)
        self.api_backoff.succeeded(dry_run_key(namespace, name))
        if run is not None and rendered is None and admission.started(prev):
            rendered = self._as_running(run, prev, avoided)  # an edit that cannot run must not end the attempt
        if run is None or rendered is None:
            why = NoPlan(generation, problems=tuple(problems), runtime_altered=altered)
            return self._finish(body, prev, unplanned(prev, why, now), trusted=trusted)
        token = self.kube.ray_auth_token(namespace, name, run.metadata.uid, create=False)
        ray = self.ray_for(endpoints.ray_address(namespace, name, self.settings), token)
        ctx = _Context(run, rendered, ray)
        intent = intent_of(
            run,
            rendered.plan,
            prev,
            self.settings,
            generation=generation,
            annotations=meta.get("annotations"),
            runtime=trusted,
            runtime_altered=altered,
            edit_problems=tuple(problems),
        )
        if prev is not None and prev.phase in TERMINAL_PHASES:
            seen = self._observe_ended_run(ctx, prev)
        else:
            seen = self._observe(ctx, prev, intent, token_secret=token is not None)
        decision = self._act(ctx, prev, decide(prev, seen, intent, now), intent, now)
        return self._finish(body, prev, decision, ctx.failures, ctx.unkept, trusted=trusted)

    def _without_runtime(
        self, body: Mapping[str, Any], prev: GRPORunStatus | None, found: RuntimeFound, now: datetime, generation: int
    ) -> Outcome:
        """No runtime to resolve the run against (missing, unreadable, or a copy that failed its digest)."""
        why = NoPlan(
            generation, problems=found.unreadable, runtime_missing=found.missing, runtime_altered=found.altered
        )
        return self._finish(body, prev, unplanned(prev, why, now))

    def _act(
        self, ctx: _Context, prev: GRPORunStatus | None, decision: Decision, intent: Intent, now: datetime
    ) -> Decision:
        """Carry the decision out; the decision as it turned out: refused by the API server, a submission not sent,
        a record that could not be written."""
        refused = self._carry_out(ctx, decision)
        if refused is not None:  # the API server refused a child: the spec cannot run, in the server's words
            why = NoPlan(intent.generation, problems=(refused,), runtime_altered=intent.runtime_altered)
            decision = unplanned(prev, why, now)
        if ctx.submit_failed is not None:  # the job does not exist: the status must not claim the new attempt
            decision = attempts.submit_refused(decision, prev, ctx.submit_failed)
        return _as_written(decision, prev, ctx.unwritten)

    def _checked(
        self,
        body: Mapping[str, Any],
        runtime: GRPORuntime,
        avoided_nodes: tuple[str, ...] = (),
        rollout_seconds: tuple[int, ...] = (),
        live: GRPORuntime | None = None,
    ) -> tuple[GRPORun | None, Rendered | None, list[str]]:
        """The run resolved against its runtime (and held to the live one's locks when given), its children rendered
        from the one plan of this reconcile, or the problems that stop it."""
        namespace = body["metadata"]["namespace"]
        doc = {k: body[k] for k in ("apiVersion", "kind", "metadata", "spec") if k in body}
        run, structural = parse_run(doc, runtime, live)
        problems = [str(p) for p in structural]
        if run is None:
            return None, None, problems
        # Under a Kueue queue the RayCluster is never applied again after admission, so its pods keep the grace
        # they were created with: the plan says that one (the spec's), not one sized from rollouts seen since.
        observed = () if queueing.queued(run) else rollout_seconds
        checked = check(run, observed)  # the plan is made once per reconcile, here
        problems += [str(p) for p in errors(checked.problems)]
        if problems or checked.plan is None:
            return run, None, problems
        try:
            rendered = render(run, checked.plan, self.settings.render, avoided_nodes)
        except MissingRewardImage as exc:
            return run, None, [str(exc)]
        # Kubernetes' own rules on every pod template, and on every whole child before the first exists.
        problems += self.kube.pod_template_problems(namespace, rendered.children)
        if not problems and self.kube.ray_cluster(namespace, run.metadata.name) is None:
            problems += self.kube.dry_run_problems(rendered.children)
        return run, (None if problems else rendered), problems

    def _as_running(self, run: GRPORun, prev: GRPORunStatus | None, avoided: tuple[str, ...]) -> Rendered | None:
        """What the running attempt was rendered from, to observe it by while the run's edit cannot run: the plan in
        its status (nothing of this is applied: status/lifecycle.py `_edit_refused` drops ApplyChildren)."""
        if prev is None or prev.plan is None:
            return None
        try:
            return render(run, prev.plan, self.settings.render, avoided)
        except (MissingRewardImage, ValueError) as exc:
            log.info(
                "%s/%s: the running attempt cannot be observed by its plan: %s",
                run.metadata.namespace,
                run.metadata.name,
                exc,
            )
            return None

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
    def _observe(self, ctx: _Context, prev: GRPORunStatus | None, intent: Intent, *, token_secret: bool) -> Seen:
        """What this reconcile reads of the run's children, its job (by the intent's submission id) and trainer."""
        run, plan = ctx.run, ctx.rendered.plan
        ns, name = run.metadata.namespace, run.metadata.name
        submission_id = intent.submission_id
        cluster_obj = self.kube.ray_cluster(ns, name)
        run_pods = self.kube.run_pods(ns, name)  # pods outlive a deleted RayCluster for a while, holding GPUs
        pods = run_pods if cluster_obj is not None else []
        cluster = childstate.cluster_observation(
            cluster_obj, plan.worker_replicas, pods, self._workloads(ns, cluster_obj)
        )
        reward = self._reward(ns, name) if intent.reward_required else None
        job, unreachable = None, None
        if (cluster is not None and cluster.ready) or (prev is not None and prev.job_submission_id):
            job, unreachable = self._ask(ctx, submission_id)
        evicted = self._evicted_job(ctx, prev) if cluster is not None and cluster.queue is not None else None
        metrics, metrics_error = self._trainer_metrics(job, name)
        image, image_id = childstate.trainer_image(pods)
        seen = Seen(
            token_secret=token_secret,
            cluster=cluster,
            reward=reward,
            job=job,
            ray_unavailable=unreachable,
            evicted_job=evicted,
            checkpoint_job=self._checkpoint_job(ctx, prev, submission_id),
            metrics=metrics,
            metrics_error=metrics_error,
            trainer_image=image,
            trainer_image_id=image_id,
            gpus=childstate.gpu_observation(run_pods),
            worker_nodes=childstate.worker_nodes(pods),
            oom_killed=childstate.oom_killed(run_pods),
            unschedulable_since=childstate.unschedulable_since(cluster_obj, pods),
        )
        return self._job_log(ctx, prev, seen)

    def _workloads(self, namespace: str, cluster: dict[str, Any] | None) -> list[dict[str, Any]]:
        """Kueue's Workloads of a RayCluster held suspended under a queue: why Kueue suspended it."""
        if cluster is None or childstate.admission_queue(cluster) is None:
            return []
        return self.kube.kueue_workloads(namespace, cluster)

    def _job_log(self, ctx: _Context, prev: GRPORunStatus | None, seen: Seen) -> Seen:
        """What the job's log says: a running job's GRPO_RESUME line until the status has it, an ended job's
        summary and kept tail."""
        job = seen.job
        if job is not None and job.state is JobState.RUNNING and _resume_unread(prev, job.submission_id):
            return dataclasses.replace(seen, resume=self._read_resume(ctx, job.submission_id))
        return self._read_log(ctx, seen) if job is not None and not job.state.active else seen

    def _read_resume(self, ctx: _Context, submission_id: str) -> Resume | None:
        """The running job's GRPO_RESUME line (the checkpoint miles resumes from), until the status records it."""
        try:
            return summary.parse_resume(ctx.ray.logs(submission_id))
        except RayUnavailable as exc:
            log.info(
                "%s/%s: the log of %s cannot be read: %s",
                ctx.run.metadata.namespace,
                ctx.run.metadata.name,
                submission_id,
                exc,
            )
            return None

    def _checkpoint_job(self, ctx: _Context, prev: GRPORunStatus | None, submission_id: str) -> JobState | None:
        """The state of the checkpoint job a suspending run asked for, if it asked."""
        if not (ctx.run.spec.suspend and prev is not None and prev.suspend_requested_time):
            return None
        found = self._find(ctx, names.checkpoint_submission_id(submission_id))
        return found.state if found else None

    def _observe_ended_run(self, ctx: _Context, prev: GRPORunStatus) -> Seen:
        """What winding a terminal run down needs: its RayCluster, its job, the job's log unless kept, and the GPUs
        its pods still hold (their preStop hooks run after the end: the ledger counts them until they are gone)."""
        ns, name = ctx.run.metadata.namespace, ctx.run.metadata.name
        seen = Seen(gpus=childstate.gpu_observation(self.kube.run_pods(ns, name)))
        cluster_obj = self.kube.ray_cluster(ns, name)
        if cluster_obj is None:
            return seen
        seen = dataclasses.replace(seen, cluster=childstate.cluster_observation(cluster_obj, 0, []))
        job = self._find(ctx, prev.job_submission_id) if prev.job_submission_id else None
        seen = dataclasses.replace(seen, job=job)
        if prev.logs is None and prev.job_submission_id and not (job is not None and job.state.active):
            return self._read_log(ctx, seen, prev.job_submission_id)
        return seen

    def _reward(self, namespace: str, name: str) -> RewardObservation | None:
        deployment = self.kube.reward_deployment(namespace, name)
        ratio = self._reward_error_ratio(namespace, name) if deployment is not None else None
        return childstate.reward_observation(deployment, ratio, self.settings.reward_error_ratio_max)

    def _evicted_job(self, ctx: _Context, prev: GRPORunStatus | None) -> JobObservation | None:
        """The job of the attempt a Kueue eviction ended, while the run waits for readmission: it runs on while
        its pods keep their grace, and is stopped once they are gone (status/admission.py)."""
        if prev is None or prev.phase is not Phase.SUSPENDED or prev.reason not in KUEUE_EVICTIONS:
            return None
        last = prev.accounting.attempts[-1] if prev.accounting is not None and prev.accounting.attempts else None
        return self._find(ctx, last.submission_id) if last is not None and last.submission_id else None

    def _ask(self, ctx: _Context, submission_id: str) -> tuple[JobObservation | None, str | None]:
        """The job, or None and why the Jobs API could not be asked: an unreachable head is not a missing job."""
        try:
            return ctx.ray.find(submission_id), None
        except RayUnavailable as exc:
            log.info("%s/%s: %s", ctx.run.metadata.namespace, ctx.run.metadata.name, exc)
            return None, str(exc)

    def _find(self, ctx: _Context, submission_id: str) -> JobObservation | None:
        """The job as Ray reports it; an ended job's message (Ray puts the log's last lines in it, and the status
        quotes it) redacted of the run's secrets."""
        try:
            found = ctx.ray.find(submission_id)
        except RayUnavailable as exc:
            log.info("%s/%s: %s", ctx.run.metadata.namespace, ctx.run.metadata.name, exc)
            return None
        if found is None or found.state.active or not found.message:
            return found
        return dataclasses.replace(found, message=redact(found.message, self._secrets(ctx)))

    def _secrets(self, ctx: _Context) -> list[str]:
        """What a log the operator keeps of the run is redacted of (render/redaction.py), read once per reconcile:
        the Ray token, the values of the Secrets the run's secretEnv names as they are now, and credentials in its
        extraArgs. A Secret that cannot be read is said in the operator's log; the rest is still redacted."""
        run = ctx.run
        if ctx.secret_values is None:
            refs = [(e.secret_key_ref.name, e.secret_key_ref.key) for e in run.spec.secret_env]
            values, missed = self.kube.secret_values(run.metadata.namespace, refs) if refs else ([], [])
            for what in missed:
                log.warning(
                    "%s/%s: %s cannot be read, so the logs kept now are not redacted of its value (spec.secretEnv); "
                    "grant the operator get on it, or check the name and key",
                    run.metadata.namespace,
                    run.metadata.name,
                    what,
                )
            ctx.secret_values = values
        return run_secrets(run, [ctx.ray.token, *ctx.secret_values])

    def _read_log(self, ctx: _Context, seen: Seen, submission_id: str | None = None) -> Seen:
        """An ended job's log: the end-of-run summary in it, and the ConfigMap its tail is kept in (a KeepLogs
        action writes it, before anything deletes the RayCluster)."""
        run = ctx.run
        ns, name = run.metadata.namespace, run.metadata.name
        submission_id = submission_id or (seen.job.submission_id if seen.job else None)
        if submission_id is None:
            return seen
        try:
            text = ctx.ray.logs(submission_id)
        except RayUnavailable as exc:
            log.info("%s/%s: the log of %s cannot be read: %s", ns, name, submission_id, exc)
            return seen
        manifest, ref = job_logs_config_map(ns, name, run.metadata.uid, submission_id, text, secrets=self._secrets(ctx))
        ctx.log_manifests[submission_id] = manifest
        return dataclasses.replace(seen, summary=summary.parse(text), logs=ref, log_text=manifest["data"][LOG_KEY])

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
    def _carry_out(self, ctx: _Context, decision: Decision) -> str | None:
        """Every action of the decision, in order. Returns the API server's words when it refused a child."""
        for action in decision.actions:
            refused = self._do(ctx, action)
            if refused is not None:
                return refused
        return None

    def _do(self, ctx: _Context, action: Action) -> str | None:
        run = ctx.run
        ns, name = run.metadata.namespace, run.metadata.name
        match action:
            case CreateTokenSecret():
                token = self.kube.ray_auth_token(ns, name, run.metadata.uid, create=True)
                ctx.ray = self.ray_for(endpoints.ray_address(ns, name, self.settings), token)
            case ApplyChildren():
                return self._apply_children_or_refusal(run, ctx.rendered)
            case Submit(submission_id=submission_id):
                try:
                    ctx.ray.submit(dataclasses.replace(ctx.rendered.job, submission_id=submission_id))
                except RayUnavailable as exc:
                    log.info("%s/%s: Ray job submit not sent: %s", ns, name, exc)
                    ctx.submit_failed = str(exc)
            case StopJob(submission_id=submission_id):
                self._ray(ctx, "stop", lambda: ctx.ray.stop(submission_id))
            case RequestCheckpoint(submission_id=submission_id):
                request = checkpoint_request(run, ctx.rendered.plan, self.settings.render, submission_id)
                self._ray(ctx, "checkpoint request", lambda: ctx.ray.submit(request))
            case CaptureEvidence():
                self._capture(ctx, action)
            case KeepLogs(submission_id=submission_id):
                failed = self.kube.record(ctx.log_manifests[submission_id])
                if failed is not None:
                    ctx.unwritten[KEPT_LOGS] = failed
                    ctx.unkept.append(f"the log tail of Ray job {submission_id} could not be kept ({failed})")
            case DeleteRayCluster():
                self.kube.delete_ray_cluster(ns, name)
        return None

    def _capture(self, ctx: _Context, action: CaptureEvidence) -> None:
        """An evidence bundle: the pieces the decision knows, what Ray could tell (or why it could not) and the
        reward service's metrics when the run has one."""
        run = ctx.run
        ns, name = run.metadata.namespace, run.metadata.name
        pieces, tails = dict(action.pieces), {}
        began = time.monotonic()  # the capture's own length, told in the bundle: the budget is a promise to keep
        try:
            budget = self.settings.capture_budget_seconds
            stacks = stacks_job(action.submission_id, action.config_map, budget, self.settings.render)
            found = ctx.ray.evidence(
                action.submission_id, budget_seconds=budget, stacks=stacks, py_spy=ptrace_granted(run)
            )
            tails = {k: v for k, v in found.items() if k.startswith(TAIL_PIECES)}
            pieces.update({k: v for k, v in found.items() if k not in tails})
        except RayUnavailable as exc:
            pieces["error.txt"] = f"the Ray head could not be read: {exc}"
        if run.spec.reward.type is RewardType.REMOTE:
            pieces["reward-metrics.txt"] = self._reward_metrics_text(ns, name)
        pieces.update(tails)  # the nodes' log tails and flight-recorder dumps last: a full bundle leaves them out first
        header = {
            "trigger": action.trigger,
            "submission_id": action.submission_id,
            "captured": rfc3339(self.clock()),
            "capture_seconds": f"{time.monotonic() - began:.1f}",
        }
        manifest = evidence_config_map(
            ns, name, run.metadata.uid, action.config_map, header=header, pieces=pieces, secrets=self._secrets(ctx)
        )
        # Best effort: a bundle that cannot be written (a quota, a webhook, a 5xx) must not hold back the stop after
        # it, or the hung job keeps its GPUs while kopf retries the capture (edges/errors.py).
        failed = self.kube.record(manifest)
        if failed is not None:
            ctx.unwritten[action.config_map] = failed
            ctx.unkept.append(f"the evidence bundle could not be written ({failed}); the actions after it went ahead")

    def _reward_metrics_text(self, namespace: str, name: str) -> str:
        """The reward service's /metrics as served (its scoring outcomes and error counts), or why not."""
        url = endpoints.reward_metrics_url(namespace, name, self.settings)
        try:
            return self.scraper.fetch(url, self.settings.http_timeout_seconds)
        except scrape.ScrapeError as exc:
            return f"the reward service's metrics could not be read: {exc}"

    def _ray(self, ctx: _Context, what: str, call: Callable[[], object]) -> None:
        """A Ray call the next reconcile retries when the head cannot be reached (it observes what happened)."""
        try:
            call()
        except RayUnavailable as exc:
            log.info("%s/%s: %s not sent: %s", ctx.run.metadata.namespace, ctx.run.metadata.name, what, exc)
            ctx.failures.append(f"Ray job {what} not sent: {exc}")

    def _apply_children_or_refusal(self, run: GRPORun, rendered: Rendered) -> str | None:
        try:
            self._apply_children(run, rendered)
        except ChildRefused as exc:
            return str(exc)
        return None

    def _finish(
        self,
        body: Mapping[str, Any],
        prev: GRPORunStatus | None,
        decision: Decision,
        failures: list[str] | None = None,
        unkept: list[str] | None = None,
        *,
        trusted: RuntimeRecord | None = None,
    ) -> Outcome:
        """The one status write of this reconcile, when the status changed, with status.runtime sealed when it is
        the copy this reconcile resolved against (`trusted`); any other copy is written unsealed, never signed."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        decision = dataclasses.replace(decision, status=self.runtimes.sealed(body, decision.status, trusted))
        patch = status_patch(body.get("status"), decision.status)
        if patch is not None:
            self.kube.patch_status(namespace, name, patch, resource_version=meta.get("resourceVersion"))
        self.metrics.runs.update(namespace, name, decision.status)
        notes = [(e.reason, e.message) for e in decision.events if e.type == "Normal"]
        return Outcome(
            previous=prev.phase if prev else None,
            status=decision.status,
            warnings=[*decision.warnings, *(failures or [])],
            notes=notes,
            # A record-only write that failed (a bundle, a log tail) is an alert of its own reason: posted on a
            # transition's reconcile too, since nothing else says it.
            alerts=[*decision.alerts, *((Reason.CAPTURE_FAILED, m) for m in unkept or [])],
            decision=decision,
        )

    # --- deletion ----------------------------------------------------------------------------------
    def stop_for_deletion(self, body: Mapping[str, Any]) -> Decision | None:
        """Stop the Ray job before the children go (they follow by owner reference)."""
        meta = body["metadata"]
        prev = previous_status(body)
        self.metrics.runs.forget(meta["namespace"], meta["name"])
        self.forget(meta["namespace"], meta["name"])
        if prev is None or not prev.job_submission_id:
            return on_delete(prev, None)
        token = self.kube.ray_auth_token(meta["namespace"], meta["name"], meta.get("uid"), create=False)
        ray = self.ray_for(endpoints.ray_address(meta["namespace"], meta["name"], self.settings), token)
        try:
            job = ray.find(prev.job_submission_id)
        except RayUnavailable as exc:
            log.info("not stopping %s: %s", prev.job_submission_id, exc)
            return None
        decision = on_delete(prev, job)
        for action in decision.actions if decision else ():
            if isinstance(action, StopJob):
                ray.stop(action.submission_id)
        return decision


@dataclass
class _Context:
    """What the actions of one reconcile work with."""

    run: GRPORun
    rendered: Rendered
    ray: RayJobs
    log_manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    unwritten: dict[str, str] = field(default_factory=dict)  # what a record-only write could not write, and why
    unkept: list[str] = field(default_factory=list)  # the same, said as the Warning events of this reconcile
    submit_failed: str | None = None
    secret_values: list[str] | None = None  # of the run's secretEnv, once read (Reconciler._secrets)


KEPT_LOGS = ""  # the key of a log tail that could not be kept, beside the bundles' ConfigMap names


def _as_written(decision: Decision, prev: GRPORunStatus | None, unwritten: dict[str, str]) -> Decision:
    """The status says only what was written: a bundle that could not be written says why instead of where it is,
    and a log tail that could not be kept is not claimed as kept."""
    if not unwritten:
        return decision
    bundles = [
        b.model_copy(update={"capture_failed": unwritten[b.config_map]}) if b.config_map in unwritten else b
        for b in decision.status.forensics or []
    ]
    update: dict[str, Any] = {"forensics": bundles or decision.status.forensics}
    if KEPT_LOGS in unwritten:
        update["logs"] = prev.logs if prev is not None else None
    return dataclasses.replace(decision, status=decision.status.model_copy(update=update))


def _resume_unread(prev: GRPORunStatus | None, submission_id: str) -> bool:
    """The status has no GRPO_RESUME line yet for the attempt whose job is `submission_id`, and it can still come: the
    launcher prints it before miles starts, so once the attempt's first rollout is recorded without it, none will
    (a job not started by the launcher), and the growing log is not read again on every reconcile."""
    attempts = prev.accounting.attempts if prev is not None and prev.accounting is not None else []
    current = attempts[-1] if attempts else None
    if current is None or current.submission_id != submission_id:
        return True
    return current.resumed_from is None and current.first_rollout is None
