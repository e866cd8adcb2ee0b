"""The rules of `spec.secretEnv`, and the environment variables the render sets itself, which a secret may not take.

A secretEnv entry becomes one more variable of every Ray pod, by secretKeyRef (render/raycluster.py `pod_env`).
A name the render already sets there, or in the Ray job's runtime env (which the driver's env takes over the
pod's), would leave one variable with two values and one of them silently lost: the Ray auth token, the HF token
of `spec.hfTokenSecret`, the runtime's `defaults.env`, the fabric's env. `tests/render/test_secret_env.py`
renders runs and checks every variable the render sets is named here. A name given twice is refused too (the API
server refuses it as well: the list is keyed by name). Pure.
"""

from __future__ import annotations

from grpo_operator.api.quote import echo
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.planning.instances import runtime_of

# Set in every Ray pod by render/raycluster.py `pod_env`, the Ray auth pair included.
POD_ENV = (
    "MILES_HOST_IP",
    "RAY_DEDUP_LOGS",
    "PYTHONUNBUFFERED",
    "RAY_memory_monitor_refresh_ms",
    "RAY_DASHBOARD_ENABLE_PROFILING",  # only where the runtime grants ptrace: kept either way, as JOB_ENV is
    "TOKENIZERS_PARALLELISM",
    "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME",
    "GRPO_STACKS_DIR",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
)
RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
HF_ENV = "HF_TOKEN"  # the variable of spec.hfTokenSecret
# Set in the Ray job's runtime env by render/job.py `runtime_env` (some only for some runs: all are kept here, so
# a name's verdict does not depend on the topology).
JOB_ENV = (
    "PYTHONUNBUFFERED",
    "TENSORBOARD_DIR",
    "PROMETHEUS_PORT",
    "GRPO_RUN",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "GRPO_REWARD_DEADLINE_S",
)


# Pod env a runtime may set instead (`with_env` replaces the entry in place, one entry per name): logging and
# NCCL's interface choice, which a fabric often needs (examples/runtimes/h100-infiniband.yaml). Every other name
# the render sets is reserved in a runtime's env (`runtime_env_owner`).
OVERRIDABLE_POD_ENV = ("RAY_DEDUP_LOGS", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME")


def runtime_env_owner(name: str) -> str | None:
    """Who sets `name` in the Ray pods or job whatever a GRPORuntime's env says, or None when a runtime may set it:
    a runtime value there is dropped (a secretKeyRef or fieldRef entry wins, the job's runtime env wins in the
    driver) or doubles the entry (HF_TOKEN beside a run's spec.hfTokenSecret)."""
    if name == HF_ENV:
        return "spec.hfTokenSecret of a run (a secretKeyRef; a token in a runtime's plain env is readable by all)"
    if name in RAY_AUTH_ENV:
        return "the operator in every Ray pod for Ray's token auth (from the run's own Secret)"
    if name in JOB_ENV:
        return "the operator in the Ray job's runtime env (the driver's env takes it over the pod's)"
    if name in POD_ENV and name not in OVERRIDABLE_POD_ENV:
        return "the operator in every Ray pod"
    return None


def rendered_env(spec: GRPORunSpec) -> dict[str, str]:
    """Every variable the render sets in a Ray pod or the Ray job of `spec`, with who sets it."""
    runtime = runtime_of(spec)
    owned = dict.fromkeys(
        JOB_ENV, "the operator in the Ray job's runtime env (the driver's env takes it over the pod's)"
    )
    owned |= dict.fromkeys(POD_ENV, "the operator in every Ray pod")
    owned |= dict.fromkeys(
        RAY_AUTH_ENV, "the operator in every Ray pod for Ray's token auth (from the run's own Secret)"
    )
    instance = runtime.spec.instance_type(spec.topology.instance_type)
    if instance is not None:
        owned |= dict.fromkeys(instance.fabric.env, f"the fabric env of instance type {instance.name}")
    owned |= dict.fromkeys(runtime.spec.defaults.env, f"GRPORuntime {runtime.metadata.name}'s defaults.env")
    if spec.hf_token_secret is not None:
        owned[HF_ENV] = "spec.hfTokenSecret"
    return owned


def check_secret_env(spec: GRPORunSpec) -> list[tuple[int, str]]:
    """(index, why) for each `spec.secretEnv` entry whose name the render sets itself or an earlier entry names."""
    owned, problems = rendered_env(spec), []
    runtime = runtime_of(spec)
    from_runtime = {e.name for e in runtime.spec.defaults.secret_env}
    first: dict[str, int] = {}
    for i, entry in enumerate(spec.secret_env):
        name = entry.name
        where = (
            f" (spec.secretEnv or GRPORuntime {runtime.metadata.name}'s defaults.secretEnv)"
            if name in from_runtime
            else ""
        )
        if name in first:
            problems.append(
                (
                    i,
                    f"{echo(name)}{where} is named twice (first at spec.secretEnv[{first[name]}]): a variable has "
                    "one value; keep one entry",
                )
            )
            continue
        first[name] = i
        who = owned.get(name)
        if who is None:
            continue
        fix = (
            "remove the entry, since spec.hfTokenSecret gives HF_TOKEN already, or drop spec.hfTokenSecret"
            if name == HF_ENV
            else "rename the entry, the secret needs a variable of its own"
        )
        problems.append(
            (
                i,
                f"{echo(name)}{where} is set by {who}: the pod would get the variable twice and lose one value "
                f"silently; {fix}",
            )
        )
    return problems
