"""A simulated GPU cluster on the local control plane: kube-scheduler, kwok nodes, the real KubeRay operator.

This module owns `SimulatedCluster`, a `ControlPlane` that also runs

- kube-scheduler (the control plane's, same Kubernetes version), so pods are placed by the real scheduler
  with its own words when they cannot be;
- kwok (`sigs.k8s.io/kwok`, with its "fast" node and pod stages from the module) playing the kubelet of
  every node annotated `kwok.x-k8s.io/node: fake`: nodes become Ready and keep their leases, a pod bound to
  one becomes Running and Ready (with a pod IP), a deleted pod goes at once;
- the KubeRay operator (`github.com/ray-project/kuberay/ray-operator`, the version whose CRDs are installed),
  which turns a RayCluster into head and worker pods and a head Service and writes the RayCluster status.

and registers fake nodes shaped like EKS nodes: one per GPU instance type of
`grpo_operator.planning.instances` by default (more where asked) and a CPU pool. A GPU node is made from an
instance type as a GRPORuntime describes it (`gpu_node`, `runtime_nodes`): the labels its node selector names,
a taint for each of its tolerations, its GPUs and fabric devices as extended resources; so a platform's own
runtime (an InfiniBand cluster, a small node) gets its node group the same way as the built-in AWS types, which
are the default runtime. No container runs: the
pods' processes are not started, only their lifecycle is played, so a Ray job still runs on the local Ray
head (`grpo_dev.localray`). The daemons run as cluster admin (this is a simulator, not an install).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_operator.api.catalog import InstanceTypeName
from grpo_operator.api.runtime import GRPORuntime
from grpo_operator.planning.instances import INSTANCE_TYPE_LABEL, INSTANCES, InstanceType

from grpo_dev.localcluster import versions as v
from grpo_dev.localcluster.build import kwok_stage_dir, tool_path
from grpo_dev.localcluster.controlplane import ControlPlane, _free_port
from grpo_dev.localcluster.realnode import GATEWAY, RealNode

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
REGION, ZONE = "us-west-2", "us-west-2a"
POD_CIDR = "10.244.0.0/16"


@dataclass(frozen=True)
class CpuShape:
    """A CPU-only EC2 instance type for the system/CPU node pool."""

    name: str
    vcpus: int
    memory_gib: int
    max_pods: int


# m7i.4xlarge: 16 vCPU, 64 GiB; max pods 234 (amazon-eks-ami eni-max-pods.txt, from memory: not checked here).
CPU_POOL_SHAPE = CpuShape("m7i.4xlarge", 16, 64, 234)
GPU_MAX_PODS = 100  # the 48xlarge GPU types in amazon-eks-ami eni-max-pods.txt (from memory: not checked here)
DEFAULT_GPU_NODES: Mapping[InstanceTypeName, int] = {name: 1 for name in INSTANCES} | {InstanceTypeName.P5EN: 3}
DEFAULT_CPU_NODES = 2


def _eks_reserved_cpu_millis(vcpus: int) -> int:
    """kube-reserved CPU of the EKS AMI: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25%
    of the rest (amazon-eks-ami bootstrap, `get_cpu_millicores_to_reserve`)."""
    millis = 60 + (10 if vcpus > 1 else 0) + 5 * min(max(vcpus - 2, 0), 2)
    return millis + (max(vcpus - 4, 0) * 25 + 9) // 10


def _allocatable(vcpus: int, memory_gib: int, max_pods: int) -> dict[str, str]:
    """Capacity less what the EKS AMI reserves: the CPU above, 255 MiB + 11 MiB per pod, 100 MiB eviction."""
    reserved_mib = 255 + 11 * max_pods + 100
    return {
        "cpu": f"{vcpus * 1000 - _eks_reserved_cpu_millis(vcpus)}m",
        "memory": f"{memory_gib * 1024 - reserved_mib}Mi",
        "pods": str(max_pods),
        "ephemeral-storage": "900Gi",
    }


def node_manifest(
    name: str,
    *,
    instance_type: str,
    vcpus: int,
    memory_gib: int,
    max_pods: int,
    nodegroup: str,
    gpus: int = 0,
    devices: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node as an EKS managed node group registers it, with the device plugins' extended resources.

    GPU nodes carry `nvidia.com/gpu` (NVIDIA device plugin) and their fabric's devices (`devices`: e.g.
    `vpc.amazonaws.com/efa` from the EFA device plugin, `rdma/ib` from an RDMA one; a count of 0 is left out, as
    a node without the plugin has none), and the `taints` their node group is given so that only pods tolerating
    them (the Ray workers) land there.
    """
    capacity = {"cpu": str(vcpus), "memory": f"{memory_gib}Gi", "pods": str(max_pods), "ephemeral-storage": "1000Gi"}
    allocatable = _allocatable(vcpus, memory_gib, max_pods)
    extended = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    extended |= {resource: str(count) for resource, count in (devices or {}).items() if count}
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        INSTANCE_TYPE_LABEL: instance_type,
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": ZONE,
        "eks.amazonaws.com/nodegroup": nodegroup,
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "type": "kwok",
        **(labels or {}),
    }
    digest = hashlib.sha256(name.encode()).digest()
    address = f"10.0.{digest[0]}.{digest[1] % 254 + 1}"  # the VPC address the kubelet would report
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels, "annotations": dict(KWOK_ANNOTATION)},
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": capacity | extended,
            "allocatable": allocatable | extended,
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        },
    }


