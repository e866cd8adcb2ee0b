"""The rules a GRPORuntime's values must keep so a run that validates against it also starts on the cluster.

Each is a class of value the schema lets through and the cluster or the render would break: an env name the render
sets itself (`planning.secretenv.runtime_env_owner`: the runtime's value would be dropped or doubled), a fabric
resource that is one the render requests itself (it would overwrite the GPU request), a memory size without a unit
(Kubernetes reads a bare number as bytes), a mount path over a system directory or the render's own mounts
(`planning.validation.mount_problem`), and an image prefix, whose match ends at a registry or path boundary
(`image_allowed`). `runtime_problems` runs where a runtime is read, for `grpo validate --runtime` and the operator
alike (`planning.documents.parse_runtime`). Pure.
"""

from __future__ import annotations

import re

from grpo_operator.api.quote import echo
from grpo_operator.api.runtime import GRPORuntime, PodSize
from grpo_operator.planning.secretenv import runtime_env_owner
from grpo_operator.planning.validation import Problem, mount_problem

# Resources the render requests in the Ray pods itself (render/raycluster.py `worker_group`, `head_group`); a
# fabric naming one would overwrite that request. Kubernetes keeps the kubernetes.io domains for its own.
RENDERED_RESOURCES = ("nvidia.com/gpu", "cpu", "memory", "ephemeral-storage")
_KUBERNETES_DOMAIN = re.compile(r"^([^/]*\.)?kubernetes\.io/")

MEMORY_FLOOR_BYTES = 1 << 20  # 1Mi: no process starts in less
_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def image_allowed(image: str, prefix: str) -> bool:
    """Whether `image` is under `prefix` at a boundary: the prefix ends with `/`, or the image goes on with `/`,
    `:` or `@` right after it (or is it). `registry.example.com` does not admit `registry.example.com.evil.io/x`,
    nor `.../ml` admit `.../ml-untrusted/x`."""
    if not image.startswith(prefix):
        return False
    rest = image[len(prefix) :]
    return prefix.endswith(("/", ":", "@")) or rest == "" or rest[0] in "/:@"


def memory_problem(path: str, value: str) -> Problem | None:
    """A memory size below `MEMORY_FLOOR_BYTES`: a unit left out (`"8"` is 8 bytes), named with the likely one."""
    match = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti)?", value)
    if match is None:
        return None  # the schema's own pattern refuses it
    number, unit = int(match.group(1)), match.group(2) or ""
    if number * _UNITS[unit] >= MEMORY_FLOOR_BYTES:
        return None
    said = f"{number} bytes" if not unit else f"{number} {unit}B"
    return Problem(
        path,
        f"{echo(value)} is {said}: Kubernetes reads a size without a unit as bytes, and no process starts in less "
        f"than 1Mi; write the unit (did you mean {number}Gi?)",
    )


def _env_problems(runtime: GRPORuntime) -> list[Problem]:
    spec, out = runtime.spec, []
    named = [("spec.defaults.env", name) for name in spec.defaults.env]
    named += [(f"spec.defaults.secretEnv[{i}].name", e.name) for i, e in enumerate(spec.defaults.secret_env)]
    named += [
        (f"spec.instanceTypes[{i}].fabric.env", name)
        for i, t in enumerate(spec.instance_types)
        for name in t.fabric.env
    ]
    for where, name in named:
        owner = runtime_env_owner(name)
        path = where if where.endswith(".name") else f"{where}.{name}"
        if owner is not None:
            out.append(
                Problem(
                    path,
                    f"{echo(name)} is set by {owner}: a runtime's value would be dropped or the pods would get the "
                    "variable twice; remove it from the runtime (it is the operator's to set)",
                )
            )
    plain = set(spec.defaults.env)
    for i, entry in enumerate(spec.defaults.secret_env):
        if entry.name in plain:
            out.append(
                Problem(
                    f"spec.defaults.secretEnv[{i}].name",
                    f"{echo(entry.name)} is also in spec.defaults.env: the pods would get the variable twice; keep "
                    "one of the two",
                )
            )
    return out


def _fabric_problems(runtime: GRPORuntime) -> list[Problem]:
    out = []
    for i, instance in enumerate(runtime.spec.instance_types):
        name = instance.fabric.resource_name
        if name is not None and (name in RENDERED_RESOURCES or _KUBERNETES_DOMAIN.match(name)):
            out.append(
                Problem(
                    f"spec.instanceTypes[{i}].fabric.resourceName",
                    f"{echo(name)} is a resource the render requests itself ({', '.join(RENDERED_RESOURCES)}) or "
                    "one Kubernetes keeps (kubernetes.io): the fabric's count would overwrite that request; name the "
                    "fabric device plugin's own resource (vpc.amazonaws.com/efa, rdma/ib, ...)",
                )
            )
    return out


def _size_problems(runtime: GRPORuntime) -> list[Problem]:
    scheduling, out = runtime.spec.defaults.scheduling, []
    sizes: list[tuple[str, PodSize | None]] = [
        ("spec.defaults.scheduling.headResources", scheduling.head_resources),
        ("spec.defaults.scheduling.rewardResources", scheduling.reward_resources),
    ]
    for where, size in sizes:
        if size is not None and (problem := memory_problem(f"{where}.memory", size.memory)) is not None:
            out.append(problem)
    return out


def runtime_problems(runtime: GRPORuntime) -> list[Problem]:
    """What a parsed GRPORuntime sets that a run on it could not start with."""
    out = _env_problems(runtime) + _fabric_problems(runtime) + _size_problems(runtime)
    mount = runtime.spec.defaults.storage.mount_path
    if mount is not None and (problem := mount_problem("spec.defaults.storage.mountPath", mount)) is not None:
        out.append(problem)
    return out
