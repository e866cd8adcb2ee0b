"""`GRPORuntime` (cluster-scoped, grpo.dev/v1alpha1): the nodes, fabric, images, storage and scheduling a platform
team offers, so a GRPORun names only what it trains and on how many nodes.

A runtime lists its GPU instance types (what each node has and how pods find it), defaults a run may leave out,
and locks a run may not break. `grpo_operator.planning.runtime.resolve` turns a run and a runtime into one
effective GRPORun; the built-in AWS types are the default runtime (`grpo_operator.planning.instances`).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from grpo_operator.api.base import ApiModel
from grpo_operator.api.quote import echo
from grpo_operator.api.spec import (
    ENV_NAME,
    ENV_NAME_RULE,
    SECRET_ENV_LIST,
    AbsPath,
    GuardsSpec,
    ImageRef,
    LabelMap,
    ObjectName,
    QueueName,
    SecretEnv,
    Toleration,
    cel,
    mount_cel,
    rules,
)

RUNTIME_KIND = "GRPORuntime"
RUNTIME_PLURAL = "grporuntimes"
RUNTIME_SINGULAR = "grporuntime"
RUNTIME_SHORT_NAMES = ["grport"]
# The runtime a run without spec.runtimeRef resolves against: the chart installs it from the built-in table.
DEFAULT_RUNTIME_NAME = "default"

# An instance type's name: what `spec.topology.instanceType` says (p5en.48xlarge, gpu-h100-ib, ...).
InstanceTypeRef = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", min_length=1, max_length=63)
]
# An env map's keys are environment variable names. A structural schema has no propertyNames, so the key rule is
# CEL for the CRD and `_env_names` for `grpo validate`.
_ENV_NAME = f"^{ENV_NAME}$"
_ENV_NAME_RULE = ENV_NAME_RULE


def _env_names(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if not re.fullmatch(_ENV_NAME, key) or len(key) > 128:
            raise PydanticCustomError(
                "env_name", "key {key} is not {rule}; fix the key", {"key": repr(echo(key)), "rule": _ENV_NAME_RULE}
            )
    return value


EnvValue = Annotated[str, StringConstraints(pattern=r"^[^\x00]*$", max_length=1024)]
EnvMap = Annotated[
    dict[str, EnvValue],
    Field(max_length=32),
    AfterValidator(_env_names),
    Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(k, size(k) <= 128 && k.matches('" + _ENV_NAME.replace("\\", "\\\\") + "'))",
                    "message": f"every key must be {_ENV_NAME_RULE}",
                }
            ]
        }
    ),
]
# An extended resource name a device plugin advertises (vendor-domain/name).
ResourceName = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        max_length=253,
    ),
]


class FabricType(StrEnum):
    EFA = "efa"
    INFINIBAND = "infiniband"
    ROCE = "roce"
    NONE = "none"


class Fabric(ApiModel):
    """The network between nodes: a device plugin's resource a multi-node worker requests in full, the env NCCL
    needs to use it, and the preflight that checks the pod sees it. `none`: sockets only, single-node runs."""

    model_config = rules(
        cel(
            "self.type == 'none' ? (!has(self.resourceName) && !has(self.count)) : "
            "(has(self.resourceName) && has(self.count))",
            "resourceName and count are required for a fabric other than none and must be unset for none",
            ".resourceName",
        ),
    )
    type: FabricType = Field(
        description="efa (libfabric over AWS EFA; preflight fi_info), infiniband (NCCL over IB verbs; preflight "
        "ibv_devinfo, an active InfiniBand port), roce (NCCL over IB verbs on Ethernet: RDMA NICs of e.g. the NVIDIA "
        "network operator's rdma/rdma_shared_device_eth; preflight ibv_devinfo, an active Ethernet port; set "
        "NCCL_IB_GID_INDEX in env) or none (sockets; single-node runs only)."
    )
    resource_name: ResourceName | None = Field(
        default=None,
        description="Extended resource of the fabric's device plugin (e.g. rdma/ib); unset for none.",
    )
    count: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Devices of that resource a node has allocatable; a multi-node worker requests all of them.",
    )
    env: EnvMap = Field(
        default_factory=dict,
        description="Env the fabric needs in every worker of a multi-node run (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...).",
    )

    @model_validator(mode="after")
    def _members_follow_the_type(self) -> Fabric:
        if self.type is FabricType.NONE and (self.resource_name is not None or self.count is not None):
            raise PydanticCustomError(
                "fabric",
                "resourceName and count must be unset for none (sockets only); remove them, or pick efa, infiniband or roce",
            )
        if self.type is not FabricType.NONE and (self.resource_name is None or self.count is None):
            raise PydanticCustomError(
                "fabric",
                "resourceName and count are required for fabric {type}; set the device plugin's resource and "
                "the count a node has allocatable",
                {"type": self.type.value},
            )
        return self


class RuntimeInstanceType(ApiModel):
    """One kind of GPU node: what it has (the memory plan and the pods' requests read these) and how pods find it."""

    name: InstanceTypeRef = Field(description="What spec.topology.instanceType names.")
    gpu_model: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_. ]*$", max_length=63)] = Field(
        description="GPU model, for the plan and kubectl (H100, H200, L40S, ...)."
    )
    gpus_per_node: int = Field(ge=1, le=8, description="GPUs per node (nvidia.com/gpu allocatable).")
    gpu_memory_gib: float = Field(
        gt=0, le=4096, description="Usable memory of one GPU in GiB (nvidia-smi's total, before any CUDA context)."
    )
    vcpus: int = Field(ge=1, le=4096, description="vCPUs of a node.")
    memory_gib: int = Field(ge=1, le=65536, description="Host memory of a node in GiB.")
    nvlink_gbps: float = Field(
        default=0,
        ge=0,
        le=10000,
        description="NVLink bandwidth per GPU (unidirectional GB/s): a quarter of it is the preflight's all-reduce "
        "floor; 0 reports only.",
    )
    node_selector: LabelMap = Field(default_factory=dict, description="Labels that select these nodes.")
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=16, description="Tolerations of the taints these nodes carry."
    )
    fabric: Fabric = Field(description="The network between these nodes.")
    interruption_notice_seconds: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description="Seconds between the capacity provider's interruption notice and the node's termination (EC2 "
        "spot: 120), whatever the pods' grace; the workers' preStop save (a rollout step, then the checkpoint) must "
        "fit in it. grpo validate and grpo plan warn when it does not; unset: no notice to fit in.",
    )


