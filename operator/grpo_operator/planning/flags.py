"""miles flags the operator manages, the spec field that sets each one, and the check of `spec.extraArgs`.

Rendering emits these flags from the spec; `spec.extraArgs` may not set them again under any of their names
(a flag's aliases share its argparse dest, and the last value of a dest wins), nor pass what miles's parser
would refuse or read differently from what it looks like: unknown flags, abbreviations (argparse expands an
unambiguous prefix), `--help`, empty strings, flags without their values, flags that exist only under a
condition. A few flags the operator does not render are refused because they change what the operator
reads: the rollout numbering, the `rollout/step` gauge, or the resume. A flag that takes a credential
(`--wandb-key`) is refused too: the value would be printed into the kept log; it goes by `spec.secretEnv`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from functools import cache

from grpo_operator.api.quote import echo
from grpo_operator.planning.miles_parser import (
    DEFAULT_MILES_VERSION,
    PLAIN_NEGATIVE_NUMBER,
    MilesFlag,
    abbreviation_problem,
    miles_flags,
    pinned,
    preparser_problem,
    value_fix,
    value_problem,
)
from grpo_operator.planning.miles_parser import looks_like_value as _looks_like_value
from grpo_operator.planning.profiles import PROFILES

__all__ = ["MANAGED_FLAGS", "REFUSED_FLAGS", "MilesFlag", "check_extra_args", "managed_dests", "miles_flags"]

# What miles's own recipes pass for these dense GQA models: Megatron's default dropout is 0.1 and miles never
# overrides it. Not for MLA models; no profile here is MLA (docs/integrations/miles.md: recipe flags).
RECIPE_ARGS: tuple[str, ...] = (
    "--attention-dropout",
    "0.0",
    "--hidden-dropout",
    "0.0",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--attention-backend",
    "flash",
)
RECIPE_REASON = "miles's recipe for these models, scripts/run_qwen3_4b.py:221-228"

_BY_FIELD: dict[str, tuple[str, ...]] = {
    "spec.model.profile": tuple(
        sorted({arg for profile in PROFILES.values() for arg in profile.megatron_args() if arg.startswith("--")})
    ),
    "spec.model.hfCheckpoint": ("--hf-checkpoint",),
    "spec.model.torchDistCheckpoint": ("--ref-load",),
    "spec.storage.checkpointDir": ("--load", "--save"),
    "spec.storage.saveInterval": ("--save-interval",),
    "spec.export.huggingface": ("--save-hf",),
    "spec.storage.tensorboardDir": ("--tensorboard-dir", "--use-tensorboard"),
    "spec.data.promptData": ("--prompt-data",),
    "spec.data.inputKey": ("--input-key",),
    "spec.data.labelKey": ("--label-key",),
    "spec.data.applyChatTemplate": ("--apply-chat-template",),
    "spec.data.shuffle": ("--rollout-shuffle",),
    "spec.eval": (
        "--eval-interval",
        "--eval-prompt-data",
        "--n-samples-per-eval-prompt",
        "--eval-max-response-len",
    ),
    "spec.reward.type": ("--rm-type", "--rm-url", "--custom-rm-path", "--reward-key"),
    "spec.rollout.numRollout": ("--num-rollout", "--num-epoch"),
    "spec.rollout.batchSize": ("--rollout-batch-size",),
    "spec.rollout.samplesPerPrompt": ("--n-samples-per-prompt",),
    "spec.rollout.maxResponseLen": ("--rollout-max-response-len",),
    "spec.rollout.temperature": ("--rollout-temperature",),
    "spec.training.globalBatchSize": ("--global-batch-size",),
    "spec.training.stepsPerRollout": ("--num-steps-per-rollout",),
    "spec.training.learningRate": ("--lr",),
    "spec.training.maxTokensPerGpu": ("--max-tokens-per-gpu", "--use-dynamic-batch-size"),
    "spec.training.klLossCoef": ("--kl-loss-coef", "--use-kl-loss", "--kl-loss-type"),
    "spec.training.epsClip": ("--eps-clip",),
    "spec.training.epsClipHigh": ("--eps-clip-high",),
    "spec.topology.parallelism.tensor": ("--tensor-model-parallel-size", "--sequence-parallel"),
    "spec.topology.parallelism.pipeline": ("--pipeline-model-parallel-size",),
    "spec.topology.parallelism.context": ("--context-parallel-size",),
    "spec.topology.parallelism.expert": ("--expert-model-parallel-size",),
    "spec.topology.rollout.expertParallel": ("--sglang-expert-parallel-size",),
    "spec.topology.parallelism.expertTensor": ("--expert-tensor-parallel-size",),
    "spec.topology.actor": ("--actor-num-nodes", "--actor-num-gpus-per-node", "--num-gpus-per-node"),
    "spec.topology.rollout.gpus": ("--rollout-num-gpus",),
    "spec.topology.rollout.gpusPerEngine": ("--rollout-num-gpus-per-engine",),
    "spec.topology.rollout.memFraction": ("--sglang-mem-fraction-static",),
    "spec.topology.placement": ("--colocate",),
    # miles offloads both when colocated unless told otherwise (miles/utils/arguments.py:2815-2819); the memory
    # plan counts exactly that: the actor's residue beside the engines, pinned host memory for both.
    "spec.topology.placement (Colocated offloads the actor and the engines between phases, as the memory plan "
    "counts; Distributed offloads nothing)": (
        "--offload",
        "--offload-train",
        "--offload-rollout",
        "--offload-rollout-level",
    ),
    "status.metrics (the operator scrapes these gauges, labelled with the run's name)": (
        "--use-prometheus",
        "--prometheus-port",
        "--prometheus-run-name",
    ),
    "suspend saves through this file, at the path the operator chooses": ("--save-trigger-sentinel",),
    "the memory plan assumes full recompute of every layer": (
        "--recompute-granularity",
        "--recompute-method",
        "--recompute-num-layers",
    ),
    "the memory plan sizes adam's state, and the GRPO loss and schedule are rendered whole": (
        "--optimizer",
        "--lr-decay-style",
        "--weight-decay",
        "--adam-beta1",
        "--adam-beta2",
        "--advantage-estimator",
        "--entropy-coef",
        "--balance-data",
        "--eval-top-p",
    ),
    "SGLang's flashinfer MoE runner and allreduce fusion give degenerate output with these settings": (
        "--sglang-moe-runner-backend",
        "--sglang-enforce-disable-flashinfer-allreduce-fusion",
    ),
    "lowercase level, SGLang rejects WARN": ("--sglang-log-level",),
    "miles turns it on for adam, miles/backends/megatron_utils/arguments.py:15": ("--use-distributed-optimizer",),
    RECIPE_REASON: tuple(a for a in RECIPE_ARGS if a.startswith("--")),
}

MANAGED_FLAGS: dict[str, str] = {flag: field for field, flags in _BY_FIELD.items() for flag in flags}


# Flags the operator does not render but refuses, because they change what it reads or decides.
REFUSED_FLAGS: dict[str, str] = {
    "--megatron-to-hf-mode": "miles sets the start rollout to 0 on every start in bridge mode, so a resumed run "
    "would train from rollout 0 again and the operator's progress and resume accounting would be wrong",
    "--wandb-always-use-train-step": "it turns the rollout/step gauge the operator reads for progress and the "
    "guards into a train step",
    "--start-rollout-id": "miles would start every attempt at that rollout instead of the checkpoint's next one",
    "--debug-exit-after-rollout": "miles would exit before numRollout and the run would look finished",
    "--custom-rollout-log-function-path": "a custom log function can replace miles's rollout line, which the "
    "operator reads for the guards and the summary",
    "--pin-rollout-manager-to-head": "it pins miles's rollout manager, an actor asking 1 CPU "
    "(miles/ray/placement_group.py:188-190), to the Ray head, which the operator starts with no CPUs for Ray "
    "(num-cpus 0, so nothing of the job lands on the CPU node): the job would wait for a CPU forever",
}


# Flags that take a credential, by their dest's last words: Megatron prints every argument on rank 0 and the
# operator keeps the driver's log (its tail, evidence bundles), so a credential goes by spec.secretEnv instead.
CREDENTIAL_SUFFIXES = ("_key", "_token", "_password", "_secret", "_api_keys")
# Dests named so that hold no credential, each with what it is (a new flag of the table is a credential until
# listed here).
NOT_CREDENTIALS: dict[str, str] = {
    **dict.fromkeys(
        (
            "input_key",
            "label_key",
            "metadata_key",
            "tool_key",
            "eval_input_key",
            "eval_label_key",
            "eval_tool_key",
            "eval_reward_key",
            "reward_key",
        ),
        "the name of a field in the data's records or in a reward's dict",
    ),
    "ci_metric_checker_key": "the name of the metric miles's CI check reads",
    **dict.fromkeys(
        ("fim_eod_token", "fim_middle_token", "fim_pad_token", "fim_prefix_token", "fim_suffix_token"),
        "a special token of the tokenizer (fill-in-the-middle)",
    ),
    "rl_skip_bos_token": "a switch: skip the tokenizer's BOS token",
    "sglang_bucket_time_to_first_token": "the buckets of a latency histogram",
    "sglang_kt_max_deferred_experts_per_token": "a count of experts per token",
}
# The variable the program reads the credential from, where it reads one (wandb: WANDB_API_KEY).
CREDENTIAL_ENV = {"wandb_key": "WANDB_API_KEY"}


def is_credential(dest: str) -> bool:
    """Whether the flag of argparse dest `dest` takes a credential."""
    return dest.endswith(CREDENTIAL_SUFFIXES) and dest not in NOT_CREDENTIALS


def _credential_flag(name: str) -> bool:
    """Whether the flag `name` takes a credential; a name miles does not know is judged by its own words."""
    flag = miles_flags().get(name)
    return is_credential(flag.dest if flag is not None else name.lstrip("-").replace("-", "_"))


def _credential_problem(dest: str) -> str:
    env = CREDENTIAL_ENV.get(dest)
    fix = (
        f"set spec.secretEnv: [{{name: {env}, secretKeyRef: {{name: <secret>, key: <key>}}}}] instead ({env} is "
        "read from the environment)"
        if env
        else "pass the credential by spec.secretEnv instead (an environment variable from a Secret, by secretKeyRef)"
    )
    return (
        "takes a credential, and Megatron prints every argument into the driver's log, which the operator keeps "
        f"(its tail, evidence bundles); remove it from extraArgs and {fix}"
    )


def credential_values(args: Sequence[str]) -> list[str]:
    """The values `args` give flags that take a credential (`--wandb-key x`, `--wandb-key=x`), for redaction."""
    out: list[str] = []
    for i, arg in enumerate(args):
        name, has_inline, inline = arg.partition("=")
        if not name.startswith("--") or not _credential_flag(name):
            continue
        if has_inline:
            out.append(inline)
            continue
        j = i + 1
        while j < len(args) and args[j].strip() and _looks_like_value(args[j]):
            out.append(args[j])
            j += 1
    return [v for v in out if v.strip()]


def flag_name(arg: str) -> str | None:
    """The flag an argument names (`--x=1` -> `--x`), or None for a value."""
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0]


@cache
def managed_dests(version: str = DEFAULT_MILES_VERSION) -> dict[str, tuple[str, str]]:
    """argparse dest -> (the rendered flag, the field or reason), so an alias of a managed flag is managed too."""
    flags = miles_flags(version)
    return {flags[name].dest: (name, field) for name, field in MANAGED_FLAGS.items() if name in flags}


def _nearest(name: str, version: str) -> str:
    near = difflib.get_close_matches(name, miles_flags(version), n=1, cutoff=0.6)
    return f"; the nearest flag is {near[0]}" if near else ""


def _flag_problem(name: str, version: str) -> str | None:
    """Why a flag name cannot go in extraArgs, or None when it may."""
    flags = miles_flags(version)
    if name in ("-h", "--help"):
        return "prints miles's help and exits 0 before training, so the run would end without a result; remove it"
    if not name.startswith("--"):
        return f"is not a flag (miles takes --long flags; a value must follow its flag){_nearest(name, version)}"
    flag = flags.get(name)
    if flag is None:
        return abbreviation_problem(name, version) or f"is not a flag of {pinned(version)}{_nearest(name, version)}"
    if is_credential(flag.dest):
        return _credential_problem(flag.dest)
    if flag.condition:
        return f"exists {flag.condition}, so miles may not know it; remove it"
    if name in REFUSED_FLAGS:
        return f"is refused: {REFUSED_FLAGS[name]}; remove it"
    managed = managed_dests(version).get(flag.dest)
    if managed is not None:
        rendered, field = managed
        alias = "" if rendered == name else f" (an alias of {rendered}, the same setting)"
        if field.startswith("spec."):
            return f"is managed by the operator{alias}; set {field} instead"
        return f"is fixed by the operator{alias} ({field}); remove it from extraArgs"
    return None


def _inline_problem(arg: str, name: str, value: str, flag: MilesFlag) -> str | None:
    # argparse reads a value after '=' as the flag's only one: a flag of several values refuses it.
    if flag.max_values == 0:
        return f"{echo(arg)}: {echo(name)} takes no value; write {echo(name)} alone"
    if flag.min_values > 1:
        return (
            f"{echo(arg)}: {echo(name)} takes {flag.min_values} values, which miles reads only as the arguments "
            f"after it; write {echo(name)} followed by the values, without '='"
        )
    why = value_problem(flag, name, value)
    return f"{echo(arg)}: {why}: miles's parser exits 2 at it; {value_fix(flag)}" if why else None


def _values(args: list[str], start: int, name: str, flag: MilesFlag) -> tuple[int, list[tuple[int, str]]]:
    """(the index after the flag's values, a problem per value argparse would refuse) for the values after the
    flag at `start - 1`."""
    problems: list[tuple[int, str]] = []
    i = start
    while i < len(args) and args[i].strip() and _looks_like_value(args[i]):
        if flag.max_values is not None and i - start >= flag.max_values:
            break
        value = args[i]
        if flag.max_values != 1 and not (value[0] != "-" or PLAIN_NEGATIVE_NUMBER.match(value)):
            # One value is rendered `--flag=<value>`; of several values argparse takes this one for a flag.
            problems.append(
                (
                    i,
                    f"{echo(value)}: argparse reads it as a flag, not as a value of {name}, which takes several "
                    "values (only a plain negative number such as -5 or -0.5 is read as a value); write the "
                    "number without an exponent",
                )
            )
        elif why := value_problem(flag, name, value):
            problems.append((i, f"{why}: miles's parser exits 2 at it; {value_fix(flag)}"))
        i += 1
    if i - start < flag.min_values:
        problems.append(
            (
                start - 1,
                f"{echo(args[start - 1])} needs {flag.min_values} value(s) after it, got {i - start}; add the value",
            )
        )
    return i, problems


def check_extra_args(args: list[str], version: str = DEFAULT_MILES_VERSION) -> list[tuple[int, str]]:
    """(index, why) for each argument of `spec.extraArgs` miles `version` would refuse, or read as something else,
    or that would override what the operator renders; empty when every argument is a flag miles takes as written."""
    problems: list[tuple[int, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.strip():
            problems.append((i, f"{echo(repr(arg))} is an empty argument (miles would read it as a value); remove it"))
            i += 1
            continue
        name, has_inline, inline = arg.partition("=")
        flag = miles_flags(version).get(name)
        why = _flag_problem(name, version) or (preparser_problem(args, i, version) if flag is not None else None)
        shown = name if has_inline and _credential_flag(name) else arg  # a message never quotes a credential
        i += 1
        if why is not None or flag is None:
            problems.append((i - 1, f"{echo(shown)} {why}"))
            while i < len(args) and args[i].strip() and _looks_like_value(args[i]):
                i += 1
            continue
        if has_inline:
            if inline_why := _inline_problem(arg, name, inline, flag):
                problems.append((i - 1, inline_why))
            continue
        i, found = _values(args, i, name, flag)
        problems += found
    return problems
