"""A run and its GRPORuntime as one effective GRPORun: the runtime's defaults filled in, its locks checked.

`resolve(doc, runtime)` is the one place a run meets a runtime, for `grpo validate --runtime` and the operator
alike: fields the run leaves out come from `runtime.spec.defaults`, a field the runtime locks is refused with a
message naming both objects, and the instance type is looked up in the runtime. The effective spec remembers its
runtime (`GRPORunSpec.runtime`), so the plan and the render read the node type and fabric from it
(`instance_of`). Without a runtime the built-in AWS table is the runtime (`planning.instances.DEFAULT_RUNTIME`).
A started run resolves against the copy in its status; an edit of it is also held to the locks of the live
GRPORuntime (`live`): a lock in either refuses.
"""

from __future__ import annotations

import copy
from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.quote import echo
from grpo_operator.api.runtime import (
    DEFAULT_RUNTIME_NAME,
    GRPORuntime,
    RuntimeInstanceType,
    RuntimeMeta,
    RuntimeRecord,
)
from grpo_operator.api.spec import MUTABLE_SPEC_FIELDS, RewardType
from grpo_operator.planning.documents import parse_document
from grpo_operator.planning.instances import DEFAULT_RUNTIME, runtime_of
from grpo_operator.planning.plan import worker_replicas
from grpo_operator.planning.runtimerules import image_allowed
from grpo_operator.planning.validation import Problem

# A locked field: where it is in a run, and the runtime default a run then gets.
_LOCKED: dict[str, tuple[tuple[str, ...], str]] = {
    "image": (("image",), "defaults.trainerImage"),
    "reward.remote.image": (("reward", "remote", "image"), "defaults.rewardImage"),
    "storage.claimName": (("storage", "claimName"), "defaults.storage.claimName"),
    "storage.mountPath": (("storage", "mountPath"), "defaults.storage.mountPath"),
    "scheduling.queueName": (("scheduling", "queueName"), "defaults.scheduling.queueName"),
    "scheduling.priorityClassName": (("scheduling", "priorityClassName"), "defaults.scheduling.priorityClassName"),
    "guards": (("guards",), "defaults.guards"),
}


def runtime_name(doc: Any) -> str:
    """The runtime a run document names (spec.runtimeRef.name), else the default runtime's name."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    ref = spec.get("runtimeRef") if isinstance(spec, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) else DEFAULT_RUNTIME_NAME


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


def _unset(value: Any) -> bool:
    return value is None or value in ({}, [])


def _fill(spec: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `value` at `path` unless the run set it (a mapping on the way is made when absent)."""
    if _unset(value):
        return
    tree = spec
    for key in path[:-1]:
        if not isinstance(tree.get(key), dict):
            if tree.get(key) is not None:
                return  # a wrong type: the run's own problem, reported by parsing
            tree[key] = {}
        tree = tree[key]
    if _unset(tree.get(path[-1])):
        tree[path[-1]] = copy.deepcopy(value)


def _who(doc: dict[str, Any], runtime: GRPORuntime) -> str:
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    run = f"{echo(str(meta.get('namespace', 'default')))}/{echo(str(meta.get('name', '?')))}"
    return f"GRPORun {run} on GRPORuntime {runtime.metadata.name}"


def _lock_problems(doc: dict[str, Any], runtime: GRPORuntime, *, live: bool = False) -> list[Problem]:
    """The locked fields the run sets to something else than the runtime's default. `live`: the runtime as it is
    now, for an edit of a started run: only the fields an edit can change count (the API server refuses edits of
    the others, so they stay as the run was admitted with)."""
    spec, out = doc.get("spec") or {}, []
    defaults = runtime.spec.defaults.model_dump(mode="json", by_alias=True, exclude_none=True)
    for locked in runtime.spec.locks.fields:
        path, source = _LOCKED[locked]
        if live and path[0] not in MUTABLE_SPEC_FIELDS:
            continue
        value = _get(spec, path)
        default = _get(defaults, tuple(source.split(".")[1:]))
        if _unset(value) or value == default:
            continue
        lists = f"locks.fields lists {locked}"
        if live:  # the copy the run resolves against may not lock it: say which object does
            lists = f"{lists} in the live GRPORuntime, which an edit of a started run is held to besides its copy"
        out.append(
            Problem(
                f"spec.{locked}",
                f"{echo(repr(value))} overrides a field {_who(doc, runtime)} locks ({lists}); "
                f"remove spec.{locked} from the run to get the runtime's {source}"
                + (f" ({echo(repr(default))})" if default is not None else "")
                + ", or ask the platform team to unlock it",
            )
        )
    return out