def taints_of(instance: InstanceType) -> list[dict[str, str]]:
    """The taints nodes of `instance` carry: one per toleration its pods are given, each the narrowest taint that
    toleration admits. `Exists` takes any value: "true", as the GPU node groups' `nvidia.com/gpu=true` has it; no
    effect means every effect: NoSchedule, the one that keeps other pods off. A toleration without a key admits
    every taint, so it names none."""
    taints = []
    for toleration in instance.tolerations:
        if not toleration.get("key"):
            continue
        value = toleration.get("value") if toleration.get("operator", "Equal") == "Equal" else "true"
        taints.append(
            {"key": toleration["key"], "value": value or "", "effect": toleration.get("effect") or "NoSchedule"}
        )
    return taints


def gpu_node(
    name: str,
    instance: InstanceType,
    *,
    gpus: int | None = None,
    devices: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node of a GPU instance type as its runtime describes it (a built-in one of `INSTANCES`, or
    `InstanceType.of` a GRPORuntime's): the labels of its node selector, the taints of its tolerations, its GPUs
    and its fabric's devices. `gpus`, `devices` (fabric devices) and `labels` make a degraded or marked one."""
    resource = instance.fabric.resource_name
    fabric = {resource: instance.devices if devices is None else devices} if resource else {}
    return node_manifest(
        name,
        instance_type=instance.name,
        vcpus=instance.vcpus,
        memory_gib=instance.memory_gib,
        max_pods=GPU_MAX_PODS,
        nodegroup=f"gpu-{instance.name.split('.')[0]}",
        gpus=instance.gpus if gpus is None else gpus,
        devices=fabric,
        labels={**dict(instance.node_selector), **(labels or {})},
        taints=taints_of(instance),
    )


def cpu_node(name: str, shape: CpuShape = CPU_POOL_SHAPE, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return node_manifest(
        name,
        instance_type=shape.name,
        vcpus=shape.vcpus,
        memory_gib=shape.memory_gib,
        max_pods=shape.max_pods,
        nodegroup="cpu",
        labels=labels,
    )


def default_nodes(
    gpu_nodes: Mapping[InstanceTypeName, int] = DEFAULT_GPU_NODES, cpu_nodes: int = DEFAULT_CPU_NODES
) -> list[dict[str, Any]]:
    nodes = [cpu_node(f"cpu-{i}") for i in range(cpu_nodes)]
    for type_name, count in gpu_nodes.items():
        instance = INSTANCES[type_name]
        prefix = instance.name.replace(".", "-")
        nodes += [gpu_node(f"{prefix}-{i}", instance) for i in range(count)]
    return nodes


def runtime_nodes(
    runtime: GRPORuntime, gpu_nodes: Mapping[str, int] | None = None, *, head_nodes: int = 1
) -> list[dict[str, Any]]:
    """The node group a platform's GRPORuntime describes: `gpu_nodes[type]` nodes of each instance type named
    there (one of each by default), named `<runtime>-<type>-<i>`, and, where the runtime puts the Ray head on
    nodes of its own (`defaults.scheduling.headNodeSelector`), `head_nodes` CPU-pool nodes carrying those labels."""
    counts = {t.name: 1 for t in runtime.spec.instance_types} if gpu_nodes is None else gpu_nodes
    prefix = runtime.metadata.name
    nodes = []
    for type_name, count in counts.items():
        spec = runtime.spec.instance_type(type_name)
        if spec is None:
            raise KeyError(f"{type_name} is not an instance type of GRPORuntime {prefix}")
        instance = InstanceType.of(spec)
        nodes += [gpu_node(f"{prefix}-{type_name}-{i}", instance) for i in range(count)]
    head = runtime.spec.defaults.scheduling.head_node_selector
    if head:
        nodes += [cpu_node(f"{prefix}-head-{i}", labels=head) for i in range(head_nodes)]
    return nodes


NVIDIA_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
EFA_PLUGIN_IMAGE = "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.6"
KUBERAY_NAMESPACE = "kuberay-system"


def _on_types(types: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _workload(kind: str, namespace: str, name: str, image: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": name, "image": image}], "enableServiceLinks": False, **pod},
        },
    }
    if kind == "Deployment":
        spec["replicas"] = 1
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def platform_manifests() -> list[dict[str, Any]]:
    """What a platform installs beside the nodes, as in-cluster readers (`grpo doctor`) find it: the NVIDIA and EFA
    device plugins' DaemonSets on the GPU (EFA) node types, their pods played by kwok; and the KubeRay operator's
    Deployment where its helm chart puts it. KubeRay itself runs as a local process (below): its Deployment here
    is the record of that install, with the image of the version that runs, and its pod is kwok's too."""
    gpu_types = sorted(str(name) for name in INSTANCES)
    efa_types = sorted(str(name) for name, instance in INSTANCES.items() if instance.efa)
    tolerate_all = {"tolerations": [{"operator": "Exists"}], "priorityClassName": "system-node-critical"}
    return [
        _workload(
            "DaemonSet",
            "kube-system",
            "nvidia-device-plugin-daemonset",
            NVIDIA_PLUGIN_IMAGE,
            {"affinity": _on_types(gpu_types), **tolerate_all},
        ),
        _workload(
            "DaemonSet",
            "kube-system",
            "aws-efa-k8s-device-plugin-daemonset",
            EFA_PLUGIN_IMAGE,
            {"affinity": _on_types(efa_types), **tolerate_all},
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBERAY_NAMESPACE}},
        _workload(
            "Deployment",
            KUBERAY_NAMESPACE,
            "kuberay-operator",
            f"quay.io/kuberay/operator:{v.KUBERAY_VERSION}",
            {"nodeSelector": {"eks.amazonaws.com/nodegroup": "cpu"}},
        ),
    ]


def bound_claim(
    namespace: str, claim: str, size: str, source: dict[str, Any], node_affinity: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """A ReadWriteMany PersistentVolume with `source` (its volume source: `csi`, `hostPath`, ...) and the claim
    `claim` bound to it, as a platform pre-provisions a shared file system for runs."""
    volume = f"{namespace}-{claim}"[:253]
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain",
        **source,
        "claimRef": {"namespace": namespace, "name": claim},
    }
    if node_affinity:
        spec["nodeAffinity"] = node_affinity
    return [
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume}, "spec": spec},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": size}},
            },
        },
    ]


