"""`GRPORun.spec`: what a user asks for, with bounds, enums, defaults and the cross-field rules.

These types are the only source of the CRD schema (`make crds`). Every field has a description (it becomes
`kubectl explain` text), bounds and enums live here so they reach the API server, and the cross-field rules
the API server can check are declared here as CEL (`x-kubernetes-validations`). `grpo_operator.planning.validation`
checks the same rules in Python, plus those that need profile or instance data.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, JsonValue, PrivateAttr, StringConstraints, model_validator
from pydantic_core import PydanticCustomError

from grpo_operator.api.base import ApiModel
from grpo_operator.api.catalog import InstanceTypeName, ModelProfileName
from grpo_operator.api.quote import echo

if TYPE_CHECKING:
    from grpo_operator.api.runtime import GRPORuntime

# No C0 control character and no DEL: a NUL or a newline in an argv item or a path passes Kubernetes
# (container args are free text) and only fails when the process is exec'd, after the GPUs were provisioned.
_PRINTABLE = r"[^\x00-\x1f\x7f]"
AbsPath = Annotated[str, StringConstraints(pattern=rf"^/{_PRINTABLE}*$", min_length=1, max_length=512)]
Name = Annotated[str, StringConstraints(pattern=rf"^{_PRINTABLE}+$", min_length=1, max_length=253)]
Arg = Annotated[str, StringConstraints(pattern=rf"^{_PRINTABLE}*$", max_length=1024)]
# Kubernetes' label grammar (k8s.io/apimachinery pkg/util/validation: IsQualifiedName, IsValidLabelValue).
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QualifiedName = Annotated[str, StringConstraints(pattern=rf"^({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}$", max_length=317)]
LabelValue = Annotated[str, StringConstraints(pattern=rf"^({_LABEL_NAME})?$", max_length=63)]

# A path the pods resolve the same way the rules read it: no `.` or `..` segment and no `//`, so
# `posixpath.normpath` changes at most a trailing slash and "under the mount" is a prefix test. Both the CEL
# rules (`matches` searches, RE2) and `planning.validation.path_rules` (Python `re.search`) use this pattern.
UNNORMALIZED_PATH = r"(^|/)[.][.]?(/|$)|//"


# Where the render itself mounts volumes in the Ray pods (shared memory; the run config at the default
# `RenderSettings.config_dir`): the claim cannot go there too.
RENDERED_MOUNTS = ("/dev/shm", "/etc/grpo")
# What a volume may not be mounted at, over or under: the system directories a container needs from its image (a
# claim there hides them) and the render's own mounts. `/lib*` (lib, lib32, lib64, libx32) is `_LIB_DIRS`.
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/boot", "/run", "/var/run")
_LIB_DIRS = r"^/lib(32|64|x32)?/"
FORBIDDEN_MOUNTS = (*RENDERED_MOUNTS, *SYSTEM_DIRS)


def forbidden_mount(path: str) -> str | None:
    """The directory `path` is, lies under or holds (the root holds them all) of `FORBIDDEN_MOUNTS`, else None."""
    prefix = mount_prefix(path)
    if (lib := re.match(_LIB_DIRS, prefix)) is not None:
        return lib.group(0).rstrip("/")
    return next((d for d in FORBIDDEN_MOUNTS if prefix.startswith(d + "/") or (d + "/").startswith(prefix)), None)


def mount_cel(field: str) -> dict[str, str]:
    prefix = f"(self.{field}.endsWith('/') ? self.{field} : self.{field} + '/')"
    dirs = ", ".join(f"'{d}/'" for d in FORBIDDEN_MOUNTS)
    return cel(
        f"!has(self.{field}) || !({prefix}.matches('{_LIB_DIRS}') || "
        f"[{dirs}].exists(d, {prefix}.startsWith(d) || d.startsWith({prefix})))",
        f"{field} must not be /, a system directory ({', '.join(SYSTEM_DIRS)}, /lib*) or a path the Ray pods mount "
        f"({', '.join(RENDERED_MOUNTS)}), nor lie under or hold one: the volume would hide what the image or the "
        "operator keeps there; choose a directory of its own such as /fsx",
        f".{field}",
    )


# A field a GRPORuntime may fill in (`planning.runtime.resolve`): the CRD neither requires nor defaults it, so the
# API server leaves it absent for the runtime; the Python model keeps its requirement or default for the rest.
RUNTIME_DEFAULT = "x-grpo-runtime-default"
_RUNTIME_DEFAULT: dict[str, JsonValue] = {RUNTIME_DEFAULT: True}


def runtime_defaulted(extra: Any) -> bool:
    return isinstance(extra, dict) and bool(extra.get(RUNTIME_DEFAULT))


def mount_prefix(mount: str) -> str:
    """The prefix every path under the mount starts with: the mount with exactly one trailing slash."""
    return mount if mount.endswith("/") else mount + "/"


def _normalized_cel(field: str) -> dict[str, str]:
    return cel(
        f"!has(self.{field}) || !self.{field}.matches('{UNNORMALIZED_PATH}')",
        f"{field} must be a normalized path: no '.' or '..' segment and no '//' (a '..' can leave the shared "
        "volume); write the path it resolves to",
        f".{field}",
    )


def _undermount_cel(field: str) -> dict[str, str]:
    prefix = "(self.mountPath.endsWith('/') ? self.mountPath : self.mountPath + '/')"
    return cel(
        f"!has(self.{field}) || !has(self.mountPath) || "
        f"(self.{field}.startsWith({prefix}) && self.{field} != {prefix})",
        f"{field} must be under mountPath, on the shared volume every rank reaches; put it under the mount",
        f".{field}",
    )


def grammar(pattern: str, rule: str) -> AfterValidator:
    """A check that refuses a string unless it matches `pattern`, naming the value and the rule in words (a
    regular expression is no fix a user can act on). Pair it with `pattern_schema(pattern)` for the CRD."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError("grammar", "it is not {rule}; fix the value", {"rule": rule})
        return value

    return AfterValidator(check)


