"""The built-in GPU instance types, as the default GRPORuntime: the AWS types a run gets without a runtime.

GPU memory is what `nvidia-smi` reports as total (what a process can allocate before the CUDA context),
converted to GiB; EFA is the count the EFA device plugin advertises as allocatable, which is what a pod
must request in full (a partial request passes all-reduce and breaks point-to-point traffic). This table is
the one source of the AWS types: the chart's editable default runtime and examples/runtimes/aws.yaml are
generated from it (`DEFAULT_RUNTIME`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_operator.api import API_VERSION
from grpo_operator.api.catalog import InstanceTypeName
from grpo_operator.api.runtime import (
    DEFAULT_RUNTIME_NAME,
    RUNTIME_KIND,
    Fabric,
    FabricType,
    GRPORuntime,
    RuntimeInstanceType,
)
from grpo_operator.api.spec import GRPORunSpec

ALLREDUCE_FLOOR_FRACTION = 0.25
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The taint GPU node groups carry, so only pods asking for GPUs land there.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class InstanceType:
    """Capacity of one node of a GPU instance type, and how its pods find it and talk across nodes."""

    name: str
    gpu_model: str
    gpus: int
    gpu_gib: float
    vcpus: int
    memory_gib: int
    nvlink_gbps: float  # NVLink bandwidth per GPU (unidirectional, GB/s), for preflight expectations
    fabric: Fabric
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, spec: RuntimeInstanceType) -> InstanceType:
        return cls(
            name=spec.name,
            gpu_model=spec.gpu_model,
            gpus=spec.gpus_per_node,
            gpu_gib=spec.gpu_memory_gib,
            vcpus=spec.vcpus,
            memory_gib=spec.memory_gib,
            nvlink_gbps=spec.nvlink_gbps,
            fabric=spec.fabric,
            node_selector=tuple(spec.node_selector.items()),
            tolerations=tuple(t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations),
        )

    @property
    def devices(self) -> int:
        """Fabric devices a node has allocatable (0 without a fabric)."""
        return self.fabric.count or 0

    @property
    def efa(self) -> int:
        """EFA devices a node has allocatable (0 for another fabric)."""
        return self.devices if self.fabric.type is FabricType.EFA else 0

    def allreduce_floor_gbps(self, gpus: int) -> float:
        """The intra-node all-reduce bus bandwidth a healthy node reaches at least (preflight floor, GB/s).

        A quarter of the per-GPU NVLink bandwidth: NCCL's all-reduce over NVSwitch reaches roughly 70-85% of it at
        1 GiB on a healthy node (2 x H200: 326-332 GB/s of 450, docs/BENCHMARKS.md), while a node whose NVLink or
        NVSwitch is degraded falls back to PCIe (at most 64 GB/s per GPU on Gen5), far below the floor. One GPU has
        no bus to measure: no floor."""
        return ALLREDUCE_FLOOR_FRACTION * self.nvlink_gbps if gpus > 1 else 0.0

    @property
    def shm_gib(self) -> int:
        """`/dev/shm` for a worker pod: 256 GiB (what p5en runs use), bounded by an eighth of host memory."""
        return min(256, self.memory_gib // 8)


# The EFA fabric: the device plugin's resource, and the libfabric/NCCL env a multi-node worker needs.
EFA_RESOURCE = "vpc.amazonaws.com/efa"
_EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "RDMAV_FORK_SAFE": "1",
    "NCCL_PROTO": "Simple",
}


def _aws(name: InstanceTypeName, gpu_model: str, gpu_gib: float, *, efa: int, memory_gib: int, nvlink: int) -> Any:
    return {
        "name": name.value,
        "gpuModel": gpu_model,
        "gpusPerNode": 8,
        "gpuMemoryGiB": gpu_gib,
        "vcpus": 192,
        "memoryGiB": memory_gib,
        "nvlinkGBps": nvlink,
        "nodeSelector": {INSTANCE_TYPE_LABEL: name.value},
        "tolerations": [GPU_TOLERATION],
        "fabric": {"type": "efa", "resourceName": EFA_RESOURCE, "count": efa, "env": _EFA_ENV},
    }


DEFAULT_RUNTIME_DOCUMENT: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": RUNTIME_KIND,
    "metadata": {"name": DEFAULT_RUNTIME_NAME},
    "spec": {
        "instanceTypes": [
            # AWS p5.48xlarge: 8x H100 80 GB (81559 MiB in nvidia-smi), 32 EFA, 192 vCPU, 2 TiB.
            _aws(InstanceTypeName.P5, "H100", 79.6, efa=32, memory_gib=2048, nvlink=450),
            # AWS p5en.48xlarge: 8x H200 141 GB (143771 MiB in nvidia-smi); 15 allocatable
            # vpc.amazonaws.com/efa per node (16 physical, one held back by the device plugin).
            _aws(InstanceTypeName.P5EN, "H200", 140.4, efa=15, memory_gib=2048, nvlink=450),
            # AWS p6-b200.48xlarge: 8x B200 (183359 MiB in nvidia-smi), 8 EFA (8x400 Gbps), 192 vCPU, 2 TiB.
            _aws(InstanceTypeName.P6_B200, "B200", 179.1, efa=8, memory_gib=2048, nvlink=900),
            # AWS p6-b300.48xlarge: 8x B300 288 GB HBM3e; 16 allocatable EFA per node.
            _aws(InstanceTypeName.P6_B300, "B300", 268.2, efa=16, memory_gib=4096, nvlink=900),
        ],
        "defaults": {"instanceType": InstanceTypeName.P5EN.value},
    },
}
DEFAULT_RUNTIME = GRPORuntime.model_validate(DEFAULT_RUNTIME_DOCUMENT, by_name=False, strict=False)

INSTANCES: dict[InstanceTypeName, InstanceType] = {
    InstanceTypeName(t.name): InstanceType.of(t) for t in DEFAULT_RUNTIME.spec.instance_types
}


def runtime_of(spec: GRPORunSpec) -> GRPORuntime:
    """The runtime a spec was resolved against (`planning.runtime.resolve`); the built-in AWS types when none."""
    return spec.runtime or DEFAULT_RUNTIME


def instance_of(spec: GRPORunSpec) -> InstanceType:
    """The node type of a resolved spec (resolution has checked that its runtime has it)."""
    runtime = runtime_of(spec)
    found = runtime.spec.instance_type(spec.topology.instance_type)
    if found is None:
        raise KeyError(f"{spec.topology.instance_type} is not an instance type of GRPORuntime {runtime.metadata.name}")
    return InstanceType.of(found)
