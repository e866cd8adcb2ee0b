"""The Ray job: miles's argv, the launcher entrypoint around it, the runtime env and entrypoint resources.

Everything is a list or a dict until the last step: the entrypoint string is `shlex.join` of an argv list
and the runtime env is a dict Ray serialises itself, so no path, quote or `$` can change the command.
The HF token is never here: pods get it by secretKeyRef.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from grpo_operator.api import GRPORun
from grpo_operator.api.spec import Placement, RewardType
from grpo_operator.api.status import RunPlan
from grpo_operator.planning.flags import RECIPE_ARGS
from grpo_operator.planning.miles_parser import joined_negative_values
from grpo_operator.planning.profiles import PROFILES
from grpo_operator.render import names
from grpo_operator.render.settings import RenderSettings

ENTRYPOINT_RESOURCES = {"gpu_node": 0.001}  # the driver runs on a GPU worker, never on the CPU-only head
SAVE_SENTINEL = ".grpo-save-now"
HF_EXPORT_DIR = "hf"  # spec.export.huggingface: miles --save-hf writes iter_<rollout>/ under it
REWARD_CLIENT = "grpo_launcher.reward_client.reward"
# Where every Ray pod's Python processes write their stacks (grpo_launcher.stackdump) and torch its flight-recorder
# dumps: the container's own /tmp, so per pod and writable by the image's user.
STACKS_DIR = "/tmp/grpo-stacks"
NCCL_TRACE_PREFIX = "nccl_trace_rank_"  # torch appends the rank (docs/integrations/torch.md)
NCCL_TRACE_ENTRIES = 2000  # collectives the flight recorder keeps per process
# Of the capture's budget, what the stacks job's driver does not wait: its start, the operator's stop and log read.
STACKS_JOB_MARGIN_SECONDS = 15.0
# Rewards that return a dict: --reward-key names the number in it, as miles's own dapo recipes pass it
# (docs/integrations/miles.md, "Reward types"); without it miles fails converting the first rollout.
REWARD_KEYS: dict[RewardType, str] = {RewardType.DAPO: "score"}


@dataclass(frozen=True)
class JobSubmission:
    submission_id: str
    entrypoint_argv: tuple[str, ...]
    miles_argv: tuple[str, ...]
    runtime_env: dict[str, Any]
    entrypoint_resources: dict[str, float]
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float | None = None  # None: Ray's default (0)

    @property
    def entrypoint(self) -> str:
        return shlex.join(self.entrypoint_argv)

    def as_dict(self) -> dict[str, Any]:
        return {
            "submissionId": self.submission_id,
            "entrypoint": self.entrypoint,
            "entrypointArgv": list(self.entrypoint_argv),
            "milesArgv": list(self.miles_argv),
            "runtimeEnv": self.runtime_env,
            "entrypointResources": self.entrypoint_resources,
            "metadata": self.metadata,
        }


def _num(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def reward_url(run: GRPORun, settings: RenderSettings) -> str:
    host = f"{names.reward_service(run.metadata.name)}.{run.metadata.namespace}.svc.{settings.cluster_domain}"
    return f"http://{host}:{settings.reward_port}/score"


def save_sentinel(plan: RunPlan) -> str:
    return f"{plan.checkpoint_dir}/{SAVE_SENTINEL}"


def huggingface_export(plan: RunPlan) -> str:
    """miles's `--save-hf`: a directory per save, inside the run's checkpoint directory (so inside the claim); miles
    formats it with the save's rollout id (`save_hf.format(rollout_id=...)`, docs/integrations/miles.md)."""
    return f"{plan.checkpoint_dir}/{HF_EXPORT_DIR}/iter_{{rollout_id:07d}}"