def pattern_schema(pattern: str) -> Any:
    """The same pattern as the CRD's `pattern` (the API server checks it; the Python check is `grammar`)."""
    return Field(json_schema_extra={"pattern": f"^{pattern}$"})


# The kubelet parses an image with the container reference grammar (github.com/distribution/reference,
# `ParseNormalizedNamed`): lowercase repository path components, an optional registry (a host with a '.' or
# a port, or localhost), a tag of word characters, a digest whose hex length fits its algorithm. A first
# component without '.' or ':' is a repository path, not a registry, so it must be lowercase too.
_ALNUM = "[a-z0-9]+"
_PATH_COMPONENT = f"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = (
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+(?::[0-9]+)?|{_DOMAIN_COMPONENT}:[0-9]+|localhost"
    r"|\[[a-fA-F0-9:]+\](?::[0-9]+)?)"
)
_IMAGE = (
    rf"(?:{_HOST}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    "(?:@(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128}))?"
)
_IMAGE_RULE = (
    "an image reference the kubelet can parse: [registry/]lowercase/path[:tag][@sha256:<64 lowercase hex digits>]"
)
ImageRef = Annotated[
    str, StringConstraints(min_length=1, max_length=512), grammar(_IMAGE, _IMAGE_RULE), pattern_schema(_IMAGE)
]
# A Secret's or a claim's name: a DNS subdomain (`a..b` and `a.-b` are not), as the API server checks a pod's
# secretKeyRef and every object's name (a claim named otherwise can never exist: the pods would wait for it).
ObjectName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    grammar(_DNS_SUBDOMAIN, "a DNS subdomain: lowercase letters, digits, '-' and '.', no empty label"),
    pattern_schema(_DNS_SUBDOMAIN),
]
# A key of a Secret (the API server's IsConfigMapKey): '.' and '..' are refused even though they match.
_CONFIG_MAP_KEY = r"([-_a-zA-Z0-9][-._a-zA-Z0-9]*|\.[-_a-zA-Z0-9][-._a-zA-Z0-9]*|\.\.[-._a-zA-Z0-9]+)"
SecretKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    grammar(_CONFIG_MAP_KEY, "a Secret key: letters, digits, '-', '_' and '.', not '.' or '..'"),
    pattern_schema(_CONFIG_MAP_KEY),
]
# An environment variable's name as the API server accepts it in a container (IsEnvVarName).
ENV_NAME = r"[-._a-zA-Z][-._a-zA-Z0-9]*"
ENV_NAME_RULE = "an environment variable name: letters, digits, '_', '-' and '.', not starting with a digit"
EnvName = Annotated[
    str, StringConstraints(min_length=1, max_length=128), grammar(ENV_NAME, ENV_NAME_RULE), pattern_schema(ENV_NAME)
]
_DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DnsLabel = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63),
    grammar(_DNS_LABEL, "a DNS label: lowercase letters, digits and '-', at most 63 characters"),
    pattern_schema(_DNS_LABEL),
]
_LABEL_KEY = rf"({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}"
_LABEL_KEY_RULE = (
    "a label key: an optional DNS subdomain prefix of at most 253 characters and '/', then a name of 1-63 "
    "letters, digits, '-', '_' or '.' starting and ending with a letter or digit"
)


def _label_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        prefix = key.rpartition("/")[0]
        if not re.fullmatch(_LABEL_KEY, key) or len(prefix) > 253:
            raise PydanticCustomError(
                "label_key", "key {key} is not {rule}; fix the key", {"key": repr(echo(key)), "rule": _LABEL_KEY_RULE}
            )
    return value


# Node selectors: the keys are label keys too (the API server refuses a pod whose nodeSelector has another).
LabelMap = Annotated[
    dict[str, Annotated[str, StringConstraints(pattern=rf"^({_LABEL_NAME})?$", max_length=63)]],
    Field(max_length=32),
    AfterValidator(_label_keys),
    Field(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(k, k.matches('^"
                    + _LABEL_KEY.replace("\\", "\\\\")
                    + "$') && !k.matches('^[^/]{254,}/'))",
                    "message": f"every key must be {_LABEL_KEY_RULE}",
                }
            ]
        }
    ),
]


def cel(rule: str, message: str, field_path: str | None = None, values: tuple[str, ...] = ()) -> dict[str, str]:
    """One `x-kubernetes-validations` entry.

    With `values` (CEL integer expressions), the message is a template whose `%d` are filled in by a
    messageExpression using CEL's `format`: kube-apiserver 1.37 estimates `'...' + string(<number>)` as
    unbounded and refuses the CRD for its cost, but accepts `format`.
    """
    entry = {"rule": rule, "message": message.replace("%d", "N")}
    if values:
        literal = message.replace("\\", "\\\\").replace("'", "\\'")
        entry["messageExpression"] = f"'{literal}'.format([{', '.join(values)}])"
    if field_path:
        entry["fieldPath"] = field_path
    return entry