def _fill_defaults(spec: dict[str, Any], runtime: GRPORuntime) -> None:
    d = runtime.spec.defaults
    _fill(spec, ("topology", "instanceType"), runtime.spec.default_instance_type)
    _fill(spec, ("image",), d.trainer_image)
    if _get(spec, ("reward", "type")) == RewardType.REMOTE.value:
        _fill(spec, ("reward", "remote", "image"), d.reward_image)
    _fill(spec, ("storage", "claimName"), d.storage.claim_name)
    _fill(spec, ("storage", "mountPath"), d.storage.mount_path)
    _fill(spec, ("storage", "saveInterval"), d.storage.save_interval)
    _fill(spec, ("scheduling", "queueName"), d.scheduling.queue_name)
    _fill(spec, ("scheduling", "headNodeSelector"), d.scheduling.head_node_selector)
    _fill(spec, ("scheduling", "priorityClassName"), d.scheduling.priority_class_name)
    if d.guards is not None:
        _fill(spec, ("guards",), d.guards.model_dump(mode="json", by_alias=True, exclude_none=True))
    tolerations = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in d.scheduling.tolerations]
    if tolerations and isinstance(spec.get("scheduling", {}), dict):
        scheduling = spec.setdefault("scheduling", {})
        own = scheduling.get("tolerations") if isinstance(scheduling.get("tolerations"), list) else []
        scheduling["tolerations"] = own + [t for t in tolerations if t not in own]
    _fill_secret_env(spec, runtime)


def _fill_secret_env(spec: dict[str, Any], runtime: GRPORuntime) -> None:
    """The runtime's secretEnv entries whose variable the run does not name itself, after the run's own: a run
    points a variable at its own Secret by naming it."""
    wanted = [e.model_dump(mode="json", by_alias=True) for e in runtime.spec.defaults.secret_env]
    own = spec.get("secretEnv", [])
    if not wanted or not isinstance(own, list):
        return  # nothing to add, or a wrong type: the run's own problem, reported by parsing
    named = {e.get("name") for e in own if isinstance(e, dict)}
    spec["secretEnv"] = own + [e for e in wanted if e["name"] not in named]


def effective_document(doc: dict[str, Any], runtime: GRPORuntime) -> dict[str, Any]:
    """The run document with the runtime's defaults filled in where the run left them out."""
    out = copy.deepcopy(doc)
    if isinstance(out.get("spec"), dict):
        _fill_defaults(out["spec"], runtime)
    return out


def runtime_rules(run: GRPORun) -> list[Problem]:
    """What the run's runtime refuses once the run is parsed: an unknown instance type, the locks on images and
    nodes, and a multi-node run on a type without a fabric."""
    runtime, spec = runtime_of(run.spec), run.spec
    who = f"GRPORun {run.metadata.namespace}/{run.metadata.name} on GRPORuntime {runtime.metadata.name}"
    wanted = spec.topology.instance_type
    found = runtime.spec.instance_type(wanted)
    if found is None:
        offered = ", ".join(t.name for t in runtime.spec.instance_types)
        return [
            Problem(
                "spec.topology.instanceType",
                f"{echo(wanted)} is not an instance type of {who}; name one of {offered}, or add it to the runtime's "
                "instanceTypes",
            )
        ]
    out = []
    prefixes = runtime.spec.locks.image_prefixes
    images = [("spec.image", spec.image)]
    if spec.reward.remote is not None and spec.reward.remote.image is not None:
        images.append(("spec.reward.remote.image", spec.reward.remote.image))
    for path, image in images:
        if prefixes and not any(image_allowed(image, p) for p in prefixes):
            out.append(
                Problem(
                    path,
                    f"{echo(image)} is not from a registry {who} allows (locks.imagePrefixes: {', '.join(prefixes)}, "
                    "each matched up to a '/', ':' or '@'); use an image under one of them, or leave the field out "
                    "to get the runtime's default",
                )
            )
    out += _selector_problems(spec.scheduling.gpu_node_selector, found, who)
    nodes, most = worker_replicas(spec), runtime.spec.locks.max_nodes_per_run
    if most is not None and nodes > most:
        out.append(
            Problem(
                "spec.topology.actor.nodes",
                f"the run needs {nodes} worker nodes but {who} allows at most {most} per run (locks.maxNodesPerRun); "
                "use fewer nodes (actor.nodes, rollout.gpus) or ask the platform team to raise the lock",
            )
        )
    return out