def miles_argv(run: GRPORun, plan: RunPlan, settings: RenderSettings) -> list[str]:
    s = run.spec
    profile = PROFILES[s.model.profile]
    t, p = s.topology, s.topology.parallelism
    argv = [settings.python, settings.miles_train, *profile.megatron_args()]
    argv += [
        "--hf-checkpoint",
        s.model.hf_checkpoint,
        "--ref-load",
        s.model.torch_dist_checkpoint,
        "--load",
        plan.checkpoint_dir,
        "--save",
        plan.checkpoint_dir,
        "--save-interval",
        str(plan.save_interval),
        "--save-trigger-sentinel",
        save_sentinel(plan),
    ]
    argv += ["--save-hf", huggingface_export(plan)] if s.export.huggingface else []
    argv += ["--prompt-data", s.data.prompt_data, "--input-key", s.data.input_key, "--label-key", s.data.label_key]
    argv += ["--apply-chat-template"] if s.data.apply_chat_template else []
    argv += ["--rollout-shuffle"] if s.data.shuffle else []
    if s.reward.type is RewardType.REMOTE:
        # Our client (trainer image, grpo_launcher/reward_client.py) instead of miles's remote_rm: retries, one
        # session, batches. miles calls it for every sample when set (docs/integrations/miles.md: reward hook).
        argv += ["--rm-type", "remote_rm", "--rm-url", reward_url(run, settings), "--custom-rm-path", REWARD_CLIENT]
    else:
        argv += ["--rm-type", s.reward.type.value]
        if s.reward.type in REWARD_KEYS:
            argv += ["--reward-key", REWARD_KEYS[s.reward.type]]
    r, tr = s.rollout, s.training
    argv += [
        "--num-rollout",
        str(r.num_rollout),
        "--rollout-batch-size",
        str(r.batch_size),
        "--n-samples-per-prompt",
        str(r.samples_per_prompt),
        "--num-steps-per-rollout",
        str(tr.steps_per_rollout),
        "--global-batch-size",
        str(tr.global_batch_size),
        "--rollout-max-response-len",
        str(r.max_response_len),
        "--rollout-temperature",
        _num(r.temperature),
        "--balance-data",
    ]
    if s.eval is not None:
        argv += [
            "--eval-interval",
            str(s.eval.interval),
            "--eval-prompt-data",
            s.eval.name,
            s.eval.prompt_data,
            "--n-samples-per-eval-prompt",
            str(s.eval.samples_per_prompt),
            "--eval-max-response-len",
            str(s.eval.max_response_len),
            "--eval-top-p",
            "1",
        ]
    argv += [
        "--tensor-model-parallel-size",
        str(p.tensor),
        "--pipeline-model-parallel-size",
        str(p.pipeline),
        "--context-parallel-size",
        str(p.context),
        "--expert-model-parallel-size",
        str(p.expert),
        "--expert-tensor-parallel-size",
        str(p.expert_tensor),
    ]
    argv += ["--sequence-parallel"] if p.tensor > 1 else []
    argv += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    argv += RECIPE_ARGS
    argv += ["--use-dynamic-batch-size", "--max-tokens-per-gpu", str(tr.max_tokens_per_gpu)]
    argv += [
        "--advantage-estimator",
        "grpo",
        "--use-kl-loss",
        "--kl-loss-coef",
        _num(tr.kl_loss_coef),
        "--kl-loss-type",
        "low_var_kl",
        "--entropy-coef",
        "0.0",
        "--eps-clip",
        _num(tr.eps_clip),
        "--eps-clip-high",
        _num(tr.eps_clip_high),
    ]
    argv += [
        "--optimizer",
        "adam",
        "--lr",
        _num(tr.learning_rate),
        "--lr-decay-style",
        "constant",
        "--weight-decay",
        "0.1",
        "--adam-beta1",
        "0.9",
        "--adam-beta2",
        "0.98",
    ]
    argv += ["--use-distributed-optimizer"]  # what miles does for adam anyway (docs/integrations/miles.md)
    argv += [
        "--actor-num-nodes",
        str(t.actor.nodes),
        "--actor-num-gpus-per-node",
        str(t.actor.gpus_per_node),
        "--rollout-num-gpus",
        str(plan.rollout_gpus),
        "--rollout-num-gpus-per-engine",
        str(t.rollout.gpus_per_engine),
        "--num-gpus-per-node",
        str(plan.gpus_per_node),
    ]
    argv += ["--colocate"] if t.placement is Placement.COLOCATED else []
    argv += ["--sglang-mem-fraction-static", _num(t.rollout.mem_fraction), "--sglang-log-level", "warning"]
    if profile.moe is not None:
        # The default flashinfer MoE runner breaks miles's online weight update: use triton.
        argv += [
            "--sglang-moe-runner-backend",
            "triton",
            "--sglang-expert-parallel-size",
            str(t.rollout.expert_parallel),
        ]
        moe_tp = t.rollout.gpus_per_engine // t.rollout.expert_parallel
        if t.rollout.expert_parallel > 1 and moe_tp > 1:
            # SGLang's FlashInfer allreduce+RMSNorm fusion reduces over the moe-ep group only: degenerate text.
            argv.append("--sglang-enforce-disable-flashinfer-allreduce-fusion")
    argv += [
        "--use-prometheus",
        "--prometheus-port",
        str(settings.prometheus_port),
        "--prometheus-run-name",
        run.metadata.name,
        "--use-tensorboard",
    ]
    return argv + joined_negative_values(list(s.extra_args))