def rules(*entries: dict[str, str]) -> ConfigDict:
    validations: list[JsonValue] = [dict(entry) for entry in entries]
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": validations})


class Placement(StrEnum):
    COLOCATED = "Colocated"
    DISAGGREGATED = "Disaggregated"


class RewardType(StrEnum):
    DEEPSCALER = "deepscaler"
    DAPO = "dapo"
    MATH = "math"
    REMOTE = "remote"


class RewardBackend(StrEnum):
    MATH_VERIFY = "math_verify"
    REWARD_MODEL = "reward_model"


class GuardAction(StrEnum):
    STOP = "Stop"
    WARN = "Warn"


class ModelSpec(ApiModel):
    model_config = rules(_normalized_cel("hfCheckpoint"), _normalized_cel("torchDistCheckpoint"))
    profile: ModelProfileName = Field(
        description="Built-in architecture; sets miles's model flags and the memory plan."
    )
    hf_checkpoint: AbsPath = Field(
        description="HF checkpoint directory (miles --hf-checkpoint): tokenizer, config and SGLang weights."
    )
    torch_dist_checkpoint: AbsPath = Field(
        description="Megatron torch_dist checkpoint of the same model (miles --ref-load): reference and initial weights."
    )


class DataSpec(ApiModel):
    model_config = rules(_normalized_cel("promptData"))
    prompt_data: AbsPath = Field(description="Training prompts, .jsonl or .parquet (miles --prompt-data).")
    input_key: Name = Field(default="prompt", description="Key of the prompt in each record (miles --input-key).")
    label_key: Name = Field(default="label", description="Key of the gold answer in each record (miles --label-key).")
    apply_chat_template: bool = Field(default=True, description="Apply the tokenizer's chat template to prompts.")
    shuffle: bool = Field(default=True, description="Shuffle prompts between rollouts (miles --rollout-shuffle).")


class EvalSpec(ApiModel):
    model_config = rules(_normalized_cel("promptData"))
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")] = Field(
        default="eval", description="Name of the evaluation set, used as the metric prefix (eval/<name>)."
    )
    prompt_data: AbsPath = Field(description="Evaluation prompts, .jsonl or .parquet (miles --eval-prompt-data).")
    interval: int = Field(default=10, ge=1, le=100000, description="Evaluate every this many rollouts.")
    samples_per_prompt: int = Field(default=8, ge=1, le=256, description="Samples per evaluation prompt.")
    max_response_len: int = Field(default=16384, ge=1, le=262144, description="Maximum response tokens in evaluation.")


class RolloutSpec(ApiModel):
    num_rollout: int = Field(ge=1, le=1000000, description="Number of rollouts (GRPO iterations) to run.")
    batch_size: int = Field(ge=1, le=1000000, description="Prompts per rollout (miles --rollout-batch-size).")
    samples_per_prompt: int = Field(
        default=8, ge=1, le=1024, description="Responses sampled per prompt (GRPO group size)."
    )
    max_response_len: int = Field(default=8192, ge=1, le=262144, description="Maximum response tokens per sample.")
    temperature: float = Field(default=1.0, gt=0, le=2, description="Sampling temperature of the rollout.")


class TrainingSpec(ApiModel):
    model_config = rules(
        cel(
            "self.epsClipHigh >= self.epsClip",
            "epsClipHigh must be at least epsClip",
            ".epsClipHigh",
        ),
    )
    global_batch_size: int = Field(
        ge=1, le=10000000, description="Samples per optimizer step (miles --global-batch-size)."
    )
    steps_per_rollout: int = Field(default=1, ge=1, le=1024, description="Optimizer steps per rollout.")
    learning_rate: float = Field(default=1e-6, gt=0, le=1, description="Adam learning rate.")
    max_tokens_per_gpu: int = Field(
        default=8192, ge=256, le=1048576, description="Token budget of one micro-batch per GPU (dynamic batching)."
    )
    kl_loss_coef: float = Field(
        default=0.0, ge=0, le=10, description="KL loss coefficient (low_var_kl against the reference)."
    )
    eps_clip: float = Field(default=0.2, gt=0, le=1, description="Lower PPO clip range.")
    eps_clip_high: float = Field(default=0.28, gt=0, le=1, description="Upper PPO clip range (clip-higher).")

    @model_validator(mode="before")
    @classmethod
    def _no_distributed_optimizer_switch(cls, data: Any) -> Any:
        """`distributedOptimizer` was a switch miles ignores: it turns the distributed optimizer on for adam
        whatever the flags say (docs/integrations/miles.md), so the field is gone and the plan always shards the
        optimizer state over data parallelism."""
        if isinstance(data, dict) and "distributedOptimizer" in data:
            raise PydanticCustomError(
                "removed_field",
                "distributedOptimizer was removed: miles always uses the distributed optimizer for adam "
                "(miles/backends/megatron_utils/arguments.py:15) and the plan counts it; delete the field",
            )
        return data


class ActorSpec(ApiModel):
    nodes: int = Field(default=1, ge=1, le=512, description="Nodes (worker pods) for the training actor.")
    gpus_per_node: int = Field(default=8, ge=1, le=8, description="GPUs per node used by the actor.")


