"""Argv builders for the optional prepare steps the operator can render as Kubernetes Jobs.

* Download: ``hf download`` from a pinned ``huggingface_hub`` (the ``prepare`` extra). The older
  ``huggingface-cli download`` is a stub that exits 1 in huggingface_hub 1.x. The token reaches the CLI only
  through the ``HF_TOKEN`` environment variable from a Secret, never through argv.
* Conversion: miles's ``tools/convert_hf_to_torch_dist.py`` with the model's architecture flags, under
  ``torchrun`` when more than one GPU is used, with ``PYTHONPATH`` holding Megatron-LM. Its success signal is
  ``latest_checkpointed_iteration.txt`` containing ``release``, written as its last step.

* Model arguments: miles dec268f7 keeps a model's architecture flags as the bash array ``MODEL_ARGS`` in
  ``scripts/models/<type>.sh``; miles v0.1.0 moved them to ``scripts/models/<type>.py``, a function
  ``model_args(...) -> str`` whose parameters default from ``MODEL_ARGS_*`` variables and then a literal
  (``scripts/models/qwen3-4B.py:4-22``, ``qwen3-30B-A3B.py:1-42`` at v0.1.0; miles imports the file and calls it,
  ``miles/utils/external_utils/model_args_utils.py:14-22``). ``model_args_from_py`` reads such a file by AST, never
  executing it, with no ``MODEL_ARGS_*`` set (the defaults miles's own run scripts get).

These are builders only: nothing here runs a download or a conversion, and neither was run in this
repository (no network to the Hub, no miles image here).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

MILES_DIR = "/root/miles"
MEGATRON_DIR = "/root/Megatron-LM"
CONVERSION_TRACKER = "latest_checkpointed_iteration.txt"


def hf_download_argv(
    repo_id: str,
    local_dir: str,
    repo_type: Literal["model", "dataset"] = "model",
    revision: str | None = None,
) -> list[str]:
    """``hf download`` of one repository into ``local_dir`` (pin ``revision`` to a commit for reproducibility)."""
    if not repo_id or repo_id.startswith("-"):
        raise ValueError(f"repo_id {repo_id!r}: must be an owner/name repository id")
    argv = ["hf", "download", repo_id, "--local-dir", local_dir]
    if repo_type != "model":
        argv += ["--repo-type", repo_type]
    if revision:
        argv += ["--revision", revision]
    return argv


def model_args_argv(model_type: str, miles_dir: str = MILES_DIR) -> list[str]:
    """Prints a model's architecture flags, one per line: the pinned miles keeps them as the bash array
    ``MODEL_ARGS`` in ``scripts/models/<type>.sh``, which its run scripts source (docs/integrations/miles.md)."""
    script = 'source "$1" && printf "%s\\n" "${MODEL_ARGS[@]}"'
    return ["bash", "-c", script, "model_args", f"{miles_dir}/scripts/models/{model_type}.sh"]


def model_args_py_argv(model_type: str, miles_dir: str = MILES_DIR) -> list[str]:
    """Prints the flags of a v0.1.0-style ``scripts/models/<type>.py``, one per line (``model_args_from_py``)."""
    return ["python3", "-m", "grpo_launcher", "model-args", f"{miles_dir}/scripts/models/{model_type}.py"]


class ModelScriptError(ValueError):
    """A model script this reader cannot read without executing it."""


def _moe_layer_freq(*, nlayers: int, first_k_dense_replace: int) -> str:
    """miles v0.1.0's ``model_args_utils.moe_layer_freq`` (``model_args_utils.py:40-43``): K dense layers, then MoE."""
    dense = min(first_k_dense_replace, nlayers)
    return "[" + ",".join(["0"] * dense + ["1"] * (nlayers - dense)) + "]"


_CALLS: Mapping[str, Callable[..., Any]] = {"int": int, "str": str, "float": float, "moe_layer_freq": _moe_layer_freq}


