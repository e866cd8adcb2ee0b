"""The RayCluster (ray.io/v1) of a run: a CPU-only head nothing can be scheduled on, and one GPU worker per node.

The head advertises no CPUs or GPUs (`num-cpus: "0"`, `num-gpus: "0"`, on a CPU node), so no actor that imports
CUDA lands where there is no libcuda. Each worker of a multi-node run asks for all of its node's fabric devices
and gets the fabric's env, both as the runtime's instance type describes them. `enableServiceLinks: false` everywhere, so a Service named `prometheus` cannot
inject `PROMETHEUS_PORT=tcp://...` into miles. The HF token, the Ray auth token and `spec.secretEnv` reach pods
only by secretKeyRef, never in a runtime env.
"""

from __future__ import annotations

import json
from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.grace import hook_wait_seconds, pod_grace_seconds
from grpo_operator.planning.instances import INSTANCE_TYPE_LABEL, INSTANCES, instance_of, runtime_of
from grpo_operator.render import names, queueing
from grpo_operator.render.job import NCCL_TRACE_ENTRIES, NCCL_TRACE_PREFIX, STACKS_DIR, save_sentinel
from grpo_operator.render.settings import DASHBOARD_PORT, RenderSettings

HOST_SHARE = 0.9  # of a node's vCPUs and memory requested by its worker pod (daemonsets need the rest)


def metadata(run: GRPORun, name: str, component: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": run.metadata.namespace,
        "labels": names.labels(run.metadata.name, component),
    }
    if run.metadata.uid:
        meta["ownerReferences"] = [names.owner_reference(run.metadata.name, run.metadata.uid)]
    return meta


def with_env(env: list[dict[str, Any]], values: dict[str, str]) -> list[dict[str, Any]]:
    """`env` with `values` set: a name already there takes the new value in place (one entry per name)."""
    out = [dict(e, value=values[e["name"]]) if e["name"] in values and "value" in e else e for e in env]
    present = {e["name"] for e in out}
    return out + [{"name": k, "value": v} for k, v in values.items() if k not in present]