class RolloutTopology(ApiModel):
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="GPUs for SGLang engines. Colocated: defaults to, and must equal, the actor's GPUs. "
        "Disaggregated: required, on GPUs of their own.",
    )
    gpus_per_engine: int = Field(
        default=1, ge=1, le=8, description="GPUs per SGLang engine (its tensor-parallel size)."
    )
    expert_parallel: int = Field(
        default=1,
        ge=1,
        le=8,
        description="SGLang expert-parallel size inside an engine (MoE only); the MoE tensor-parallel size is "
        "gpusPerEngine / expertParallel.",
    )
    mem_fraction: float = Field(
        default=0.8, ge=0.1, le=0.95, description="SGLang static memory fraction (weights and KV cache) of each GPU."
    )


class Parallelism(ApiModel):
    tensor: int = Field(default=1, ge=1, le=64, description="Megatron tensor-parallel size.")
    pipeline: int = Field(default=1, ge=1, le=64, description="Megatron pipeline-parallel size.")
    context: int = Field(default=1, ge=1, le=64, description="Megatron context-parallel size.")
    expert: int = Field(default=1, ge=1, le=256, description="Megatron expert-parallel size; MoE only.")
    expert_tensor: int = Field(default=1, ge=1, le=64, description="Megatron expert tensor-parallel size; MoE only.")


_ACTOR_GPUS = "(self.actor.nodes * self.actor.gpusPerNode)"
_ROLLOUT_GPUS = f"(has(self.rollout.gpus) ? self.rollout.gpus : {_ACTOR_GPUS})"
_MODEL_PARALLEL = "(self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.context)"
_EXPERT_PARALLEL = "(self.parallelism.expert * self.parallelism.expertTensor * self.parallelism.pipeline)"