class _Reader:
    """Evaluates the few expression forms miles's model scripts use; anything else is refused, not run."""

    def __init__(self, path: str, names: dict[str, Any]) -> None:
        self.path, self.names = path, names

    def refuse(self, node: ast.AST, why: str) -> ModelScriptError:
        return ModelScriptError(
            f"{self.path}:{getattr(node, 'lineno', '?')}: {why}: the model script is read without running it; "
            "give the architecture flags another way (spec.extraArgs) or use a miles model script of the supported "
            "shape"
        )

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                raise self.refuse(node, f"name {node.id!r} is not a parameter or a module constant")
            return self.names[node.id]
        if isinstance(node, ast.JoinedStr):
            return "".join(str(self.value(part)) for part in node.values)
        if isinstance(node, ast.FormattedValue):
            if node.format_spec is not None or node.conversion != -1:
                raise self.refuse(node, "a formatted value with a format spec or conversion")
            return self.value(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left) + self.value(node.right)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            result = None
            for item in node.values:
                result = self.value(item)
                if result:
                    return result
            return result
        if isinstance(node, ast.IfExp):
            return self.value(node.body) if self.value(node.test) else self.value(node.orelse)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is | ast.IsNot):
            same = self.value(node.left) is self.value(node.comparators[0])
            return same if isinstance(node.ops[0], ast.Is) else not same
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.refuse(node, f"an expression of the form {type(node).__name__}")

    def call(self, node: ast.Call) -> Any:
        if ast.unparse(node.func) == "os.environ.get":
            return None  # no MODEL_ARGS_* set: the script's own defaults
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name not in _CALLS:
            raise self.refuse(node, f"a call of {ast.unparse(node.func)!r}")
        args = [self.value(a) for a in node.args]
        kwargs = {k.arg: self.value(k.value) for k in node.keywords if k.arg is not None}
        return _CALLS[name](*args, **kwargs)


def model_args_from_py(source: str, path: str = "<model script>") -> list[str]:
    """The flags ``model_args()`` of a miles v0.1.0 model script returns with its defaults, split as the shell
    splits miles's one line (``model_args_utils.py:20``), read by AST only."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise ModelScriptError(f"{path}:{exc.lineno}: not Python: {exc.msg}") from None
    reader = _Reader(path, {})
    function = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            reader.names[node.targets[0].id] = reader.value(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name == "model_args":
            function = node
    if function is None:
        raise ModelScriptError(f"{path}: no function model_args(): not a miles v0.1.0 model script")
    params = function.args.args + function.args.kwonlyargs
    defaults = [None] * (len(function.args.args) - len(function.args.defaults)) + list(function.args.defaults)
    defaults += list(function.args.kw_defaults)
    reader.names.update({p.arg: None if d is None else reader.value(d) for p, d in zip(params, defaults, strict=True)})
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                reader.names[target.id] = reader.value(statement.value)
                continue
        if isinstance(statement, ast.Return) and statement.value is not None:
            flags = str(reader.value(statement.value)).split()
            if not flags:
                raise ModelScriptError(f"{path}: model_args() declared no model args")
            return flags
        raise reader.refuse(statement, f"a statement of the form {type(statement).__name__} in model_args()")
    raise ModelScriptError(f"{path}: model_args() returns nothing")


def convert_hf_to_torch_dist_argv(
    model_args: Sequence[str], hf_dir: str, save_dir: str, gpus: int = 1, miles_dir: str = MILES_DIR
) -> list[str]:
    """HF -> Megatron torch_dist; run with ``PYTHONPATH`` = ``conversion_env()`` and cwd ``miles_dir``."""
    if gpus < 1:
        raise ValueError(f"gpus {gpus}: must be at least 1")
    script = f"{miles_dir}/tools/convert_hf_to_torch_dist.py"
    launcher = ["python3", script] if gpus == 1 else ["torchrun", f"--nproc_per_node={gpus}", script]
    return [*launcher, *model_args, "--hf-checkpoint", hf_dir, "--save", save_dir]


def conversion_env(megatron_dir: str = MEGATRON_DIR, miles_dir: str = MILES_DIR) -> dict[str, str]:
    return {"PYTHONPATH": f"{megatron_dir}:{miles_dir}"}


def conversion_complete(save_dir: Path) -> bool:
    """True once the converter wrote its tracker file with ``release`` (its last step)."""
    try:
        return (save_dir / CONVERSION_TRACKER).read_text().strip() == "release"
    except OSError:
        return False
