"""Semantic validation of a GRPORun: every problem at once, each naming the field, the value, the rule and the fix.

`check(run)` is the one entry point the reconciler and the CLI call: it returns the plan (made once, by
`grpo_operator.planning.plan.plan_run`) together with every problem. The cross-field rules the API server
also checks (CEL in `grpo_operator.api.spec`) are repeated in `api_server_rules` so `grpo validate` gives the
same answer offline; `tests/integration/controlplane/test_cel_python_agree.py` generates specs and proves the real API
server and these rules accept and refuse the same ones. The other rules need data CEL does not have (model
profiles, instance types, the memory plan). Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from grpo_operator.api import GRPORun
from grpo_operator.api.quote import echo, escape
from grpo_operator.api.runtime import FabricType
from grpo_operator.api.spec import (
    FORBIDDEN_MOUNTS,
    UNNORMALIZED_PATH,
    GangScheduler,
    GRPORunSpec,
    Placement,
    RewardType,
    forbidden_mount,
    mount_prefix,
)
from grpo_operator.api.status import RunPlan, StepTimeSource
from grpo_operator.planning.flags import check_extra_args
from grpo_operator.planning.instances import InstanceType, instance_of, runtime_of
from grpo_operator.planning.memory import GIB
from grpo_operator.planning.plan import HOST_MEMORY_USABLE, Planned, plan_run, worker_replicas
from grpo_operator.planning.profiles import PROFILES
from grpo_operator.planning.secretenv import check_secret_env


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    path: str
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        prefix = "warning: " if self.severity is Severity.WARNING else ""
        return escape(f"{prefix}{self.path}: {self.message}")


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity is Severity.ERROR]


@dataclass(frozen=True)
class Checked:
    """What `check` found: the plan (None when the topology is too incoherent to plan) and every problem."""

    plan: RunPlan | None
    problems: list[Problem]

    @property
    def valid(self) -> bool:
        return self.plan is not None and not errors(self.problems)


def api_server_rules(spec: GRPORunSpec) -> list[Problem]:
    """The CEL rules of TopologySpec, GRPORunSpec and TrainingSpec, in Python (the API server checks the same)."""
    t, out = spec.topology, []
    agpus, rgpus = t.actor_gpus, t.rollout_gpus
    p = t.parallelism
    if t.placement is Placement.COLOCATED and t.rollout.gpus is not None and t.rollout.gpus != agpus:
        out.append(
            Problem(
                "spec.topology.rollout.gpus",
                f"{t.rollout.gpus} must equal actor GPUs ({t.actor.nodes} nodes x {t.actor.gpus_per_node} = {agpus}) "
                "when placement is Colocated; remove rollout.gpus or set it to that number",
            )
        )
    if t.placement is Placement.DISAGGREGATED and t.rollout.gpus is None:
        out.append(
            Problem(
                "spec.topology.rollout.gpus",
                "is required when placement is Disaggregated: set the GPUs the SGLang engines get of their own",
            )
        )
    if rgpus % t.rollout.gpus_per_engine:
        out.append(
            Problem(
                "spec.topology.rollout.gpusPerEngine",
                f"rollout GPUs {rgpus} are not a multiple of gpusPerEngine {t.rollout.gpus_per_engine}: "
                "the left-over GPUs would sit idle; make rollout GPUs a multiple of it",
            )
        )
    if t.actor.gpus_per_node % t.rollout.gpus_per_engine:
        out.append(
            Problem(
                "spec.topology.rollout.gpusPerEngine",
                f"{t.rollout.gpus_per_engine} does not divide actor.gpusPerNode {t.actor.gpus_per_node}: "
                "an engine cannot span nodes; use a divisor of it",
            )
        )
    model_parallel = t.model_parallel
    if agpus % model_parallel:
        out.append(
            Problem(
                "spec.topology.parallelism",
                f"tensor x pipeline x context = {p.tensor} x {p.pipeline} x {p.context} = {model_parallel} does not "
                f"divide actor GPUs {agpus}; choose sizes whose product divides it",
            )
        )
    expert_parallel = p.expert * p.expert_tensor * p.pipeline
    if agpus % expert_parallel:
        out.append(
            Problem(
                "spec.topology.parallelism.expert",
                f"expert x expertTensor x pipeline = {expert_parallel} does not divide actor GPUs {agpus}",
            )
        )
    if p.tensor > t.actor.gpus_per_node:
        out.append(
            Problem(
                "spec.topology.parallelism.tensor",
                f"{p.tensor} exceeds actor.gpusPerNode {t.actor.gpus_per_node}: tensor parallelism stays inside a node",
            )
        )
    if t.rollout.gpus_per_engine % t.rollout.expert_parallel:
        out.append(
            Problem(
                "spec.topology.rollout.expertParallel",
                f"{t.rollout.expert_parallel} does not divide rollout.gpusPerEngine {t.rollout.gpus_per_engine}: SGLang "
                "expert parallelism runs inside one engine",
            )
        )
    r, tr = spec.rollout, spec.training
    if r.batch_size * r.samples_per_prompt != tr.global_batch_size * tr.steps_per_rollout:
        out.append(
            Problem(
                "spec.training.globalBatchSize",
                f"GRPO batch identity: rollout.batchSize x samplesPerPrompt = {r.batch_size} x {r.samples_per_prompt} = "
                f"{r.batch_size * r.samples_per_prompt} but training.globalBatchSize x stepsPerRollout = "
                f"{tr.global_batch_size} x {tr.steps_per_rollout} = {tr.global_batch_size * tr.steps_per_rollout}; "
                f"set globalBatchSize to {r.batch_size * r.samples_per_prompt // tr.steps_per_rollout or 1} or adjust the rollout",
            )
        )
    if tr.eps_clip_high < tr.eps_clip:
        out.append(Problem("spec.training.epsClipHigh", f"{tr.eps_clip_high} must be at least epsClip {tr.eps_clip}"))
    out += path_rules(spec) + label_rules(spec)
    if spec.reward.type is RewardType.REMOTE and spec.reward.remote is None:
        out.append(Problem("spec.reward.remote", "is required when reward.type is remote: add reward.remote"))
    if spec.reward.type is not RewardType.REMOTE and spec.reward.remote is not None:
        out.append(
            Problem(
                "spec.reward.remote",
                f"is only used when reward.type is remote (type is {spec.reward.type.value}); remove it or set type: remote",
            )
        )
    return out


def path_rules(spec: GRPORunSpec) -> list[Problem]:
    """The CEL path rules of ModelSpec, DataSpec, EvalSpec and StorageSpec: every path normalized (no `.`/`..`
    segment, no `//`), and the checkpoint and TensorBoard directories strictly under the claim's mount."""
    storage, out = spec.storage, []
    paths = [
        ("spec.model.hfCheckpoint", spec.model.hf_checkpoint),
        ("spec.model.torchDistCheckpoint", spec.model.torch_dist_checkpoint),
        ("spec.data.promptData", spec.data.prompt_data),
        ("spec.eval.promptData", spec.eval.prompt_data if spec.eval else None),
        ("spec.storage.mountPath", storage.mount_path),
        ("spec.storage.checkpointDir", storage.checkpoint_dir),
        ("spec.storage.tensorboardDir", storage.tensorboard_dir),
    ]
    for path, value in paths:
        if value is not None and re.search(UNNORMALIZED_PATH, value):
            out.append(
                Problem(
                    path,
                    f"{echo(value)} is not a normalized path: no '.' or '..' segment and no '//' (a '..' can leave "
                    f"the shared volume); write the path it resolves to, {echo(posixpath.normpath(value))}",
                )
            )
    prefix = mount_prefix(storage.mount_path)
    for path, value in paths[-2:]:
        if value is not None and not (value.startswith(prefix) and value != prefix):
            out.append(
                Problem(
                    path,
                    f"{echo(value)} is not under storage.mountPath {echo(storage.mount_path)}: checkpoints elsewhere "
                    "land on each pod's own disk and are lost with it; put it under the mount",
                )
            )
    if (problem := mount_problem("spec.storage.mountPath", storage.mount_path)) is not None:
        out.append(problem)
    return out