def pod_env(run: GRPORun) -> list[dict[str, Any]]:
    """Environment common to every Ray pod."""
    env: list[dict[str, Any]] = [
        {"name": "MILES_HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "RAY_DEDUP_LOGS", "value": "0"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_memory_monitor_refresh_ms", "value": "0"},
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "^lo,docker"},
    ]
    env += debug_env(run)
    # Token auth on every Ray process and on KubeRay's `wait-gcs-ready` init container, which copies this env;
    # KubeRay's probes call health endpoints Ray serves without the token (docs/integrations/kuberay.md, ray.md).
    # The token itself only by reference (docs/SECURITY.md).
    env += [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {
            "name": "RAY_AUTH_TOKEN",
            "valueFrom": {
                "secretKeyRef": {"name": names.ray_auth_secret(run.metadata.name), "key": names.AUTH_TOKEN_KEY}
            },
        },
    ]
    env = with_env(env, runtime_of(run.spec).spec.defaults.env)
    secret = run.spec.hf_token_secret
    if secret is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
    # Tracker keys and other credentials, by reference only (planning/secretenv.py keeps the names apart from
    # those set above).
    for entry in run.spec.secret_env:
        ref = entry.secret_key_ref
        env.append({"name": entry.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def debug_env(run: GRPORun) -> list[dict[str, Any]]:
    """What the evidence capture reads without ptrace: every Python process's faulthandler hook writes into
    `STACKS_DIR` (grpo_launcher.stackdump), and torch's NCCL flight recorder dumps its last collectives there on a
    watchdog timeout (docs/integrations/torch.md). The dashboard's py-spy stacks only where the runtime grants
    ptrace (`spec.debug.ptrace`, docs/SECURITY.md)."""
    env = [
        {"name": "GRPO_STACKS_DIR", "value": STACKS_DIR},
        {"name": "TORCH_NCCL_TRACE_BUFFER_SIZE", "value": str(NCCL_TRACE_ENTRIES)},
        {"name": "TORCH_NCCL_DUMP_ON_TIMEOUT", "value": "1"},
        {"name": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "value": f"{STACKS_DIR}/{NCCL_TRACE_PREFIX}"},
    ]
    if ptrace_granted(run):
        env.append({"name": "RAY_DASHBOARD_ENABLE_PROFILING", "value": "1"})
    return env


def ptrace_granted(run: GRPORun) -> bool:
    return runtime_of(run.spec).spec.debug.ptrace


def _with_ptrace(run: GRPORun, security: dict[str, Any]) -> dict[str, Any]:
    """A Ray container's securityContext, with SYS_PTRACE added where the runtime grants it (py-spy)."""
    if not ptrace_granted(run):
        return security
    capabilities = dict(security["capabilities"])
    capabilities["add"] = [*capabilities.get("add", []), "SYS_PTRACE"]
    return {**security, "capabilities": capabilities}


def _shared_volume(run: GRPORun) -> dict[str, Any]:
    return {"name": "shared", "persistentVolumeClaim": {"claimName": run.spec.storage.claim_name}}


def _config_volume(run: GRPORun) -> dict[str, Any]:
    return {"name": "run-config", "configMap": {"name": names.config_map(run.metadata.name)}}


def _config_mount(settings: RenderSettings) -> dict[str, Any]:
    return {"name": "run-config", "mountPath": settings.config_dir, "readOnly": True}


def _place(pod: dict[str, Any], run: GRPORun, node_selector: dict[str, str]) -> None:
    """Node selector and priority class of a Ray pod, when the spec sets them."""
    if node_selector:
        pod["nodeSelector"] = dict(node_selector)
    if run.spec.scheduling.priority_class_name:
        pod["priorityClassName"] = run.spec.scheduling.priority_class_name


def ray_resources_param(resources: dict[str, float]) -> str:
    """`rayStartParams.resources` as KubeRay writes it itself: JSON in single quotes, `'{"gpu_node":1}'`.
    KubeRay puts it into the `ray start` shell line verbatim and also parses it, which fails on a doubly
    encoded value (docs/integrations/kuberay.md: ray start parameters)."""
    return "'" + json.dumps(resources, sort_keys=True, separators=(",", ":")) + "'"


# Without `scheduling.headNodeSelector` the CPU-only head must still not take a GPU node: a worker pod needs a
# whole node (one per node, anti-affinity), so a head there leaves a worker Pending whenever GPU nodes are
# untainted. A required node affinity, not a validation rule, so the default spec stays runnable: no node of a
# GPU instance type (the well-known instance-type label: the built-in types and those the run's runtime selects
# by it), none labelled by NVIDIA's GPU feature discovery.
def head_off_gpu_nodes(run: GRPORun) -> dict[str, Any]:
    types = {str(n) for n in INSTANCES}
    types |= {
        value for t in runtime_of(run.spec).spec.instance_types if (value := t.node_selector.get(INSTANCE_TYPE_LABEL))
    }
    expressions = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "NotIn", "values": sorted(types)},
        {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"},
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    }


def head_size(run: GRPORun, settings: RenderSettings) -> tuple[str, str]:
    """CPU and memory of the head pod: the runtime's when it sizes it (a small CPU node), else the operator's."""
    size = runtime_of(run.spec).spec.defaults.scheduling.head_resources
    return (size.cpu, size.memory) if size is not None else (settings.head_cpu, settings.head_memory)


def head_group(run: GRPORun, plan: RunPlan, settings: RenderSettings) -> dict[str, Any]:
    """The head holds GCS: once it is gone every Ray process on the workers exits (60 s later, Ray's
    `gcs_rpc_server_reconnect_timeout_s`), the save in flight with it. KubeRay deletes the head together with the
    workers (a suspend's `DeleteAllOf`), so the head runs the same preStop hook as the workers (ask miles for a
    checkpoint and wait until miles says it is saved, or stopped) with the workers' grace: it outlives their save
    (docs/integrations/kuberay.md). It mounts the shared volume for that: the sentinel and the launcher's marker."""
    spec = run.spec
    cpu, memory = head_size(run, settings)
    grace = pod_grace_seconds(plan.preemption_grace, settings.max_grace_seconds)
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
        "containers": [
            {
                "name": "ray-head",
                "image": spec.image,
                "ports": [
                    {"containerPort": 6379, "name": "gcs"},
                    {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
                    {"containerPort": 10001, "name": "client"},
                ],
                "env": pod_env(run),
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {"memory": memory},
                },
                "volumeMounts": [{"name": "shared", "mountPath": spec.storage.mount_path}, _config_mount(settings)],
                "securityContext": _with_ptrace(
                    run, {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
                ),
                "lifecycle": {"preStop": {"exec": {"command": [*presave_command(plan, settings, grace), "--head"]}}},
            }
        ],
        "volumes": [_shared_volume(run), _config_volume(run)],
    }
    _place(pod, run, spec.scheduling.head_node_selector)
    if not spec.scheduling.head_node_selector:
        pod["affinity"] = head_off_gpu_nodes(run)
    return {
        # Zero CPUs and GPUs: no actor or task can be placed on the head, which has no GPU driver.
        "rayStartParams": {
            "dashboard-host": "0.0.0.0",
            "dashboard-port": str(DASHBOARD_PORT),
            "num-cpus": "0",
            "num-gpus": "0",
        },
        "template": {"metadata": head_pod_metadata(run, settings), "spec": pod},
    }


# Karpenter leaves a node alone while a pod on it carries this (its consolidation and drift would take the head).
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def head_pod_metadata(run: GRPORun, settings: RenderSettings) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": names.labels(run.metadata.name, "ray-head")}
    if settings.head_do_not_disrupt:
        meta["annotations"] = {DO_NOT_DISRUPT: "true"}
    return meta


def head_disruption_budget(run: GRPORun, settings: RenderSettings) -> list[dict[str, Any]]:
    """The head's PodDisruptionBudget: no voluntary eviction (a drain, a consolidation) takes the head, whose loss
    loses the attempt (status/completion.py head_lost). A deletion, KubeRay's own for a suspend included, is not
    an eviction: the head's preStop hook covers it."""
    if not settings.head_do_not_disrupt:
        return []
    return [
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": metadata(run, names.head_budget(run.metadata.name), "ray-head"),
            "spec": {"minAvailable": 1, "selector": {"matchLabels": names.selector(run.metadata.name, "ray-head")}},
        }
    ]