def _selector_problems(selector: dict[str, str], instance: RuntimeInstanceType, who: str) -> list[Problem]:
    """A run's gpuNodeSelector narrows its instance type's node selector (the render merges the two): a key the type
    selects by with another value would move the workers off the planned nodes."""
    out = []
    for key, value in selector.items():
        own = instance.node_selector.get(key)
        if own is not None and own != value:
            out.append(
                Problem(
                    "spec.scheduling.gpuNodeSelector",
                    f"{echo(key)}: {echo(value)} conflicts with {echo(key)}: {echo(own)} of instance type "
                    f"{instance.name} ({who}): a run's selector narrows its type's, it cannot replace it (the plan's "
                    "GPUs and fabric are that type's); drop the key, or name the instance type of those nodes in "
                    "topology.instanceType",
                )
            )
    return out


# A required field a runtime can supply: the default that would.
_SUPPLIED = {
    "spec.image": "defaults.trainerImage",
    "spec.storage": "defaults.storage.claimName",
    "spec.storage.claimName": "defaults.storage.claimName",
}


def _with_runtime_fix(problem: Problem, runtime: GRPORuntime) -> Problem:
    source = _SUPPLIED.get(problem.path)
    if source is None or "required field is missing" not in problem.message:
        return problem
    return Problem(
        problem.path,
        f"required field is missing and GRPORuntime {runtime.metadata.name} has no {source}; add it to the run, "
        "or name a runtime that sets it (spec.runtimeRef)",
    )


def resolve(
    doc: Any, runtime: GRPORuntime | None = None, live: GRPORuntime | None = None
) -> tuple[GRPORun | None, list[Problem]]:
    """The effective GRPORun of a run document and its runtime (the built-in AWS types when None), or the
    problems: a locked field the run sets, what parsing refuses, what the runtime refuses. `live`: the GRPORuntime
    as it is now, when an edit of a started run (resolved against its recorded copy) is judged: its locks refuse
    too."""
    runtime = runtime or DEFAULT_RUNTIME
    if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
        locked = _lock_problems(doc, runtime)
        if live is not None:
            said = {p.path for p in locked}
            locked += [p for p in _lock_problems(doc, live, live=True) if p.path not in said]
        if locked:
            return None, locked
        doc = effective_document(doc, runtime)
    run, problems = parse_document(doc)
    if run is None:
        return None, [_with_runtime_fix(p, runtime) for p in problems]
    run.spec.bind_runtime(runtime)
    problems = runtime_rules(run)
    return (None, problems) if problems else (run, [])


def record_of(runtime: GRPORuntime) -> RuntimeRecord:
    """What a run records of its runtime when it starts (`status.runtime`)."""
    return RuntimeRecord(
        name=runtime.metadata.name, resource_version=runtime.metadata.resource_version, spec=runtime.spec
    )


def runtime_from_record(record: RuntimeRecord) -> GRPORuntime:
    """The runtime a started run keeps resolving against: its recorded copy, whatever the live object says now."""
    return GRPORuntime(
        api_version="grpo.dev/v1alpha1",
        kind="GRPORuntime",
        metadata=RuntimeMeta(name=record.name, resource_version=record.resource_version),
        spec=record.spec,
    )