class TopologySpec(ApiModel):
    model_config = rules(
        cel(
            f"self.placement != 'Colocated' || !has(self.rollout.gpus) || self.rollout.gpus == {_ACTOR_GPUS}",
            "rollout.gpus %d must equal the actor's GPUs (%d nodes x %d = %d) when placement is Colocated; remove "
            "rollout.gpus or set it to that number",
            ".rollout.gpus",
            ("self.rollout.gpus", "self.actor.nodes", "self.actor.gpusPerNode", _ACTOR_GPUS),
        ),
        cel(
            "self.placement != 'Disaggregated' || has(self.rollout.gpus)",
            "rollout.gpus is required when placement is Disaggregated (rollout engines get GPUs of their own)",
            ".rollout.gpus",
        ),
        cel(
            f"{_ROLLOUT_GPUS} % self.rollout.gpusPerEngine == 0",
            "rollout GPUs %d are not a multiple of rollout.gpusPerEngine %d: the left-over GPUs would sit idle",
            ".rollout.gpusPerEngine",
            (_ROLLOUT_GPUS, "self.rollout.gpusPerEngine"),
        ),
        cel(
            "self.actor.gpusPerNode % self.rollout.gpusPerEngine == 0",
            "rollout.gpusPerEngine %d must divide actor.gpusPerNode %d (an engine cannot span nodes)",
            ".rollout.gpusPerEngine",
            ("self.rollout.gpusPerEngine", "self.actor.gpusPerNode"),
        ),
        cel(
            f"{_ACTOR_GPUS} % {_MODEL_PARALLEL} == 0",
            "parallelism tensor x pipeline x context = %d must divide the actor's %d GPUs",
            ".parallelism",
            (_MODEL_PARALLEL, _ACTOR_GPUS),
        ),
        cel(
            f"{_ACTOR_GPUS} % {_EXPERT_PARALLEL} == 0",
            "parallelism expert x expertTensor x pipeline = %d must divide the actor's %d GPUs",
            ".parallelism.expert",
            (_EXPERT_PARALLEL, _ACTOR_GPUS),
        ),
        cel(
            "self.parallelism.tensor <= self.actor.gpusPerNode",
            "parallelism.tensor must not exceed actor.gpusPerNode (tensor parallelism stays inside a node)",
            ".parallelism.tensor",
        ),
        cel(
            "self.rollout.gpusPerEngine % self.rollout.expertParallel == 0",
            "rollout.gpusPerEngine must be a multiple of rollout.expertParallel (SGLang expert parallelism is inside an engine)",
            ".rollout.expertParallel",
        ),
    )
    placement: Placement = Field(
        default=Placement.COLOCATED,
        description="Colocated: training and rollout share GPUs, taking turns. Disaggregated: separate GPU pools.",
    )
    instance_type: Annotated[
        str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", min_length=1, max_length=63)
    ] = Field(
        default=InstanceTypeName.P5EN.value,
        description="GPU instance type of the worker nodes, one of the runtime's instanceTypes; sets GPU memory and "
        "the fabric. Default: the runtime's defaults.instanceType (p5en.48xlarge without a runtime).",
        json_schema_extra=_RUNTIME_DEFAULT,
    )
    actor: ActorSpec = Field(default_factory=ActorSpec, description="GPUs of the Megatron training actor.")
    rollout: RolloutTopology = Field(default_factory=RolloutTopology, description="GPUs of the SGLang rollout engines.")
    parallelism: Parallelism = Field(
        default_factory=Parallelism, description="Megatron model parallelism of the actor."
    )
    efa_per_node: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="Override of the fabric devices requested per worker; default: all the instance type has "
        "(a partial request breaks point-to-point NCCL traffic), none for a single-node run.",
    )

    # The counts the CEL rules above compute (_ACTOR_GPUS, _ROLLOUT_GPUS, ...), so the Python rules and the plan
    # read the same numbers the API server judged.
    @property
    def actor_gpus(self) -> int:
        return self.actor.nodes * self.actor.gpus_per_node

    @property
    def rollout_gpus(self) -> int:
        return self.rollout.gpus if self.rollout.gpus is not None else self.actor_gpus

    @property
    def model_parallel(self) -> int:
        """tensor x pipeline x context: the GPUs one copy of the actor's weights spans."""
        p = self.parallelism
        return p.tensor * p.pipeline * p.context

    @property
    def data_parallel(self) -> int:
        return max(1, self.actor_gpus // self.model_parallel)


class RemoteRewardSpec(ApiModel):
    backend: RewardBackend = Field(
        default=RewardBackend.MATH_VERIFY, description="Scoring backend of the reward service."
    )
    replicas: int = Field(default=2, ge=1, le=256, description="Reward service replicas (CPU pods).")
    timeout_seconds: float = Field(
        default=10.0,
        ge=5,
        le=600,
        description=(
            "Hard deadline for scoring one response, in seconds (the service gives up on an item after half of it); "
            "at least 5, so that a simple answer can be verified on a busy CPU node (math-verify parses with sympy)."
        ),
    )
    image: ImageRef | None = Field(
        default=None, description="Reward service image; default: the operator's configured image."
    )


class RewardSpec(ApiModel):
    model_config = rules(
        cel(
            "self.type != 'remote' || has(self.remote)",
            "reward.remote is required when reward.type is remote",
            ".remote",
        ),
        cel(
            "self.type == 'remote' || !has(self.remote)",
            "reward.remote is only used when reward.type is remote; remove it or set type: remote",
            ".remote",
        ),
    )
    type: RewardType = Field(
        default=RewardType.DEEPSCALER,
        description="Rule-based reward built into miles (deepscaler, dapo, math), or remote: the CPU reward service.",
    )
    remote: RemoteRewardSpec | None = Field(default=None, description="The reward service, when type is remote.")

    @property
    def score_range(self) -> tuple[float, float] | None:
        """The scores this reward gives (lowest, highest), or None when unbounded (a reward model)."""
        if self.type is RewardType.REMOTE and self.remote is not None:
            return REWARD_BACKEND_RANGES[self.remote.backend]
        return REWARD_RANGES[self.type]


# What each reward scores a response (docs/integrations/miles.md, "Reward types"): the one rule the plan, the
# render and the min-reward guard's default read. miles's dapo gives -1 for a wrong answer, the others 0.
REWARD_RANGES: dict[RewardType, tuple[float, float] | None] = {
    RewardType.DEEPSCALER: (0.0, 1.0),
    RewardType.DAPO: (-1.0, 1.0),
    RewardType.MATH: (0.0, 1.0),
    RewardType.REMOTE: (0.0, 1.0),
}
REWARD_BACKEND_RANGES: dict[RewardBackend, tuple[float, float] | None] = {
    RewardBackend.MATH_VERIFY: (0.0, 1.0),
    RewardBackend.REWARD_MODEL: None,
}


class StorageSpec(ApiModel):
    model_config = rules(
        _normalized_cel("mountPath"),
        _normalized_cel("checkpointDir"),
        _normalized_cel("tensorboardDir"),
        _undermount_cel("checkpointDir"),
        _undermount_cel("tensorboardDir"),
        mount_cel("mountPath"),
    )
    claim_name: ObjectName = Field(
        description="ReadWriteMany PersistentVolumeClaim in the run's namespace holding models, data and "
        "checkpoints; default: the runtime's defaults.storage.claimName.",
        json_schema_extra=_RUNTIME_DEFAULT,
    )
    mount_path: AbsPath = Field(
        default="/fsx",
        description="Where the claim is mounted in every Ray pod; default: the runtime's, else /fsx.",
        json_schema_extra=_RUNTIME_DEFAULT,
    )
    checkpoint_dir: AbsPath | None = Field(
        default=None, description="Checkpoint directory; default: <mountPath>/grpo/<namespace>/<name>/checkpoints."
    )
    tensorboard_dir: AbsPath | None = Field(
        default=None, description="TensorBoard directory; default: <mountPath>/grpo/<namespace>/<name>/tensorboard."
    )
    save_interval: int | None = Field(
        default=None,
        ge=1,
        le=1000000,
        description="Save every this many rollouts; default: the runtime's, else only at the end of the run.",
    )
    checkpoint_on_suspend: bool = Field(
        default=True,
        description="On spec.suspend, ask miles for a checkpoint (its --save-trigger-sentinel) and stop the job once "
        "the next rollout has saved it (or after guards.stallTimeoutSeconds), so resuming loses no progress.",
    )
    write_gbps: float = Field(
        default=0.74,
        ge=0.01,  # a save of the largest checkpoint then stays within days, not an overflow
        le=1000,
        description="Checkpoint write bandwidth of the volume in GB/s, for the time a save takes before a worker "
        "pod goes; default: FSx for Lustre as measured (53 GB in 72 s).",
    )


def _int64(value: int) -> int:
    if value > 2**63 - 1:
        raise PydanticCustomError(
            "int64", "it is beyond an int64 (at most 9223372036854775807); write a smaller number"
        )
    return value


# A pod's int64 field. The bound is not in the schema: the API server refuses 2**63 - 1 as a `maximum` (not an
# integer once read as a float) and refuses a larger number on its own, as a number that is not an integer.
Int64 = Annotated[int, AfterValidator(_int64)]


class Toleration(ApiModel):
    """A pod toleration, refused by the same rules the API server applies to pods (Kubernetes
    pkg/apis/core/validation/validation.go `ValidateTolerations`), so a run never renders a pod the API
    server would refuse. The rules are CEL for the CRD and `_kubernetes_rules` for `grpo validate`; a
    test compares both with the API server's verdict on a Pod."""

    model_config = rules(
        cel(
            "self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "value must be empty when `operator` is 'Exists'",
            ".value",
        ),
        cel(
            "(has(self.key) && self.key != '') || self.operator == 'Exists'",
            'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            ".operator",
        ),
        cel(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ".effect",
        ),
    )
    key: QualifiedName | None = Field(
        default=None, description="Taint key (a label name); empty with Exists matches every taint."
    )
    operator: Annotated[str, StringConstraints(pattern=r"^(Exists|Equal)$")] = Field(
        default="Equal", description="Exists or Equal."
    )
    value: LabelValue | None = Field(default=None, description="Taint value (a label value); empty with Exists.")
    effect: Annotated[str, StringConstraints(pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)?$")] | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule or NoExecute; empty matches all."
    )
    toleration_seconds: Int64 | None = Field(
        default=None, ge=0, description="How long a NoExecute taint is tolerated (an int64)."
    )

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise PydanticCustomError(
                "toleration",
                "value {value} must be empty when `operator` is 'Exists'; remove value, or use operator Equal",
                {"value": repr(self.value)},
            )
        if not self.key and self.operator != "Exists":
            raise PydanticCustomError(
                "toleration",
                "operator must be Exists when `key` is empty, which means "
                '"match all values and all keys"; set key, or operator Exists',
            )
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise PydanticCustomError(
                "toleration",
                "effect must be 'NoExecute' when `tolerationSeconds` is set; "
                "set effect NoExecute, or remove tolerationSeconds",
            )
        return self


class GangScheduler(StrEnum):
    """The gang schedulers KubeRay v1.5.0 integrates (docs/integrations/kuberay.md). The platform picks one for
    the whole KubeRay operator (its `batchScheduler` setting); a run only adds the labels that scheduler reads
    from the RayCluster."""

    VOLCANO = "Volcano"
    KAI = "KAI"
    SCHEDULER_PLUGINS = "SchedulerPlugins"


# A queue's name: an object name that is also a label value (Kueue reads it from a label).
QueueName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


class GangSpec(ApiModel):
    """Gang scheduling of the Ray pods: all of them are placed, or none (no worker holds its GPUs while
    another cannot be placed)."""

    model_config = rules(
        cel(
            "self.scheduler != 'KAI' || has(self.queue)",
            "queue is required with scheduler KAI (KubeRay leaves the pods pending without the kai.scheduler/queue "
            "label)",
            ".queue",
        ),
        cel(
            "self.scheduler != 'SchedulerPlugins' || !has(self.queue)",
            "queue must be unset with scheduler SchedulerPlugins (coscheduling has no queues)",
            ".queue",
        ),
    )
    scheduler: GangScheduler = Field(
        description="The gang scheduler the cluster's KubeRay operator is configured with (its batchScheduler): "
        "Volcano, KAI or SchedulerPlugins (coscheduling)."
    )
    queue: QueueName | None = Field(
        default=None,
        description="Volcano queue (optional, Volcano's default queue otherwise) or KAI queue "
        "(required); unset for SchedulerPlugins.",
    )

    @model_validator(mode="after")
    def _queue_rules(self) -> GangSpec:
        if self.scheduler is GangScheduler.KAI and self.queue is None:
            raise PydanticCustomError(
                "gang",
                "queue is required with scheduler KAI (KubeRay leaves the pods "
                "pending without the kai.scheduler/queue label); set queue to a KAI queue",
            )
        if self.scheduler is GangScheduler.SCHEDULER_PLUGINS and self.queue is not None:
            raise PydanticCustomError(
                "gang",
                "queue {queue} must be unset with scheduler SchedulerPlugins "
                "(coscheduling has no queues); remove queue",
                {"queue": repr(self.queue)},
            )
        return self


class SchedulingSpec(ApiModel):
    model_config = rules(
        cel(
            "!has(self.gang) || self.gang.scheduler != 'Volcano' || !has(self.priorityClassName) || "
            "size(self.priorityClassName) <= 63",
            "priorityClassName must be at most 63 characters with the Volcano gang scheduler (it becomes the "
            "RayCluster's ray.io/priority-class-name label); use a PriorityClass with a shorter name",
            ".priorityClassName",
        ),
    )
    queue_name: QueueName | None = Field(
        default=None,
        description="Kueue LocalQueue in the run's namespace: the RayCluster is created suspended with the "
        "kueue.x-k8s.io/queue-name label and starts, whole, once Kueue admits it; the reward service is created "
        "only then.",
    )
    gang: GangSpec | None = Field(default=None, description="Gang scheduling of the Ray pods (all or none).")
    gpu_node_selector: LabelMap = Field(default_factory=dict, description="Node selector of the GPU worker pods.")
    head_node_selector: LabelMap = Field(
        default_factory=dict, description="Node selector of the Ray head (a CPU node)."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=16, description="Extra tolerations of the worker pods."
    )
    priority_class_name: Annotated[str, StringConstraints(pattern=rf"^{_DNS_SUBDOMAIN}$", max_length=253)] | None = (
        Field(default=None, description="PriorityClass of the Ray pods.")
    )


class RuntimeRef(ApiModel):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)] = Field(
        description="A cluster's GRPORuntime: its instance types, fabric, images, storage and scheduling defaults."
    )


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="Secret in the run's namespace.")
    key: SecretKey = Field(default="HF_TOKEN", description="Key in the Secret.")