def runtime_env(run: GRPORun, plan: RunPlan, settings: RenderSettings) -> dict[str, Any]:
    p = run.spec.topology.parallelism
    env = {
        "PYTHONUNBUFFERED": "1",
        "TENSORBOARD_DIR": plan.tensorboard_dir,
        "PROMETHEUS_PORT": str(settings.prometheus_port),  # miles reads it as an int default at parse time
        "GRPO_RUN": run.metadata.name,
    }
    if p.tensor > 1 or p.context > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    remote = run.spec.reward.remote
    if run.spec.reward.type is RewardType.REMOTE and remote is not None:
        env["GRPO_REWARD_DEADLINE_S"] = repr(remote.timeout_seconds)  # the service's REWARD_DEADLINE_S
    return {"env_vars": env}


def config_path(settings: RenderSettings) -> str:
    return f"{settings.config_dir}/{names.CONFIG_FILE}"


def job_submission(run: GRPORun, plan: RunPlan, settings: RenderSettings) -> JobSubmission:
    miles = miles_argv(run, plan, settings)
    launcher = settings.launcher or (
        settings.python,
        "-m",
        "grpo_launcher",
        "run",
        "--config",
        config_path(settings),
        "--",
    )
    entry = [*launcher, *miles]
    meta = run.metadata
    return JobSubmission(
        submission_id=names.submission_id(meta.name, meta.uid or "offline", meta.generation or 1),
        entrypoint_argv=tuple(entry),
        miles_argv=tuple(miles),
        runtime_env=runtime_env(run, plan, settings),
        entrypoint_resources=dict(ENTRYPOINT_RESOURCES),
        metadata={
            "grpo.dev/run": meta.name,
            "grpo.dev/namespace": meta.namespace,
            "grpo.dev/generation": str(meta.generation or 1),
        },
    )


def checkpoint_request(run: GRPORun, plan: RunPlan, settings: RenderSettings, submission_id: str) -> JobSubmission:
    """A one-line Ray job, run on a GPU worker (where the shared volume is mounted), that creates miles's
    save-trigger sentinel: miles saves at its next save point and deletes the file."""
    script = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); p.touch()"
    )
    argv = (settings.python, "-c", script, save_sentinel(plan))
    return JobSubmission(
        submission_id=names.checkpoint_submission_id(submission_id),
        entrypoint_argv=argv,
        miles_argv=(),
        runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1"}},
        entrypoint_resources=dict(ENTRYPOINT_RESOURCES),
        metadata={
            "grpo.dev/run": run.metadata.name,
            "grpo.dev/namespace": run.metadata.namespace,
            "grpo.dev/purpose": "checkpoint-before-suspend",
        },
    )


def stacks_job(
    submission_id: str, bundle: str, budget_seconds: float, settings: RenderSettings, directory: str = STACKS_DIR
) -> JobSubmission:
    """The short job that reads every node's stacks, flight-recorder dumps and Ray log tails for the evidence bundle
    `bundle` of the job `submission_id` (grpo_launcher.stacks): its driver stops waiting for nodes before the
    capture's budget ends. On the head (no entrypoint resources) and with no CPU, so it runs beside a job that holds
    every worker's. Its own processes register no hook (an empty GRPO_STACKS_DIR): they are not what is looked at."""
    seconds = max(1.0, budget_seconds - STACKS_JOB_MARGIN_SECONDS)
    argv = (settings.python, "-m", "grpo_launcher.stacks", "--dir", directory, "--seconds", _num(seconds))
    return JobSubmission(
        submission_id=names.stacks_submission_id(submission_id, bundle),
        entrypoint_argv=argv,
        miles_argv=(),
        runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1", "GRPO_STACKS_DIR": ""}},
        entrypoint_resources={},
        metadata={"grpo.dev/purpose": "evidence-stacks", "grpo.dev/job": submission_id},
        entrypoint_num_cpus=0,
    )