class StorageDefaults(ApiModel):
    model_config = rules(mount_cel("mountPath"))
    claim_name: ObjectName | None = Field(
        default=None, description="ReadWriteMany claim a run mounts when it names none (in the run's namespace)."
    )
    mount_path: AbsPath | None = Field(default=None, description="Where the claim is mounted.")
    save_interval: int | None = Field(
        default=None, ge=1, le=1000000, description="Checkpoint interval in rollouts a run gets when it sets none."
    )


# Kubernetes quantities as a pod spec takes them: CPUs whole, decimal or in millicores; memory in bytes or binary units.
CpuQuantity = Annotated[str, StringConstraints(pattern=r"^([0-9]+m|[0-9]+(\.[0-9]{1,3})?)$", max_length=16)]
MemoryQuantity = Annotated[str, StringConstraints(pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)?$", max_length=16)]


class PodSize(ApiModel):
    """CPU and memory of a CPU pod: its requests, and its memory limit."""

    cpu: CpuQuantity = Field(description="CPU request (2, 0.5 or 500m).")
    memory: MemoryQuantity = Field(description="Memory request and limit (8Gi, 512Mi).")


class SchedulingDefaults(ApiModel):
    queue_name: QueueName | None = Field(default=None, description="Kueue LocalQueue of a run that names none.")
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=16, description="Tolerations added to every run's worker pods."
    )
    head_node_selector: LabelMap = Field(default_factory=dict, description="Node selector of the Ray head.")
    priority_class_name: ObjectName | None = Field(default=None, description="PriorityClass of the Ray pods.")
    head_resources: PodSize | None = Field(
        default=None, description="Size of the Ray head pod; default 2 CPUs and 8Gi (the operator's)."
    )
    reward_resources: PodSize | None = Field(
        default=None,
        description="Size of each reward service pod; default 2 CPUs and 4Gi (the operator's). It runs one scoring "
        "process per whole CPU, at least one.",
    )


class RuntimeDefaults(ApiModel):
    """What a run may leave out: the runtime fills it in."""

    instance_type: InstanceTypeRef | None = Field(
        default=None, description="Instance type of a run that names none; default: the first of instanceTypes."
    )
    trainer_image: ImageRef | None = Field(default=None, description="Trainer image of a run that sets no spec.image.")
    reward_image: ImageRef | None = Field(
        default=None, description="Reward service image of a remote-reward run that sets none."
    )
    storage: StorageDefaults = Field(default_factory=StorageDefaults, description="Shared volume defaults.")
    scheduling: SchedulingDefaults = Field(default_factory=SchedulingDefaults, description="Scheduling defaults.")
    guards: GuardsSpec | None = Field(default=None, description="Guards of a run that sets no spec.guards.")
    env: EnvMap = Field(default_factory=dict, description="Extra env of every Ray pod of every run.")
    secret_env: list[SecretEnv] = Field(
        default_factory=list,
        max_length=32,
        description="Env from Secrets every run gets unless it names the variable in its own spec.secretEnv; each "
        "Secret must exist in the run's namespace.",
        json_schema_extra=SECRET_ENV_LIST,
    )


