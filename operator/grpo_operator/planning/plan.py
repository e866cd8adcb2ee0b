"""The run plan: a pure function from a GRPORun to what it needs (pods, GPUs, EFA, memory) and whether it fits.

Everything derived lives here and is computed after the spec is complete, so no value is derived from a field
before its final value is known.
`plan_run` is the one place a plan is made: it returns the `RunPlan` (what `status.plan` and `grpo plan`
show) together with the unrounded estimates the memory rules of `grpo_operator.planning.validation` judge,
so validation reads the plan instead of recomputing parts of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import GRPORunSpec, Placement
from grpo_operator.api.status import ActorMemory, RolloutMemory, RunPlan
from grpo_operator.planning import calibration
from grpo_operator.planning.grace import preemption_grace
from grpo_operator.planning.instances import InstanceType, instance_of
from grpo_operator.planning.memory import (
    GIB,
    RELEASED_ROLLOUT_RESIDUE_GIB,
    ActorEstimate,
    RolloutEstimate,
    Sharding,
    actor_estimate,
    checkpoint_gib,
    host_gib_per_node,
    rollout_estimate,
)
from grpo_operator.planning.profiles import PROFILES

HOST_MEMORY_USABLE = 0.9  # worker pods request 90% of a node's memory


def _r(value: float) -> float:
    return round(value, 1)


def worker_replicas(spec: GRPORunSpec) -> int:
    topo = spec.topology
    if topo.placement is Placement.COLOCATED:
        return topo.actor.nodes
    return math.ceil((spec.topology.actor_gpus + spec.topology.rollout_gpus) / topo.actor.gpus_per_node)


def fabric_per_node(spec: GRPORunSpec, instance: InstanceType) -> int:
    """Fabric devices a worker requests: all its node has when the run spans nodes, none on one node."""
    if spec.topology.efa_per_node is not None:
        return spec.topology.efa_per_node
    return instance.devices if worker_replicas(spec) > 1 else 0


def sharding(spec: GRPORunSpec) -> Sharding:
    p = spec.topology.parallelism
    return Sharding(
        gpus=spec.topology.actor_gpus,
        tensor=p.tensor,
        pipeline=p.pipeline,
        context=p.context,
        expert=p.expert,
        expert_tensor=p.expert_tensor,
    )


def estimates(spec: GRPORunSpec) -> tuple[ActorEstimate, RolloutEstimate]:
    profile = PROFILES[spec.model.profile]
    instance = instance_of(spec)
    colocated = spec.topology.placement is Placement.COLOCATED
    actor = actor_estimate(profile, sharding(spec), spec.training.max_tokens_per_gpu, spec.rollout.temperature)
    rollout = rollout_estimate(
        profile, spec.topology.rollout.gpus_per_engine, spec.topology.rollout.mem_fraction, instance.gpu_gib, colocated
    )
    return actor, rollout


def actor_budget_gib(spec: GRPORunSpec) -> float:
    """GPU memory the actor may use: all of it, less what released SGLang engines keep when colocated."""
    gpu = instance_of(spec).gpu_gib
    return gpu - RELEASED_ROLLOUT_RESIDUE_GIB if spec.topology.placement is Placement.COLOCATED else gpu


def run_dirs(run: GRPORun) -> tuple[str, str]:
    storage = run.spec.storage
    base = f"{storage.mount_path.rstrip('/')}/grpo/{run.metadata.namespace}/{run.metadata.name}"
    return (storage.checkpoint_dir or f"{base}/checkpoints", storage.tensorboard_dir or f"{base}/tensorboard")


def actor_memory(actor: ActorEstimate, spec: GRPORunSpec) -> ActorMemory:
    acts = actor.activations
    calibrated = calibration.calibration_of(spec.model.profile)
    return ActorMemory(
        weights_gib=_r(actor.weights_gib),
        grads_gib=_r(actor.grads_gib),
        optimizer_gib=_r(actor.optimizer_gib),
        activations_gib=_r(actor.activations_gib),
        checkpoints_gib=_r(acts.checkpoints / GIB),
        layer_working_set_gib=_r(acts.layer_working_set / GIB),
        logits_gib=_r(acts.logits / GIB),
        step_transient_gib=_r(actor.step_transient_gib),
        context_gib=_r(actor.context_gib),
        allocator_margin_gib=_r(actor.allocator_margin_gib),
        total_gib=_r(actor.total_gib),
        calibration=calibration.describe(spec.model.profile),
        calibration_error_percent=dict(calibrated.error_percent) if calibrated else {},
    )


@dataclass(frozen=True)
class Planned:
    """A plan and the unrounded figures it was made from."""

    plan: RunPlan
    actor: ActorEstimate
    rollout: RolloutEstimate
    actor_budget_gib: float
    host_gib_per_node: float
    host_capacity_gib: float


def make_plan(run: GRPORun, rollout_seconds: Sequence[int] = ()) -> RunPlan:
    """The `RunPlan` of a run whose topology rules hold (see `grpo_operator.planning.validation.check`)."""
    return plan_run(run, rollout_seconds).plan


def plan_run(run: GRPORun, rollout_seconds: Sequence[int] = ()) -> Planned:
    """The plan; `rollout_seconds`, the run's recent rollout times as observed (status.accounting), size the grace."""
    spec = run.spec
    profile = PROFILES[spec.model.profile]
    instance = instance_of(spec)
    colocated = spec.topology.placement is Placement.COLOCATED
    actor, rollout = estimates(spec)
    replicas = worker_replicas(spec)
    gpn = spec.topology.actor.gpus_per_node
    host = host_gib_per_node(actor, rollout, gpn, colocated)
    host_capacity = instance.memory_gib * HOST_MEMORY_USABLE
    budget = actor_budget_gib(spec)
    fits = (
        actor.total_gib <= budget
        and rollout.free_gib >= rollout.needed_free_gib
        and rollout.kv_cache_tokens >= spec.rollout.max_response_len
        and host <= host_capacity
    )
    checkpoint_dir, tensorboard_dir = run_dirs(run)
    plan = RunPlan(
        instance_type=instance.name,
        gpu_model=instance.gpu_model,
        placement=spec.topology.placement.value,
        worker_replicas=replicas,
        gpus_per_node=gpn,
        actor_gpus=spec.topology.actor_gpus,
        rollout_gpus=spec.topology.rollout_gpus,
        rollout_engines=spec.topology.rollout_gpus // spec.topology.rollout.gpus_per_engine,
        total_gpus=replicas * gpn,
        total_nodes=replicas,
        data_parallel=sharding(spec).data_parallel,
        fabric=instance.fabric.type,
        fabric_devices_per_node=fabric_per_node(spec, instance),
        efa_per_node=fabric_per_node(spec, instance),
        shm_gib=instance.shm_gib,
        ray_resources={"gpu_node": 1.0},
        distributed_optimizer=True,
        params_billions=round(profile.total_params / 1e9, 2),
        actor_gib_per_gpu=_r(actor.total_gib),
        rollout_gib_per_gpu=_r(rollout.static_gib),
        min_free_gpu_gib=_r(actor.total_gib if not colocated else max(actor.total_gib, rollout.static_gib)),
        gpu_gib=instance.gpu_gib,
        host_gib_per_node=_r(host),
        host_capacity_gib=_r(host_capacity),
        checkpoint_gib=_r(checkpoint_gib(profile)),
        preemption_grace=preemption_grace(spec, checkpoint_gib(profile), rollout_seconds),
        checkpoint_dir=checkpoint_dir,
        tensorboard_dir=tensorboard_dir,
        save_interval=spec.storage.save_interval or spec.rollout.num_rollout,
        actor_memory=actor_memory(actor, spec),
        rollout_memory=RolloutMemory(
            static_gib=_r(rollout.static_gib),
            weights_gib=_r(rollout.weights_gib),
            kv_cache_gib=_r(rollout.kv_cache_gib),
            kv_cache_tokens=rollout.kv_cache_tokens,
            free_gib=_r(rollout.free_gib),
            needed_free_gib=_r(rollout.needed_free_gib),
        ),
        fits=fits,
    )
    return Planned(
        plan=plan,
        actor=actor,
        rollout=rollout,
        actor_budget_gib=budget,
        host_gib_per_node=host,
        host_capacity_gib=host_capacity,
    )