class SecretKeySelector(ApiModel):
    name: ObjectName = Field(description="Secret in the run's namespace.")
    key: SecretKey = Field(description="Key in the Secret.")


class SecretEnv(ApiModel):
    """An environment variable of the Ray pods whose value is a Secret's key, given by secretKeyRef only."""

    # So the value is in no manifest, runtime env, ConfigMap or status; the kept logs are redacted of it.
    name: EnvName = Field(description="The variable (WANDB_API_KEY, ...); not one the operator sets itself.")
    secret_key_ref: SecretKeySelector = Field(description="The Secret and key that hold the value.")


# A list of env entries keyed by name: the API server refuses a name given twice.
SECRET_ENV_LIST: dict[str, JsonValue] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


class MinRewardGuard(ApiModel):
    value: float | None = Field(
        default=None,
        ge=-1000,
        le=1000,
        description="Reward at or below this is degenerate. Default: the lowest score of reward.type (0 for "
        "deepscaler, math and remote math_verify, -1 for dapo: every answer wrong); none for a reward model.",
    )
    after_rollouts: int = Field(default=3, ge=1, le=1000000, description="Start checking after this many rollouts.")
    # Set from the run's reward by GRPORunSpec, so the guard reads the same default as `grpo plan`.
    _reward_range: tuple[float, float] | None = PrivateAttr(default=(0.0, 1.0))

    @property
    def floor(self) -> float | None:
        """The reward at or below which a rollout is degenerate, or None when no floor applies."""
        if self.value is not None:
            return self.value
        return None if self._reward_range is None else self._reward_range[0]

    def describe(self) -> str:
        """Where the floor comes from, for the plan and the guard's message."""
        if self.value is not None:
            return f"guards.minReward.value {self.value:g}"
        if self._reward_range is None:
            return "no guards.minReward.value (a reward model's scores have no known floor)"
        low, high = self._reward_range
        return f"guards.minReward.value default {low:g} (the lowest score of the reward's range {low:g}..{high:g})"