# Fields a platform can forbid runs to set (the runtime's default is then the only value).
LockableField = Literal[
    "image", "reward.remote.image", "storage.claimName", "storage.mountPath", "scheduling.queueName",
    "scheduling.priorityClassName", "guards",
]  # fmt: skip


class RuntimeLocks(ApiModel):
    """What a run may not override."""

    image_prefixes: list[Annotated[str, StringConstraints(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=16,
        description="The trainer and reward images must start with one of these (e.g. registry.example.com/ml/).",
    )
    max_nodes_per_run: int | None = Field(default=None, ge=1, le=4096, description="Most worker nodes one run uses.")
    fields: list[LockableField] = Field(
        default_factory=list, max_length=16, description="Fields a run may not set: the runtime's default is used."
    )


class RuntimeDebug(ApiModel):
    """How far a platform lets its runs' processes be inspected."""

    ptrace: bool = Field(
        default=False,
        description="Add SYS_PTRACE to the Ray containers and turn on the Ray dashboard's py-spy stacks "
        "(RAY_DASHBOARD_ENABLE_PROFILING=1), which the evidence capture then reads too. Any process in a Ray pod may "
        "then read and write the memory of the others there. Off (the default): stacks come from the image's "
        "faulthandler hook, which needs no capability (docs/SECURITY.md).",
    )


# The supported miles versions (grpo_operator.planning.miles_parser.MILES_VERSIONS holds their flag tables).
MilesVersion = Literal["dec268f7", "v0.1.0"]


class GRPORuntimeSpec(ApiModel):
    """The node types, fabric, defaults and locks a platform offers GRPORuns."""

    model_config = rules(
        cel(
            "self.instanceTypes.all(a, self.instanceTypes.exists_one(b, b.name == a.name))",
            "instanceTypes names must be unique",
            ".instanceTypes",
        ),
        cel(
            "!has(self.defaults) || !has(self.defaults.instanceType) || "
            "self.instanceTypes.exists(t, t.name == self.defaults.instanceType)",
            "defaults.instanceType must name one of instanceTypes",
            ".defaults.instanceType",
        ),
    )
    instance_types: list[RuntimeInstanceType] = Field(
        min_length=1, max_length=32, description="The GPU node types runs may name in spec.topology.instanceType."
    )
    miles_version: MilesVersion = Field(
        default="dec268f7",
        description="The miles version of this runtime's trainer images (their label dev.grpo.miles.version): "
        "spec.extraArgs is checked against its flags. Supported: dec268f7, v0.1.0.",
    )
    defaults: RuntimeDefaults = Field(default_factory=RuntimeDefaults, description="What a run may leave out.")
    locks: RuntimeLocks = Field(default_factory=RuntimeLocks, description="What a run may not override.")
    debug: RuntimeDebug = Field(default_factory=RuntimeDebug, description="How far runs' processes may be inspected.")

    @model_validator(mode="after")
    def _names_resolve(self) -> GRPORuntimeSpec:
        names = [t.name for t in self.instance_types]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise PydanticCustomError(
                "runtime", "instanceTypes names must be unique; {name} appears twice", {"name": repr(duplicate)}
            )
        chosen = self.defaults.instance_type
        if chosen is not None and chosen not in names:
            raise PydanticCustomError(
                "runtime",
                "defaults.instanceType {name} is not one of instanceTypes ({names}); name one of them",
                {"name": repr(chosen), "names": ", ".join(names)},
            )
        return self

    def instance_type(self, name: str) -> RuntimeInstanceType | None:
        return next((t for t in self.instance_types if t.name == name), None)

    @property
    def default_instance_type(self) -> str:
        return self.defaults.instance_type or self.instance_types[0].name


class RuntimeMeta(ApiModel):
    """The part of a runtime's metadata the operator reads (cluster-scoped: no namespace)."""

    model_config = ApiModel.model_config | {"extra": "ignore"}
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)] = Field(
        description="Runtime name."
    )
    resource_version: str | None = None


class GRPORuntime(ApiModel):
    api_version: Literal["grpo.dev/v1alpha1"] = Field(description="grpo.dev/v1alpha1")
    kind: Literal["GRPORuntime"] = Field(description="GRPORuntime")
    metadata: RuntimeMeta
    spec: GRPORuntimeSpec


class RuntimeRecord(ApiModel):
    """The runtime a run was resolved against, as copied when the run started (for `status.runtime`): later edits
    of the GRPORuntime, or its deletion, do not change a run that has started."""

    name: str = Field(description="The GRPORuntime's name.")
    resource_version: str | None = Field(default=None, description="Its resourceVersion when it was copied.")
    spec: GRPORuntimeSpec = Field(description="Its spec when it was copied: what the run resolves against.")
