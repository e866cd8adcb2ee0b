"""The ConfigMap holding the resolved run config (JSON): provenance, and what the trainer launcher reads.

The launcher (trainer_image/, package grpo_launcher) parses this with its own model and relies on
`preflight` and `argv`; `spec` and `plan` are for provenance and may grow.
"""

from __future__ import annotations

import json
from typing import Any

from grpo_operator.api import API_VERSION, GRPORun
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.instances import instance_of
from grpo_operator.render import names
from grpo_operator.render.job import JobSubmission
from grpo_operator.render.raycluster import metadata
from grpo_operator.render.settings import RenderSettings


def run_config(run: GRPORun, plan: RunPlan, job: JobSubmission, settings: RenderSettings) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "RunConfig",
        "run": {"name": run.metadata.name, "namespace": run.metadata.namespace, "uid": run.metadata.uid or ""},
        "spec": run.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "plan": plan.model_dump(mode="json", by_alias=True),
        "preflight": {
            "gpus": plan.gpus_per_node,
            "minFreeGpuMemoryGiB": plan.min_free_gpu_gib,
            "shmMinGiB": plan.shm_gib,
            # The launcher runs the check its table has for the type, against this many devices.
            "fabric": {"type": plan.fabric.value, "devices": plan.fabric_devices_per_node},
            # Not required: nothing passes /dev/gdrdrv into the pods (NCCL's OFI plugin falls back without it).
            "gdrcopy": False,
            "checkpointDir": plan.checkpoint_dir,
            "checkpointGiB": plan.checkpoint_gib,
            "sharedMount": run.spec.storage.mount_path,
            "minBusBandwidthGBps": instance_of(run.spec).allreduce_floor_gbps(plan.gpus_per_node),
            "metricsPort": settings.launcher_metrics_port,
        },
        "argv": list(job.miles_argv),
        "env": dict(job.runtime_env["env_vars"]),
    }


def config_map(run: GRPORun, plan: RunPlan, job: JobSubmission, settings: RenderSettings) -> dict[str, Any]:
    body = json.dumps(run_config(run, plan, job, settings), indent=2, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(run, names.config_map(run.metadata.name), "config"),
        "data": {names.CONFIG_FILE: body},
    }