class SimulatedCluster(ControlPlane):
    """`ControlPlane` + kube-scheduler + kwok + the KubeRay operator + fake EKS nodes (see the module doc).

    Extra attributes after start: `nodes` (the node names), `kuberay_log` (path of KubeRay's JSON log),
    `real_node` (the `RealNode` when asked for with `real_node=True`: a kubelet node beside the kwok ones).
    `add_nodes(manifests)` registers more nodes and waits until kwok has made them Ready.
    """

    def __init__(
        self,
        *,
        nodes: list[dict[str, Any]] | None = None,
        real_node: bool = False,
        start_timeout: float = 180.0,
        report: Callable[[str], None] = lambda _: None,
        **kwargs: Any,
    ) -> None:
        if real_node:
            kwargs["advertise_address"] = GATEWAY
        super().__init__(scheduler=True, start_timeout=start_timeout, report=report, **kwargs)
        self._node_manifests = default_nodes() if nodes is None else nodes
        self.nodes: list[str] = []
        self.real_node = RealNode(report, start_timeout) if real_node else None

    def start(self) -> None:
        # the bridge must exist before kube-apiserver listens on its address
        if self.real_node is not None:
            self.real_node.prepare_host()
        try:
            super().start()
        except BaseException:
            if self.real_node is not None:
                self.real_node.stop()
            raise

    def _stop_processes(self) -> None:
        # the node's daemons go first, while the API server they report to is still there
        try:
            if self.real_node is not None:
                self.real_node.stop_daemons()
        finally:
            super()._stop_processes()

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.real_node is not None:
                self.real_node.stop()

    def dead(self) -> list[str]:
        return super().dead() + (self.real_node.dead() if self.real_node is not None else [])

    @property
    def kuberay_log(self) -> Path:
        return self.log_dir / "kuberay-operator.log"

    def _start(self, binaries: dict[str, Path]) -> None:
        super()._start(binaries)
        kwok = tool_path("kwok", self._report)
        stages = kwok_stage_dir(self._report)
        operator = tool_path("ray-operator", self._report)
        self._launch(
            "kwok",
            [
                str(kwok),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=" + ",".join(f"{k}={v}" for k, v in KWOK_ANNOTATION.items()),
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
                *(f"--config={stages / name}" for name in v.KWOK_STAGES),
            ],
        )
        self.add_nodes(self._node_manifests)
        self.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": platform_manifests()})
        )
        probe = _free_port()
        self._launch(
            "kuberay-operator",
            [
                str(operator),
                f"--kubeconfig={self.kubeconfig}",
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{probe}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=json",
            ],
        )
        self._wait("the KubeRay operator /readyz", lambda: self._http_ok(f"http://127.0.0.1:{probe}/readyz"))
        self.kubectl("rollout", "status", "-n", KUBERAY_NAMESPACE, "deployment/kuberay-operator", "--timeout=120s")
        for name in ("nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin-daemonset"):
            self.kubectl("rollout", "status", "-n", "kube-system", f"daemonset/{name}", "--timeout=120s")
        if self.real_node is not None:
            self.real_node.start(self)
            self.nodes.append(self.real_node.name)
        self._report(f"simulated cluster: {len(self.nodes)} nodes, kube-scheduler, KubeRay {v.KUBERAY_VERSION}")

    def add_nodes(self, manifests: list[dict[str, Any]]) -> list[str]:
        """Create the nodes and wait until each is Ready (kwok's node-initialize stage)."""
        if not manifests:
            return []
        items = {"apiVersion": "v1", "kind": "List", "items": manifests}
        self.kubectl("create", "-f", "-", input=json.dumps(items))
        names = [m["metadata"]["name"] for m in manifests]
        self.kubectl("wait", "--for=condition=Ready", "--timeout=120s", *(f"node/{n}" for n in names))
        self.nodes += names
        return names

    def kuberay_errors(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """KubeRay's log entries at level error (for RayClusters in `namespace` when given)."""
        entries = []
        for line in self.kuberay_log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("level") != "error":
                continue
            if (
                namespace is None
                or entry.get("RayCluster", {}).get("namespace") == namespace
                or entry.get("namespace") == namespace
            ):
                entries.append(entry)
        return entries

    def provide_claim(self, namespace: str, claim: str, size: str = "1200Gi") -> None:
        """A ReadWriteMany PVC `claim` bound to a pre-provisioned FSx for Lustre PersistentVolume (never
        mounted: no kubelet runs), as a run's prerequisites in the README ask for."""
        fsx = {
            "csi": {
                "driver": "fsx.csi.aws.com",
                "volumeHandle": "fs-0123456789abcdef0",
                "volumeAttributes": {
                    "dnsname": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                    "mountname": "abcdefgh",
                },
            }
        }
        items = bound_claim(namespace, claim, size, fsx)
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        self.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Bound", "--timeout=120s", f"pvc/{claim}")