class EvalRegressionGuard(ApiModel):
    """Reward hacking: the held-out score falls while the training reward does not (status/evaluation.py)."""

    max_drop: float = Field(
        ge=0,
        le=1000,
        description="The eval score may fall this far below its best; more than this counts as a regression.",
    )
    after: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="Consecutive scored evaluations in regression, the training reward not falling, before it trips.",
    )


class GuardsSpec(ApiModel):
    max_repetition_frac: float = Field(
        default=0.3, ge=0, le=1, description="rollout/repetition_frac above this is degenerate output."
    )
    consecutive_rollouts: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="Rollouts in a row the repetition must exceed the limit before the guard trips.",
    )
    min_reward: MinRewardGuard = Field(default_factory=MinRewardGuard, description="Reward floor after a warm-up.")
    stall_timeout_seconds: int = Field(
        default=3600,
        ge=5,
        le=604800,
        description="No rollout progress for this long, while the trainer's metrics are available, is a stall.",
    )
    startup_grace_seconds: int = Field(
        default=1800,
        ge=0,
        le=604800,
        description="After each (re)start of the job, time for model load before the stall clock starts.",
    )
    eval_regression: EvalRegressionGuard | None = Field(
        default=None,
        description="Trip (EvalRegressed) when the eval score falls more than maxDrop below its best for `after` "
        "evaluations in a row while the training reward did not fall; needs spec.eval.",
    )
    action: GuardAction = Field(default=GuardAction.STOP, description="Stop the job and fail the run, or only Warn.")


class RecoverySpec(ApiModel):
    max_restarts: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Restarts from the last checkpoint, each a new attempt, after a failure a restart can fix: an "
        "NCCL timeout or fabric error, a lost node, a dead rollout engine, host memory pressure, a GPU hardware "
        "error. Input errors, GPU out-of-memory, CUDA kernel faults, degenerate output, stalls and invalid specs are "
        "never restarted.",
    )
    provisioning_timeout_seconds: int | None = Field(
        default=None,
        ge=0,
        le=86400,
        description="Longest a pod of the RayCluster may wait unschedulable (its PodScheduled condition False, "
        "Unschedulable) before the operator deletes the RayCluster, freeing the GPUs its scheduled pods hold: the "
        "run restarts without its avoidedNodes when it keeps off some, else ends Failed/ProvisioningTimeout. "
        "Unset: 30 minutes plus one per GPU node of the plan. 0: wait without limit.",
    )


class PreemptionSpec(ApiModel):
    """How long a worker pod may take to go: finish its rollout step, then save (its preStop hook)."""

    max_grace_seconds: int = Field(
        default=1800,
        ge=30,
        le=86400,
        description="Most seconds a worker pod waits for its save when it is preempted, drained or suspended; a "
        "preemptor waits this long for the GPUs. The operator's own limit may be lower.",
    )
    step_seconds: int = Field(
        default=600,
        ge=1,
        le=86400,
        description="A rollout step's time until one is observed (then the observed p95 of recent rollouts).",
    )