def mount_problem(path: str, value: str) -> Problem | None:
    """A mount path that is `/`, a system directory or one of the render's mounts, or lies under or holds one."""
    hit = forbidden_mount(value)
    if hit is None:
        return None
    where = "is the root, which holds" if value.rstrip("/") == "" else f"is, lies under or holds {hit}, one of"
    return Problem(
        path,
        f"{echo(value)} {where} the system directories and the Ray pods' own mounts ({', '.join(FORBIDDEN_MOUNTS)}, "
        "/lib*): the volume would hide what the image or the operator keeps there; choose a directory of its own "
        "such as /fsx",
    )


def label_rules(spec: GRPORunSpec) -> list[Problem]:
    """The CEL rules on spec values that become labels of a child (SchedulingSpec): the label's own limits."""
    scheduling, out = spec.scheduling, []
    gang, priority = scheduling.gang, scheduling.priority_class_name
    if gang is not None and gang.scheduler is GangScheduler.VOLCANO and priority is not None and len(priority) > 63:
        out.append(
            Problem(
                "spec.scheduling.priorityClassName",
                f"{echo(priority)} ({len(priority)} characters) is longer than the 63 a label value may have, and "
                "with the Volcano gang scheduler it becomes the RayCluster's ray.io/priority-class-name label; use "
                "a PriorityClass with a shorter name",
            )
        )
    return out


