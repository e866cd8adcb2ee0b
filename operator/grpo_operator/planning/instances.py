"""Built-in GPU instance types: GPUs, usable GPU memory, EFA devices, CPU and host memory per node.

GPU memory is what `nvidia-smi` reports as total (what a process can allocate before the CUDA context),
converted to GiB; EFA is the count the EFA device plugin advertises as allocatable, which is what a pod
must request in full (a partial request passes all-reduce and breaks point-to-point traffic).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class InstanceTypeName(StrEnum):
    """Names accepted in `spec.topology.instanceType`."""

    P5 = "p5.48xlarge"
    P5EN = "p5en.48xlarge"
    P6_B200 = "p6-b200.48xlarge"
    P6_B300 = "p6-b300.48xlarge"


ALLREDUCE_FLOOR_FRACTION = 0.25


@dataclass(frozen=True)
class InstanceType:
    """Capacity of one node of a GPU instance type."""

    name: InstanceTypeName
    gpu_model: str
    gpus: int
    gpu_gib: float
    efa: int
    vcpus: int
    memory_gib: int
    nvlink_gbps: int  # NVLink bandwidth per GPU (unidirectional, GB/s), for preflight expectations

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


INSTANCES: dict[InstanceTypeName, InstanceType] = {
    # AWS p5.48xlarge: 8x H100 80 GB (81559 MiB in nvidia-smi), 32 EFA, 192 vCPU, 2 TiB.
    InstanceTypeName.P5: InstanceType(
        name=InstanceTypeName.P5,
        gpu_model="H100",
        gpus=8,
        gpu_gib=79.6,
        efa=32,
        vcpus=192,
        memory_gib=2048,
        nvlink_gbps=450,
    ),
    # AWS p5en.48xlarge: 8x H200 141 GB (143771 MiB in nvidia-smi); 15 allocatable
    # vpc.amazonaws.com/efa per node (16 physical, one held back by the device plugin).
    InstanceTypeName.P5EN: InstanceType(
        name=InstanceTypeName.P5EN,
        gpu_model="H200",
        gpus=8,
        gpu_gib=140.4,
        efa=15,
        vcpus=192,
        memory_gib=2048,
        nvlink_gbps=450,
    ),
    # AWS p6-b200.48xlarge: 8x B200 (183359 MiB in nvidia-smi), 8 EFA (8x400 Gbps), 192 vCPU, 2 TiB.
    InstanceTypeName.P6_B200: InstanceType(
        name=InstanceTypeName.P6_B200,
        gpu_model="B200",
        gpus=8,
        gpu_gib=179.1,
        efa=8,
        vcpus=192,
        memory_gib=2048,
        nvlink_gbps=900,
    ),
    # AWS p6-b300.48xlarge: 8x B300 288 GB HBM3e; 16 allocatable EFA per node.
    InstanceTypeName.P6_B300: InstanceType(
        name=InstanceTypeName.P6_B300,
        gpu_model="B300",
        gpus=8,
        gpu_gib=268.2,
        efa=16,
        vcpus=192,
        memory_gib=4096,
        nvlink_gbps=900,
    ),
}