def presave_command(plan: RunPlan, settings: RenderSettings, pod_grace: int) -> list[str]:
    """The Ray pods' preStop hook: every rank stays up while miles saves (a distributed save needs them all), then
    the hook stops the pod's Ray, whose `ray start --block` under bash ignores the SIGTERM that follows, and it
    returns before the grace ends (`python -m grpo_launcher presave`)."""
    return [
        settings.python,
        "-m",
        "grpo_launcher",
        "presave",
        "--sentinel",
        save_sentinel(plan),
        "--checkpoint-dir",
        plan.checkpoint_dir,
        "--wait-seconds",
        str(hook_wait_seconds(pod_grace)),
        "--stop-ray",
    ]


def worker_group(run: GRPORun, plan: RunPlan, settings: RenderSettings) -> dict[str, Any]:
    spec = run.spec
    instance = instance_of(spec)
    share = HOST_SHARE * plan.gpus_per_node / instance.gpus
    cpu = str(int(instance.vcpus * share))
    memory = f"{int(instance.memory_gib * share)}Gi"
    limits: dict[str, str] = {"nvidia.com/gpu": str(plan.gpus_per_node), "memory": memory}
    fabric = instance.fabric
    if plan.fabric_devices_per_node and fabric.resource_name:
        limits[fabric.resource_name] = str(plan.fabric_devices_per_node)
    requests = {**limits, "cpu": cpu}
    grace = pod_grace_seconds(plan.preemption_grace, settings.max_grace_seconds)
    env = pod_env(run)
    if plan.fabric_devices_per_node:
        env = with_env(env, fabric.env)
    volume_mounts = [
        {"name": "shared", "mountPath": spec.storage.mount_path},
        {"name": "dshm", "mountPath": "/dev/shm"},
        _config_mount(settings),
    ]
    # RDMA (EFA, InfiniBand) registers memory with the NIC: it needs to lock pages.
    security = {"allowPrivilegeEscalation": False, "capabilities": {"add": ["IPC_LOCK"]}}
    tolerations = [dict(t) for t in instance.tolerations]
    tolerations += [t.model_dump(by_alias=True, exclude_none=True) for t in spec.scheduling.tolerations]
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": names.selector(run.metadata.name, "ray-worker")},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "tolerations": tolerations,
        # The launcher's preflight on EVERY worker before Ray starts there (the in-job one sees only the driver's
        # node): this node's GPUs, EFA devices, shm, libcuda and the intra-node all-reduce against the instance
        # type's floor (run config). Same resources as the Ray container, so the pod asks for nothing more. On a
        # failure the kubelet keeps the log tail as the termination message, whose `preflight failed: ...` line
        # edges/childstate.py puts into the GRPORun's status.
        "initContainers": [
            {
                "name": names.PREFLIGHT_CONTAINER,
                "image": spec.image,
                "command": [
                    settings.python,
                    "-m",
                    "grpo_launcher",
                    "preflight",
                    "--config",
                    f"{settings.config_dir}/{names.CONFIG_FILE}",
                ],
                "env": env,
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": volume_mounts,
                "securityContext": security,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "containers": [
            {
                "name": "ray-worker",
                "image": spec.image,
                # The job driver runs here: miles's Prometheus collector and the launcher's provenance metric.
                "ports": [
                    {"containerPort": settings.prometheus_port, "name": "trainer-metrics"},
                    {"containerPort": settings.launcher_metrics_port, "name": "launcher-metric"},
                ],
                "env": env,
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": volume_mounts,
                "securityContext": _with_ptrace(run, security),
                "lifecycle": {"preStop": {"exec": {"command": presave_command(plan, settings, grace)}}},
            }
        ],
        "volumes": [
            _shared_volume(run),
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{plan.shm_gib}Gi"}},
            _config_volume(run),
        ],
    }
    # Workers land only on nodes of the planned instance type (its node selector in the runtime): the plan's GPU
    # memory, fabric devices and all-reduce floor are that type's, and without it the scheduler picks whichever GPU
    # node scores best (for a p5en run, a p6-b300 node with more free memory).
    _place(pod, run, {**dict(instance.node_selector), **spec.scheduling.gpu_node_selector})
    return {
        "groupName": names.WORKER_GROUP,
        "replicas": plan.worker_replicas,
        "minReplicas": plan.worker_replicas,
        "maxReplicas": plan.worker_replicas,
        "numOfHosts": 1,
        "rayStartParams": {
            "num-gpus": str(plan.gpus_per_node),
            "resources": ray_resources_param(plan.ray_resources),
        },
        "template": {"metadata": {"labels": names.labels(run.metadata.name, "ray-worker")}, "spec": pod},
    }


def avoid_nodes(group: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """Keep the workers off `nodes` (named by a failure that restarted the run: status.avoidedNodes)."""
    if not nodes:
        return
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(nodes)}]}
    affinity = group["template"]["spec"]["affinity"]
    affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}


def ray_cluster(
    run: GRPORun, plan: RunPlan, settings: RenderSettings, avoided_nodes: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The RayCluster; with a Kueue queue it is created suspended and Kueue unsuspends it (render/queueing.py),
    so the reconciler sets `suspend` only when it creates the cluster, never on a later apply."""
    meta = metadata(run, names.ray_cluster(run.metadata.name), "ray")
    meta["labels"].update(queueing.cluster_labels(run))
    workers = worker_group(run, plan, settings)
    avoid_nodes(workers, avoided_nodes)
    spec: dict[str, Any] = {
        "enableInTreeAutoscaling": False,
        "headGroupSpec": head_group(run, plan, settings),
        "workerGroupSpecs": [workers],
    }
    if queueing.queued(run):
        spec["suspend"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec}