def _profile_rules(spec: GRPORunSpec) -> list[Problem]:
    profile, instance = PROFILES[spec.model.profile], instance_of(spec)
    p, t, out = spec.topology.parallelism, spec.topology, []
    name = profile.display
    if t.actor.gpus_per_node > instance.gpus:
        out.append(
            Problem(
                "spec.topology.actor.gpusPerNode",
                f"{t.actor.gpus_per_node} exceeds the {instance.gpus} GPUs of a {instance.name} node",
            )
        )
    out += _fabric_rules(spec, instance)
    if profile.num_attention_heads % p.tensor or profile.num_query_groups % p.tensor:
        out.append(
            Problem(
                "spec.topology.parallelism.tensor",
                f"{p.tensor} must divide {name}'s {profile.num_attention_heads} attention heads and "
                f"{profile.num_query_groups} query groups",
            )
        )
    if profile.num_layers % p.pipeline:
        out.append(
            Problem(
                "spec.topology.parallelism.pipeline", f"{p.pipeline} must divide {name}'s {profile.num_layers} layers"
            )
        )
    if profile.num_attention_heads % t.rollout.gpus_per_engine:
        out.append(
            Problem(
                "spec.topology.rollout.gpusPerEngine",
                f"{t.rollout.gpus_per_engine} must divide {name}'s {profile.num_attention_heads} attention heads "
                "(it is the SGLang tensor-parallel size)",
            )
        )
    if profile.moe is None and (p.expert > 1 or p.expert_tensor > 1):
        out.append(
            Problem(
                "spec.topology.parallelism.expert",
                f"expert {p.expert} / expertTensor {p.expert_tensor}: {name} is a dense model; set both to 1",
            )
        )
    if profile.moe is None and t.rollout.expert_parallel > 1:
        out.append(
            Problem(
                "spec.topology.rollout.expertParallel",
                f"{t.rollout.expert_parallel}: {name} is a dense model; set it to 1",
            )
        )
    if profile.moe is not None and profile.moe.num_experts % t.rollout.expert_parallel:
        out.append(
            Problem(
                "spec.topology.rollout.expertParallel",
                f"{t.rollout.expert_parallel} must divide {name}'s {profile.moe.num_experts} experts",
            )
        )
    if profile.moe is not None and profile.moe.num_experts % p.expert:
        out.append(
            Problem(
                "spec.topology.parallelism.expert", f"{p.expert} must divide {name}'s {profile.moe.num_experts} experts"
            )
        )
    dp = t.data_parallel
    if spec.training.global_batch_size % dp:
        out.append(
            Problem(
                "spec.training.globalBatchSize",
                f"{spec.training.global_batch_size} is not divisible by the data-parallel size {dp} "
                "(actor GPUs / (tensor x pipeline x context))",
            )
        )
    return out