class ExportSpec(ApiModel):
    """Copies of the trained model besides miles's Megatron checkpoints."""

    huggingface: bool = Field(
        default=False,
        description="Write a Hugging Face copy at each save (miles --save-hf, under the checkpoint directory); the "
        "run succeeds only when the last one has config.json and non-empty weight files (else Failed/ExportMissing).",
    )


class GRPORunSpec(ApiModel):
    """What the run should do: model, data, sizes, GPUs, reward, storage and guards."""

    model_config = rules(
        cel(
            "self.rollout.batchSize * self.rollout.samplesPerPrompt == self.training.globalBatchSize * self.training.stepsPerRollout",
            "GRPO batch identity: rollout.batchSize x samplesPerPrompt = %d x %d must equal "
            "training.globalBatchSize x stepsPerRollout = %d x %d",
            ".training.globalBatchSize",
            (
                "self.rollout.batchSize",
                "self.rollout.samplesPerPrompt",
                "self.training.globalBatchSize",
                "self.training.stepsPerRollout",
            ),
        ),
    )
    model: ModelSpec = Field(description="The model to train.")
    data: DataSpec = Field(description="Training data.")
    eval: EvalSpec | None = Field(default=None, description="Optional periodic evaluation.")
    rollout: RolloutSpec = Field(description="Rollout (generation) sizes and sampling.")
    training: TrainingSpec = Field(description="Optimizer and GRPO loss settings.")
    topology: TopologySpec = Field(default_factory=TopologySpec, description="GPUs, placement and parallelism.")
    reward: RewardSpec = Field(default_factory=RewardSpec, description="How responses are scored.")
    runtime_ref: RuntimeRef | None = Field(
        default=None,
        description="The GRPORuntime this run uses; default: the runtime named default, else the built-in AWS types.",
    )
    storage: StorageSpec = Field(
        description="Shared volume for models, data, checkpoints and TensorBoard.", json_schema_extra=_RUNTIME_DEFAULT
    )
    image: ImageRef = Field(
        description="Trainer image (miles plus the grpo launcher); pin it by digest (name@sha256:...). Default: the "
        "runtime's defaults.trainerImage.",
        json_schema_extra=_RUNTIME_DEFAULT,
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec, description="Queue, gang scheduling and node selection of the Ray pods."
    )
    hf_token_secret: SecretKeyRef | None = Field(
        default=None, description="Secret holding a Hugging Face token, passed to pods by secretKeyRef only."
    )
    secret_env: list[SecretEnv] = Field(
        default_factory=list,
        max_length=32,
        description="Env of the driver and the workers from Secrets (WANDB_API_KEY for --use-wandb), by secretKeyRef "
        "only; credentials never go in extraArgs. The runtime's defaults.secretEnv adds the names the run leaves out.",
        json_schema_extra=SECRET_ENV_LIST,
    )
    extra_args: list[Arg] = Field(
        default_factory=list,
        max_length=64,
        description="Extra miles/Megatron/SGLang arguments appended last; flags the operator manages are refused.",
    )
    export: ExportSpec = Field(default_factory=ExportSpec, description="Copies of the trained model to write.")
    guards: GuardsSpec = Field(
        default_factory=GuardsSpec,
        description="Stop runs that degenerate or stall; default: the runtime's defaults.guards.",
        json_schema_extra=_RUNTIME_DEFAULT,
    )
    recovery: RecoverySpec = Field(
        default_factory=RecoverySpec, description="Restart from the checkpoint after an infrastructure failure."
    )
    preemption: PreemptionSpec = Field(
        default_factory=PreemptionSpec,
        description="The grace period a worker pod gets to save before it goes (preemption, drain, suspend).",
    )
    suspend: bool = Field(
        default=False, description="Stop the job and free the GPUs; false resumes from the checkpoint."
    )

    # The GRPORuntime this spec was resolved against (`planning.runtime.resolve`); None: the built-in types.
    _runtime: GRPORuntime | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _reward_floor_follows_the_reward(self) -> GRPORunSpec:
        self.guards.min_reward._reward_range = self.reward.score_range
        return self

    @property
    def runtime(self) -> GRPORuntime | None:
        return self._runtime

    def bind_runtime(self, runtime: GRPORuntime) -> None:
        self._runtime = runtime


# Spec fields that may change after creation; every other field is immutable (a CEL transition rule).
MUTABLE_SPEC_FIELDS = frozenset({"suspend", "guards"})


def spec_immutability_rule() -> dict[str, str]:
    """The transition rule that refuses edits of everything but `MUTABLE_SPEC_FIELDS`."""
    parts = []
    for name, info in GRPORunSpec.model_fields.items():
        if name in MUTABLE_SPEC_FIELDS:
            continue
        wire = info.alias or name
        if info.is_required() and not runtime_defaulted(info.json_schema_extra):
            parts.append(f"self.{wire} == oldSelf.{wire}")
        else:
            parts.append(
                f"(has(self.{wire}) ? (has(oldSelf.{wire}) && self.{wire} == oldSelf.{wire}) : !has(oldSelf.{wire}))"
            )
    return cel(
        " && ".join(parts),
        "only spec.suspend and spec.guards can change after creation; create a new GRPORun for other changes",
    )