def _fabric_rules(spec: GRPORunSpec, instance: InstanceType) -> list[Problem]:
    t, out = spec.topology, []
    kind = instance.fabric.type.value
    if instance.fabric.type is FabricType.NONE and worker_replicas(spec) > 1:
        out.append(
            Problem(
                "spec.topology.actor.nodes",
                f"the run needs {worker_replicas(spec)} worker nodes but {instance.name} has no fabric between nodes "
                "(fabric none: single-node runs only); use one node, or an instance type with an efa, infiniband or roce "
                "fabric",
            )
        )
    if t.efa_per_node is not None and t.efa_per_node > instance.devices:
        out.append(
            Problem(
                "spec.topology.efaPerNode",
                f"{t.efa_per_node} exceeds the {instance.devices} {kind} devices of a {instance.name} node: pods "
                "would never schedule; remove the override",
            )
        )
    elif t.efa_per_node is not None and t.efa_per_node < instance.devices:
        out.append(
            Problem(
                "spec.topology.efaPerNode",
                f"{t.efa_per_node} is fewer than the {instance.devices} {kind} devices of a {instance.name} node: a "
                "partial request passes all-reduce but breaks point-to-point NCCL traffic",
                Severity.WARNING,
            )
        )
    return out


def apart(more: float, less: float, decimals: int) -> tuple[str, str]:
    """`more` and `less` with the fewest decimals, from `decimals` on, that tell them apart: a shortfall of 0.04 GiB
    must not read "needs 50.3 GiB but gives 50.3 GiB"."""
    places = decimals
    while places < 17 and f"{more:.{places}f}" == f"{less:.{places}f}":
        places += 1
    return f"{more:.{places}f}", f"{less:.{places}f}"


def _memory_rules(spec: GRPORunSpec, planned: Planned) -> list[Problem]:
    actor, rollout = planned.actor, planned.rollout
    instance = instance_of(spec)
    p, out = spec.topology.parallelism, []
    budget = planned.actor_budget_gib
    if actor.total_gib > budget:
        fixes = [
            f"raise parallelism.tensor/pipeline (now {p.tensor}/{p.pipeline}) or actor.nodes (the optimizer "
            f"state is sharded over data parallelism, now {planned.plan.data_parallel})",
            f"lower training.maxTokensPerGpu (now {spec.training.max_tokens_per_gpu})",
        ]
        acts = actor.activations
        needed, given = apart(actor.total_gib, budget, 1)
        out.append(
            Problem(
                "spec.topology",
                f"training needs about {needed} GiB per GPU (weights {actor.weights_gib:.1f}, fp32 grads "
                f"{actor.grads_gib:.1f}, optimizer {actor.optimizer_gib:.1f}, activations {actor.activations_gib:.1f} "
                f"[logits {acts.logits / GIB:.1f}, checkpoints {acts.checkpoints / GIB:.1f}], context "
                f"{actor.context_gib:.1f}, allocator margin {actor.allocator_margin_gib:.1f}) but a {instance.gpu_model} "
                f"of {instance.name} ({instance.gpu_gib:g} GiB) gives {given} GiB: " + "; or ".join(fixes),
            )
        )
    if rollout.free_gib < rollout.needed_free_gib:
        highest = max(0.1, (instance.gpu_gib - rollout.needed_free_gib) / instance.gpu_gib)
        needed, free = apart(rollout.needed_free_gib, rollout.free_gib, 1)
        out.append(
            Problem(
                "spec.topology.rollout.memFraction",
                f"{spec.topology.rollout.mem_fraction} leaves {free} GiB per GPU outside SGLang's "
                f"static reservation but {needed} GiB is needed (SGLang workspace"
                + (" and the offloaded actor's residue" if spec.topology.placement is Placement.COLOCATED else "")
                + f"); set it to at most {int(highest * 100) / 100}",
            )
        )
    colocated = spec.topology.placement is Placement.COLOCATED
    host, host_capacity = planned.host_gib_per_node, planned.host_capacity_gib
    if host > host_capacity:
        needed, given = apart(host, host_capacity, 0)
        out.append(
            Problem(
                "spec.topology",
                f"each node needs about {needed} GiB of pinned host memory (reference weights"
                + (", offloaded training state and engine weights" if colocated else "")
                + f") but a {instance.name} pod gets {given} GiB ({HOST_MEMORY_USABLE:.0%} of its "
                f"{instance.memory_gib} GiB): raise parallelism or actor.nodes",
            )
        )
    if rollout.free_gib >= rollout.needed_free_gib and rollout.kv_cache_tokens < spec.rollout.max_response_len:
        out.append(
            Problem(
                "spec.topology.rollout.gpusPerEngine",
                f"an engine of {spec.topology.rollout.gpus_per_engine} GPU(s) holds {rollout.weights_gib:.1f} GiB of "
                f"weights per GPU, leaving a KV cache of {rollout.kv_cache_tokens} tokens, fewer than one response "
                f"({spec.rollout.max_response_len}); raise gpusPerEngine or memFraction",
            )
        )
    return out


def _interruption_rules(spec: GRPORunSpec, plan: RunPlan) -> list[Problem]:
    """A warning when the instance type's interruption notice (EC2 spot: 120 s, whatever the pods' grace) is
    shorter than the preStop save: miles saves only after the rollout step in flight, then writes the checkpoint."""
    runtime = runtime_of(spec)
    found = runtime.spec.instance_type(spec.topology.instance_type)
    notice = found.interruption_notice_seconds if found is not None else None
    grace = plan.preemption_grace
    needed = grace.step_seconds + grace.save_seconds
    if notice is None or needed <= notice:
        return []
    step = "observed p95" if grace.step_source is StepTimeSource.OBSERVED else "spec.preemption.stepSeconds"
    lost = (
        f"the run resumes from its last periodic checkpoint (every {spec.storage.save_interval} rollouts, "
        "spec.storage.saveInterval), losing the rollouts since"
        if spec.storage.save_interval is not None
        else "with no spec.storage.saveInterval the run resumes from its last save before a stop, or from the "
        "start; set spec.storage.saveInterval to bound the loss"
    )
    return [
        Problem(
            "spec.topology.instanceType",
            f"{plan.instance_type} (GRPORuntime {runtime.metadata.name}) has interruptionNoticeSeconds {notice}, "
            f"shorter than a rollout step ({grace.step_seconds} s, {step}) plus a checkpoint save "
            f"({grace.save_seconds} s, checkpoint / spec.storage.writeGBps) = {needed} s: a worker interrupted "
            f"with that notice cannot save before its node goes; {lost}",
            Severity.WARNING,
        )
    ]


def _field_rules(run: GRPORun) -> list[Problem]:
    spec, out = run.spec, []
    mount = mount_prefix(spec.storage.mount_path)
    for path, value in (
        ("spec.model.hfCheckpoint", spec.model.hf_checkpoint),
        ("spec.model.torchDistCheckpoint", spec.model.torch_dist_checkpoint),
        ("spec.data.promptData", spec.data.prompt_data),
    ):
        if not value.startswith(mount):
            out.append(
                Problem(
                    path,
                    f"{echo(value)} is not under storage.mountPath {echo(mount)}; it must exist in the image",
                    Severity.WARNING,
                )
            )
    if "@sha256:" not in spec.image:
        out.append(
            Problem(
                "spec.image",
                f"{echo(spec.image)} is not pinned by digest: nodes may run different builds "
                "under one tag; use name@sha256:<digest>",
                Severity.WARNING,
            )
        )
    chosen = spec.scheduling.gpu_node_selector.get("node.kubernetes.io/instance-type")
    if chosen is not None and chosen != spec.topology.instance_type:
        out.append(
            Problem(
                "spec.scheduling.gpuNodeSelector",
                f"node.kubernetes.io/instance-type: {chosen} contradicts topology.instanceType "
                f"{spec.topology.instance_type} (the plan's GPU memory and fabric are that type's); set "
                "topology.instanceType instead and drop the selector key",
            )
        )
    version = runtime_of(spec).spec.miles_version  # the runtime's trainer images run this miles
    out += [Problem(f"spec.extraArgs[{i}]", why) for i, why in check_extra_args(list(spec.extra_args), version)]
    out += [Problem(f"spec.secretEnv[{i}].name", why) for i, why in check_secret_env(spec)]
    if spec.eval is not None and spec.eval.interval > spec.rollout.num_rollout:
        out.append(
            Problem(
                "spec.eval.interval",
                f"{spec.eval.interval} exceeds rollout.numRollout "
                f"{spec.rollout.num_rollout}: evaluation runs only before training",
                Severity.WARNING,
            )
        )
    out += _eval_guard_rules(spec)
    if spec.guards.stall_timeout_seconds < 600:
        out.append(
            Problem(
                "spec.guards.stallTimeoutSeconds",
                f"{spec.guards.stall_timeout_seconds} s is shorter than "
                "miles's start-up and a checkpoint save (minutes each): the run may be stopped as stalled "
                "while healthy",
                Severity.WARNING,
            )
        )
    if spec.guards.min_reward.after_rollouts > spec.rollout.num_rollout:
        out.append(
            Problem(
                "spec.guards.minReward.afterRollouts",
                f"{spec.guards.min_reward.after_rollouts} exceeds "
                f"rollout.numRollout {spec.rollout.num_rollout}: the reward guard never runs",
                Severity.WARNING,
            )
        )
    return out


def _eval_guard_rules(spec: GRPORunSpec) -> list[Problem]:
    """The reward-hacking guard reads the eval scores: without spec.eval miles logs none and it could never trip."""
    guard = spec.guards.eval_regression
    if guard is None or spec.eval is not None:
        return []
    return [
        Problem(
            "spec.guards.evalRegression",
            f"{{maxDrop: {guard.max_drop:g}, after: {guard.after}}} needs spec.eval: without an eval set miles logs no "
            "eval score and the guard could never trip; add spec.eval (promptData, interval) or remove the guard",
        )
    ]


def check(run: GRPORun, rollout_seconds: Sequence[int] = ()) -> Checked:
    """The plan of a structurally valid GRPORun and all its problems (errors first, then warnings);
    `rollout_seconds`, its recent rollout times as observed, size the plan's grace period.

    The plan is made once, here, and only when the topology and profile rules hold (it divides by them).
    """
    problems = api_server_rules(run.spec) + _profile_rules(run.spec)
    planned = plan_run(run, rollout_seconds) if not errors(problems) else None
    if planned is not None:
        problems += _memory_rules(run.spec, planned) + _interruption_rules(run.spec, planned.plan)
    problems += _field_rules(run)
    ordered = sorted(problems, key=lambda p: p.severity is Severity.WARNING)
    return Checked(plan=planned.plan if planned is not None else None, problems=ordered)


def validate(run: GRPORun) -> list[Problem]:
    """All problems of a structurally valid GRPORun: `check(run).problems`."""
    return check(run).problems
