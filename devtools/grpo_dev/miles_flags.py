"""miles's command line as data: extract every flag from the pinned sources (no import), and check an argv.

`python -m grpo_dev.miles_flags extract` (`make miles-flags`) reads, by AST only, the three sources that build
miles's parser and writes `tests/data/miles_flags.json`: each flag's names, dest, type, choices, nargs,
required and action, with the commits they came from. Nothing is imported: the sources need CUDA, torch and
each other. What it follows, at the pinned commits:

- miles `miles/utils/arguments.py:2307-2370` (`parse_args`): Megatron's `parse_args(extra_args_provider=...)`
  builds the parser (`megatron/training/arguments.py:48-96`), then miles adds its own flags, `reset_arg`
  adds a flag only where Megatron has none (`miles/utils/arguments.py:27-40`).
- Megatron `miles-main` adds plain `add_argument` calls and whole dataclasses through `ArgumentGroupFactory`
  (`megatron/training/argument_utils.py`: `--field-name`, enums as member names, bools as store_true, or
  `--no-x/--disable-x` store_false when the default is true, `argparse_meta` overrides).
- SGLang 0.5.16 `ServerArgs.add_cli_args` (`python/sglang/srt/server_args.py:7099`): the `A[T, Arg(...)]`
  fields (`arg_groups/arg_utils.py:add_cli_args_from_dataclass`) and a few manual calls. miles wraps
  `add_argument` so each becomes `--sglang-<flag>` and skips a list of fields
  (`miles/backends/sglang_utils/arguments.py:36-130`).

Not extracted (a rendered flag from these fails the check as unknown, which is the safe side): the router's
`RouterArgs` (`--router-*`, from the `sgl-router-for-miles` wheel), miles's experimental user-function
arguments (only with `MILES_EXPERIMENTAL_ROLLOUT_REFACTOR=1`) and the FSDP backend's flags.

`check_argv` (used by tests/render/test_miles_flags.py) checks an argv against that data: every flag
known, values of the right count, type and choices, required flags present, and no pair miles refuses.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import hashlib
import io
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parents[2] / "tests" / "data" / "miles_flags.json"
# The operator's copy (what `grpo validate` checks extraArgs against): names, dest, arity, condition.
TABLE_MODULE = Path(__file__).resolve().parents[2] / "operator" / "grpo_operator" / "planning" / "miles_flag_table.py"

MILES_REPO = "radixark/miles"
MILES_COMMIT = "dec268f70"  # the pin (README, trainer image); the data file must come from this commit
MEGATRON_REPO = "radixark/Megatron-LM"
MEGATRON_BRANCH = "miles-main"  # miles docker/Dockerfile:21-22 (MEGATRON_REPO, MEGATRON_BRANCH)
# The image clones the branch head at build time (miles docker/Dockerfile:151): the pinned base image
# (trainer_image/Dockerfile MILES_BASE_TAG dev-202607310056, built 2026-07-31 00:56) holds the head of that
# day, 50ac48e8 (2026-07-29); the next commit on the branch is 2026-08-04.
MEGATRON_COMMIT = "50ac48e87b8a31da7330de4a03d8ae42b985d9d2"
ROUTER_REPO = "radixark/sgl-router-for-miles"
# The image installs a prebuilt sglang_router wheel of this repository (miles docker/Dockerfile:239-252); its
# main at the image's build date (2026-06-29, nothing later before 2026-07-31).
ROUTER_COMMIT = "a2ad8d0c84191efea67e1bb2b61d0c634b84c2ce"
ROUTER_ARGS = "bindings/python/src/sglang_router/router_args.py"
SGLANG_VERSION = "0.5.16"  # miles docker/Dockerfile:13 (SGLANG_IMAGE_TAG=v0.5.16)
SGLANG_NOTE = (
    "miles's image builds the sglang-miles branch over the v0.5.16 base image "
    "(miles docker/Dockerfile:13-19); flags here are the released 0.5.16's"
)


@dataclass(frozen=True)
class MilesVersion:
    """One supported miles version: the commits its flag table is read from and where the table is written."""

    miles: str
    megatron: str
    router: str
    data_file: Path
    table_module: Path
    sglang_note: str = SGLANG_NOTE


# The supported miles versions (docs/integrations/miles.md, "Pins" and "miles v0.1.0"); the first is the default.
VERSIONS: dict[str, MilesVersion] = {
    "dec268f7": MilesVersion(MILES_COMMIT, MEGATRON_COMMIT, ROUTER_COMMIT, DATA_FILE, TABLE_MODULE),
    # v0.1.0's release-lock.json:2-7 pins Megatron 37f91617 and SGLang sgl-project/sglang@cb05a44f (branch
    # sglang-miles over the v0.5.16 base). That SGLang source is not read here (the repository is too large to
    # mirror), so its flags are the released 0.5.16's, as for dec268f7. The image installs a prebuilt sglang_router
    # wheel (miles docker/Dockerfile:246-275 at v0.1.0) whose commit is not recorded: the router's flags are
    # a2ad8d0c's, as for dec268f7.
    "v0.1.0": MilesVersion(
        "78527b9102b3a5f15891128cbec3ac6c2dc4089e",
        "37f91617b95c1ef4f01fc66210e502572ad97fda",
        ROUTER_COMMIT,
        DATA_FILE.with_name("miles_flags-v0.1.0.json"),
        TABLE_MODULE.with_name("miles_flag_table_v0_1_0.py"),
        "miles v0.1.0 pins sgl-project/sglang@cb05a44f35a7c9e27e46d74112cc841ca674ef43 (branch sglang-miles over "
        "the v0.5.16 base, release-lock.json:2-5), not read here; flags here are the released 0.5.16's",
    ),
}

MILES_FILES = ("miles/utils/arguments.py", "miles/backends/sglang_utils/arguments.py", "miles/dashboard/args.py")
MILES_SKIPPED_FUNCTIONS = {"add_user_provided_function_arguments"}  # only with MILES_EXPERIMENTAL_ROLLOUT_REFACTOR=1
MEGATRON_ARGS = "megatron/training/arguments.py"
# Functions whose flags exist only when a condition holds at parse time (the condition, as the source says it).
CONDITIONAL_FUNCTIONS = {
    "_add_kitchen_quantization_arguments": "only when megatron.core.extensions.kitchen imports (HAVE_KITCHEN)",
}
SGLANG_SERVER_ARGS = "sglang/srt/server_args.py"

ZERO_ARITY = {
    "store_true",
    "store_false",
    "store_const",
    "count",
    "help",
    "version",
    "BooleanOptionalAction",
    "DeprecatedAction",
    "DeprecatedStoreTrueAction",
    "DeprecatedStoreConstAction",
}

# Combinations miles refuses at parse time (`miles_validate_args`, SGLang `validate_args`): logic, not
# declarations, so listed here by hand from the pinned source. Each: (what, where, refused(values by flag)).
Values = dict[str, list[str]]


def _num(values: Values, flag: str, default: float = 0.0) -> float:
    try:
        return float(values[flag][-1]) if values.get(flag) else default
    except ValueError:
        return default


REFUSED_COMBINATIONS: tuple[tuple[str, str, Callable[[Values], bool]], ...] = (
    (
        "--kl-coef and --kl-loss-coef both non-zero",
        "miles/utils/arguments.py:2673",
        lambda v: _num(v, "--kl-coef") != 0 and _num(v, "--kl-loss-coef") != 0,
    ),
    (
        "--recompute-logprobs-via-prefill without --true-on-policy-mode",
        "miles/utils/arguments.py:2474",
        lambda v: "--recompute-logprobs-via-prefill" in v and "--true-on-policy-mode" not in v,
    ),
    (
        "--eval-interval without --eval-prompt-data or --eval-config",
        "miles/utils/arguments.py:2612",
        lambda v: "--eval-interval" in v and "--eval-prompt-data" not in v and "--eval-config" not in v,
    ),
    (
        "--save-interval without --save",
        "miles/utils/arguments.py:2615",
        lambda v: "--save-interval" in v and "--save" not in v,
    ),
    (
        "--save-trigger-sentinel without --save",
        "miles/utils/arguments.py:2618",
        lambda v: "--save-trigger-sentinel" in v and "--save" not in v,
    ),
    (
        "--sglang-dp-size > 1 without --sglang-enable-dp-attention",
        "miles/backends/sglang_utils/arguments.py:153",
        lambda v: _num(v, "--sglang-dp-size", 1) > 1 and "--sglang-enable-dp-attention" not in v,
    ),
)


@dataclass
class Flag:
    names: list[str]
    dest: str
    type: str | None = None  # "int", "float", "str", "bool", a callable's name, or None (no value)
    choices: list[Any] | None = None
    choices_resolved: bool = True
    nargs: str | int | None = None
    required: bool = False
    action: str | None = None
    source: str = ""  # repo-relative file:line in the pinned source
    conditional: str | None = None  # when the flag exists only under a condition: which
    # Whether miles's pre-parser knows the name too: `parse_args_train_backend` (miles/utils/arguments.py:2373-2380)
    # runs an argparse parser of miles's own flags (abbreviations allowed) over the whole argv first.
    preparser: bool = False


@dataclass
class Extraction:
    flags: dict[str, Flag] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, flag: Flag, *, only_if_absent: bool = False) -> None:
        if only_if_absent and any(n in self.flags for n in flag.names):
            return
        for name in flag.names:
            self.flags[name] = flag


# ---------------------------------------------------------------- AST helpers


def _name(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _constants(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def _literal(node: ast.AST, constants: dict[str, Any]) -> tuple[Any, bool]:
    """(value, resolved) of a literal, or of a module constant it names."""
    if isinstance(node, ast.Name) and node.id in constants:
        value = constants[node.id]
    else:
        try:
            value = ast.literal_eval(node)
        except ValueError:
            return None, False
    return (sorted(value, key=str) if isinstance(value, (set, frozenset)) else value), True


def _enum_members(tree: ast.Module, name: str) -> list[str] | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            members = [
                t.id
                for s in node.body
                if isinstance(s, ast.Assign)
                for t in s.targets
                if isinstance(t, ast.Name) and not t.id.startswith("_")
            ]
            return members or None
    return None


def _string(node: ast.AST, bindings: dict[str, str]) -> str | None:
    """A constant string, or an f-string whose every placeholder is a name bound by the caller."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for piece in node.values:
            if isinstance(piece, ast.FormattedValue) and isinstance(piece.value, ast.Name):
                if piece.value.id not in bindings:
                    return None
                parts.append(bindings[piece.value.id])
            elif isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                parts.append(piece.value)
            else:
                return None
        return "".join(parts)
    return None


def _flag_from_call(
    call: ast.Call,
    option_args: Sequence[ast.AST],
    constants: dict[str, Any],
    source: str,
    prefix: str = "",
    *,
    bindings: dict[str, str] | None = None,
) -> Flag | None:
    names = [n for n in (_string(a, bindings or {}) for a in option_args) if n is not None and n.startswith("-")]
    if not names:
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    flag = Flag(names=names, dest=names[0].lstrip("-").replace("-", "_"), source=source)
    if "dest" in kw:
        flag.dest = _string(kw["dest"], bindings or {}) or str(_literal(kw["dest"], constants)[0])
    flag.type = _name(kw.get("type"))
    if "action" in kw:
        flag.action = _name(kw["action"])
    if "nargs" in kw:
        flag.nargs = _literal(kw["nargs"], constants)[0]
    if "required" in kw:
        flag.required = bool(_literal(kw["required"], constants)[0])
    if "choices" in kw:
        value, ok = _literal(kw["choices"], constants)
        flag.choices, flag.choices_resolved = (list(value) if ok else None), ok
    if flag.action is None and flag.type is None and flag.nargs is None:
        flag.type = "str"  # argparse's default: one string value
    return _prefixed(flag, prefix)


def _prefixed(flag: Flag, prefix: str) -> Flag:
    if prefix:
        flag.names = [f"--{prefix}-{n.lstrip('-')}" for n in flag.names]
    if flag.action == "BooleanOptionalAction":
        flag.names += [f"--no-{n[2:]}" for n in flag.names if n.startswith("--")]
    return flag


def _functions(tree: ast.AST) -> Iterable[tuple[str, ast.AST]]:
    """Every call site with the name of the innermost function around it."""

    def visit(node: ast.AST, where: str) -> Iterable[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            here = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            yield here, child
            yield from visit(child, here)

    yield from visit(tree, "<module>")


def add_argument_calls(
    text: str,
    path: str,
    skip_functions: set[str] = frozenset(),  # type: ignore[assignment]
    prefix: str = "",
    *,
    bindings: dict[str, str] | None = None,
    only_function: str | None = None,
) -> Iterable[tuple[str, Flag]]:
    """(kind, flag) for each `x.add_argument(...)` ("add") and miles `reset_arg(parser, name, ...)` ("reset").
    `bindings` give the f-string placeholders of names built at run time (`f"--{prefix}-interval"`)."""
    tree = ast.parse(text)
    constants = _constants(tree)
    for where, node in _functions(tree):
        if where in skip_functions or not isinstance(node, ast.Call):
            continue
        if only_function is not None and where != only_function:
            continue
        src = f"{path}:{node.lineno}"
        if isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            flag = _flag_from_call(node, node.args, constants, src, prefix, bindings=bindings)
            if flag:
                if where in CONDITIONAL_FUNCTIONS:
                    flag.conditional = CONDITIONAL_FUNCTIONS[where]
                yield "add", flag
        elif isinstance(node.func, ast.Name) and node.func.id == "reset_arg" and len(node.args) >= 2:
            flag = _flag_from_call(node, node.args[1:2], constants, src, prefix)
            if flag:
                yield "reset", flag


# ---------------------------------------------------------------- dataclass-built flags


@dataclass
class _Field:
    name: str
    annotation: ast.expr
    default: ast.expr | None  # None: no default
    has_default: bool
    call_kwargs: dict[str, ast.expr]
    line: int


def _fields(cls: ast.ClassDef) -> list[_Field]:
    out = []
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        if _name(stmt.annotation) == "ClassVar" or (
            isinstance(stmt.annotation, ast.Subscript) and _name(stmt.annotation.value) == "ClassVar"
        ):
            continue
        value, kwargs = stmt.value, {}
        if isinstance(value, ast.Call) and _name(value.func) == "field":
            kwargs = {k.arg: k.value for k in value.keywords if k.arg}
            value = kwargs.get("default")
            has_default = "default" in kwargs or "default_factory" in kwargs
        else:
            has_default = value is not None
        out.append(_Field(stmt.target.id, stmt.annotation, value, has_default, kwargs, stmt.lineno))
    return out


def _unwrap_optional(node: ast.expr) -> tuple[ast.expr, bool, bool]:
    """(inner, optional, other_union) for Optional[X], X | None, Union[...]."""
    if isinstance(node, ast.Subscript) and _name(node.value) == "Optional":
        return node.slice, True, False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [node.left, node.right]
        rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        return (rest[0], True, False) if len(rest) == 1 else (node, False, True)
    if isinstance(node, ast.Subscript) and _name(node.value) == "Union":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(elts) == 2 and isinstance(elts[1], ast.Constant) and elts[1].value is None:
            return elts[0], True, False
        return node, False, True
    return node, False, False


class _Sources:
    """Read files of one source tree by repo-relative path (a git commit, or a wheel)."""

    def __init__(self, read: Callable[[str], str | None]) -> None:
        self.read = read
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            text = self.read(path)
            self._trees[path] = ast.parse(text) if text is not None else None
        return self._trees[path]

    def module_path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            if self.tree(path) is not None:
                return path
        return None

    def find_class(self, path: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from module `path`: defined there, or followed through its imports."""
        tree = self.tree(path)
        if tree is None or depth > 4:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return path, node
        package = path.rsplit("/", 1)[0].replace("/", ".") if "/" in path else ""
        if path.endswith("__init__.py"):
            package = path[: -len("/__init__.py")].replace("/", ".")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                module = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
                    module = ".".join(parts + ([module] if module else []))
                target = self.module_path(module)
                if target:
                    found = self.find_class(target, name, depth + 1)
                    if found:
                        return found
        return None


def megatron_dataclass_flags(
    src: _Sources, from_path: str, cls_name: str, exclude: set[str], notes: list[str]
) -> list[Flag]:
    """Flags `ArgumentGroupFactory(cls, exclude)` builds (megatron/training/argument_utils.py, miles-main)."""
    found = src.find_class(from_path, cls_name)
    if found is None:
        notes.append(f"Megatron dataclass {cls_name} not found from {from_path}")
        return []
    chain: list[tuple[str, ast.ClassDef]] = []
    while found is not None:
        chain.insert(0, found)
        path, cls = found
        base = _name(cls.bases[0]) if cls.bases else None
        found = src.find_class(path, base) if base and base not in ("object",) else None
    fields: dict[str, tuple[str, _Field]] = {}
    for path, cls in chain:
        for f in _fields(cls):
            fields[f.name] = (path, f)
    out = []
    for path, f in fields.values():
        if f.name in exclude or (
            "init" in f.call_kwargs
            and isinstance(f.call_kwargs["init"], ast.Constant)
            and not f.call_kwargs["init"].value
        ):
            continue
        tree = src.tree(path)
        assert tree is not None
        flag = Flag(names=["--" + f.name.replace("_", "-")], dest=f.name, source=f"{path}:{f.line}")
        meta: dict[str, ast.expr] = {}
        md = f.call_kwargs.get("metadata")
        if isinstance(md, ast.Dict):
            for k, v in zip(md.keys, md.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                    meta = {
                        str(mk.value): mv
                        for mk, mv in zip(v.keys, v.values, strict=True)
                        if isinstance(mk, ast.Constant)
                    }
        ok = _megatron_type(src, path, f.annotation, flag)
        if flag.type == "bool":
            default_false = isinstance(f.default, ast.Constant) and f.default.value == False  # noqa: E712 (as Megatron)
            flag.type, flag.action = None, ("store_true" if default_false else "store_false")
            if flag.action == "store_false":
                flag.names = ["--no-" + f.name.replace("_", "-"), "--disable-" + f.name.replace("_", "-")]
        if not ok and not meta:
            notes.append(f"{cls_name}.{f.name}: Megatron cannot infer its type and it has no argparse_meta")
            continue
        constants = _constants(tree)
        if "arg_names" in meta:
            flag.names = list(_literal(meta["arg_names"], constants)[0])
        if "type" in meta:
            flag.type = _name(meta["type"])
        if "nargs" in meta:
            flag.nargs = _literal(meta["nargs"], constants)[0]
        if "action" in meta:
            flag.action = _name(meta["action"])
            flag.type = None if flag.action in ZERO_ARITY else flag.type
        if "choices" in meta:
            value, resolved = _literal(meta["choices"], constants)
            flag.choices, flag.choices_resolved = (list(value) if resolved else None), resolved
        if "required" in meta:
            flag.required = bool(_literal(meta["required"], constants)[0])
        if "dest" in meta:
            flag.dest = str(_literal(meta["dest"], constants)[0])
        out.append(flag)
    return out


def _megatron_type(src: _Sources, path: str, node: ast.expr, flag: Flag) -> bool:
    """Fill type/choices/nargs as `ArgumentGroupFactory._extract_type` would; False where it would raise."""
    inner, optional, union = _unwrap_optional(node)
    if union:
        return False
    if optional:
        return _megatron_type(src, path, inner, flag)
    if isinstance(inner, ast.Constant) and isinstance(inner.value, str):  # a string annotation
        return _megatron_type(src, path, ast.parse(inner.value, mode="eval").body, flag)
    if isinstance(inner, ast.Subscript):
        outer = _name(inner.value)
        if outer in ("list", "List"):
            if isinstance(inner.slice, ast.Tuple):
                return False
            flag.nargs = "+"
            return _megatron_type(src, path, inner.slice, flag)
        if outer == "Literal":
            values = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            flag.choices = [ast.literal_eval(v) for v in values]
            flag.type = type(flag.choices[0]).__name__
            return True
        return False
    name = _name(inner)
    if name is None:
        return False
    if name in ("int", "float", "str", "bool"):
        flag.type = name
        return True
    found = src.find_class(path, name)
    if found is not None and any(_name(b) in ("Enum", "IntEnum", "StrEnum") for b in found[1].bases):
        tree = src.tree(found[0])
        assert tree is not None
        flag.type, flag.choices = f"enum:{name}", _enum_members(tree, name)
        return True
    flag.type = name  # a class used as the type callable
    return True


def _factory_calls(tree: ast.Module) -> Iterable[tuple[str, set[str], int]]:
    """(class name, exclude set, line) for each `ArgumentGroupFactory(Cls, exclude=...)`."""
    assigned: dict[tuple[str, str], Any] = {}
    for where, node in _functions(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                assigned[(where, node.targets[0].id)] = ast.literal_eval(node.value)
    for where, node in _functions(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "ArgumentGroupFactory" and node.args:
            exclude: set[str] = set()
            for k in node.keywords:
                if k.arg == "exclude":
                    if isinstance(k.value, ast.Name):
                        exclude = set(assigned[(where, k.value.id)])
                    else:
                        exclude = set(ast.literal_eval(k.value))
            yield str(_name(node.args[0])), exclude, node.lineno


# ---------------------------------------------------------------- SGLang ServerArgs


def sglang_flags(src: _Sources, notes: list[str]) -> list[Flag]:
    """What `ServerArgs.add_cli_args` adds, unprefixed (`arg_groups/arg_utils.py:add_cli_args_from_dataclass`
    for the annotated fields, then the manual calls in `add_cli_args`)."""
    tree = src.tree(SGLANG_SERVER_ARGS)
    assert tree is not None, "SGLang server_args.py missing"
    constants = _constants(tree)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    out = []
    for f in _fields(cls):
        ann = f.annotation
        if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
            continue
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        raw, meta_node = elts[0], elts[1] if len(elts) > 1 else None
        meta: dict[str, ast.expr] = {}
        if isinstance(meta_node, ast.Call) and _name(meta_node.func) == "Arg":
            meta = {k.arg: k.value for k in meta_node.keywords if k.arg}
        elif not (isinstance(meta_node, ast.Constant) and isinstance(meta_node.value, str)):
            continue
        if "no_cli" in meta and _literal(meta["no_cli"], constants)[0]:
            continue
        cli = str(_literal(meta["cli_name"], constants)[0]) if "cli_name" in meta else "--" + f.name.replace("_", "-")
        aliases = list(_literal(meta["aliases"], constants)[0]) if "aliases" in meta else []
        flag = Flag(names=[cli, *aliases], dest=f.name, source=f"python/{SGLANG_SERVER_ARGS}:{f.line}")
        type_parser = _name(meta.get("type_parser"))
        if "choices" in meta:
            value, resolved = _literal(meta["choices"], constants)
            flag.choices, flag.choices_resolved = (list(value) if resolved else None), resolved
        if "nargs" in meta:
            flag.nargs = _literal(meta["nargs"], constants)[0]
        if "action" in meta:
            flag.action = _name(meta["action"])
            kwargs_node = meta.get("action_kwargs")
            if isinstance(kwargs_node, ast.Dict):
                # arg_utils.py:228-229 passes these to add_argument; `{"type": str, ...}` is no literal, so each
                # entry is read on its own (a whole-dict literal_eval dropped `nargs="*"` of --lora-paths).
                for key, value in zip(kwargs_node.keys, kwargs_node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "nargs":
                        flag.nargs = _literal(value, constants)[0]
                    elif isinstance(key, ast.Constant) and key.value == "type":
                        flag.type = _scalar(_name(value))
            out.append(flag)
            continue
        inner, _, _ = _unwrap_optional(raw)
        outer = _name(inner.value) if isinstance(inner, ast.Subscript) else None
        if outer == "Literal":
            assert isinstance(inner, ast.Subscript)
            values = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            literal = [ast.literal_eval(v) for v in values]
            if flag.choices is None and flag.choices_resolved:
                flag.choices = literal
            flag.type = type_parser or _scalar(type(literal[0]).__name__ if literal else "str")
        elif outer in ("list", "List") and type_parser is None:
            assert isinstance(inner, ast.Subscript)
            flag.type, flag.nargs = _scalar(_name(inner.slice)), flag.nargs or "+"
        elif _name(inner) == "bool":
            flag.action = "store_true"
        else:
            flag.type = type_parser or _scalar(_name(inner))
            required = _literal(meta["required"], constants)[0] if "required" in meta else None
            flag.required = required is True or (required is None and not f.has_default)
        out.append(flag)
    manual = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    for node in ast.walk(manual):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            manual_flag = _flag_from_call(node, node.args, constants, f"python/{SGLANG_SERVER_ARGS}:{node.lineno}")
            if manual_flag:
                out.append(manual_flag)
    return out


def _scalar(name: str | None) -> str:
    return name if name in ("int", "float", "str") else "str"  # arg_utils._infer_type_func


@dataclass(frozen=True)
class SglangCopy:
    """One prefixed copy of SGLang's flags that miles's wrapper adds (flag prefix, dest prefix, skipped dests,
    and whether the copy inherits: default SUPPRESS, store_true/store_false made BooleanOptionalAction)."""

    flag_prefix: str
    dest_prefix: str
    skipped: tuple[str, ...]
    inherit: bool = False


def _list_value(node: ast.expr, assigned: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Name):
        return assigned[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _list_value(node.left, assigned) + _list_value(node.right, assigned)
    return list(ast.literal_eval(node))


def miles_sglang_copies(text: str) -> list[SglangCopy]:
    """The copies of SGLang's flags in miles's wrapper (miles/backends/sglang_utils/arguments.py): at dec268f7 one,
    `--sglang-*` minus the list `skipped_args`; at v0.1.0 two, `_add_prefixed_server_args(parser, flag_prefix=...,
    dest_prefix=..., skipped_args=..., inherit=...)` for `--sglang-*` and `--eval-sglang-*` (`:65-141,153-161`)."""
    tree = ast.parse(text)
    assigned: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                assigned[node.targets[0].id] = _list_value(node.value, assigned)
    copies = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and _name(call.func) == "_add_prefixed_server_args":
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            copies.append(
                SglangCopy(
                    str(ast.literal_eval(kw["flag_prefix"])),
                    str(ast.literal_eval(kw["dest_prefix"])),
                    tuple(_list_value(kw["skipped_args"], assigned)),
                    bool(ast.literal_eval(kw["inherit"])),
                )
            )
    if copies:
        return copies
    for assign in ast.walk(tree):
        if isinstance(assign, ast.Assign) and any(_name(t) == "skipped_args" for t in assign.targets):
            return [SglangCopy("sglang", "sglang_", tuple(ast.literal_eval(assign.value)))]
    raise ValueError("neither skipped_args nor _add_prefixed_server_args found in miles's SGLang wrapper")


_PARALLEL_DESTS = ("tp_size", "dp_size", "pp_size", "ep_size")


def miles_prefix_sglang(flags: list[Flag], copy: SglangCopy) -> list[Flag]:
    """miles's `new_add_argument_wrapper`: skip by dest or first long flag, then prefix every flag and dest; an
    inheriting copy turns store_true/store_false into BooleanOptionalAction (v0.1.0 `arguments.py:128-134`)."""
    out = []
    for original in flags:
        if original.dest in copy.skipped:  # the dest, or the first long flag's stem: the same thing here
            continue
        flag = Flag(**{**asdict(original), "names": list(original.names)})
        stems = [n[2:].replace("-", "_") for n in flag.names if n.startswith("--")]
        flag.names = [f"--{copy.flag_prefix}-{n.lstrip('-')}" for n in flag.names]
        parallel = next((s for s in stems if s in _PARALLEL_DESTS), None)
        flag.dest = f"{copy.dest_prefix}{parallel or flag.dest}"
        if copy.inherit and flag.action in ("store_true", "store_false"):
            flag.action, flag.nargs = "BooleanOptionalAction", None
        if flag.action == "BooleanOptionalAction":
            flag.names += [f"--no-{n[2:]}" for n in flag.names if not n.startswith("--no-")]
        out.append(flag)
    return out


# ---------------------------------------------------------------- extraction


def prefixed_helper_flags(src: _Sources, path: str, notes: list[str]) -> list[Flag]:
    """Flags of `Helper.add_arguments(parser, prefix="x")` calls in `path` (miles's health checkers), whose names
    are f-strings of that prefix, read from the helper class's `add_arguments`."""
    tree = src.tree(path)
    assert tree is not None
    out: list[Flag] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_arguments"
            and isinstance(node.func.value, ast.Name)
        ):
            continue
        prefix = next((_string(k.value, {}) for k in node.keywords if k.arg == "prefix"), None)
        if prefix is None:  # a user function's own add_arguments (add_user_provided_function_arguments)
            continue
        found = src.find_class(path, node.func.value.id)
        if found is None:
            notes.append(f"{path}:{node.lineno}: {node.func.value.id}.add_arguments not resolved")
            continue
        text = src.read(found[0])
        assert text is not None
        out += [
            f for _, f in add_argument_calls(text, found[0], bindings={"prefix": prefix}, only_function="add_arguments")
        ]
    return out


def router_flags(read: Callable[[str], str | None]) -> list[Flag]:
    """`RouterArgs.add_cli_args(parser, use_router_prefix=True, exclude_host_port=True)` (miles
    `miles/utils/arguments.py:1578`): `--router-<x>` names, `--worker-urls` unprefixed, no --host/--port."""
    text = read(ROUTER_ARGS)
    assert text is not None, ROUTER_ARGS
    flags = [
        f
        for _, f in add_argument_calls(text, ROUTER_ARGS, bindings={"prefix": "router-"}, only_function="add_cli_args")
    ]
    return [f for f in flags if not set(f.names) & {"--host", "--port"}]


def _git_reader(git_dir: Path, rev: str) -> tuple[str, Callable[[str], str | None]]:
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", f"{rev}^{{commit}}"], check=True, capture_output=True, text=True
    ).stdout.strip()

    def read(path: str) -> str | None:
        r = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], check=False, capture_output=True, text=True
        )
        return r.stdout if r.returncode == 0 else None

    return commit, read


def extract(
    miles_git: Path,
    megatron_git: Path,
    sglang_wheel: Path,
    miles_rev: str = MILES_COMMIT,
    megatron_rev: str = MEGATRON_COMMIT,
    *,
    router_git: Path | None = None,
    sglang_note: str = SGLANG_NOTE,
) -> dict[str, Any]:
    miles_commit, miles_read = _git_reader(miles_git, miles_rev)
    megatron_commit, megatron_read = _git_reader(megatron_git, megatron_rev)
    wheel = zipfile.ZipFile(sglang_wheel)
    names = set(wheel.namelist())
    sglang = _Sources(lambda p: wheel.read(p).decode() if p in names else None)
    megatron = _Sources(megatron_read)
    result = Extraction()

    text = megatron_read(MEGATRON_ARGS)
    assert text is not None
    for _, flag in add_argument_calls(text, MEGATRON_ARGS):
        result.add(flag)
    tree = megatron.tree(MEGATRON_ARGS)
    assert tree is not None
    for cls_name, exclude, _line in _factory_calls(tree):
        for flag in megatron_dataclass_flags(megatron, MEGATRON_ARGS, cls_name, exclude, result.notes):
            result.add(flag)

    wrapper = miles_read("miles/backends/sglang_utils/arguments.py")
    assert wrapper is not None
    for path in MILES_FILES:
        text = miles_read(path)
        assert text is not None, path
        for kind, flag in add_argument_calls(text, path, MILES_SKIPPED_FUNCTIONS):
            result.add(flag, only_if_absent=kind == "reset")
            # The pre-parser has no Megatron flags, so reset_arg adds these names to it as new flags.
            for name in flag.names:
                result.flags[name].preparser = True
    unprefixed = sglang_flags(sglang, result.notes)
    for copy in miles_sglang_copies(wrapper):
        for flag in miles_prefix_sglang(unprefixed, copy):
            flag.preparser = True
            result.add(flag)
    for flag in prefixed_helper_flags(_Sources(miles_read), "miles/utils/arguments.py", result.notes):
        flag.preparser = True
        result.add(flag)
    router: dict[str, str] = {"repo": ROUTER_REPO, "note": "not extracted: no router source given"}
    if router_git is not None:
        router_commit, router_read = _git_reader(router_git, ROUTER_COMMIT)
        router = {"repo": ROUTER_REPO, "commit": router_commit}
        for flag in router_flags(router_read):
            flag.preparser = True
            result.add(flag)

    unique = {id(f): f for f in result.flags.values()}
    return {
        "about": "Command-line flags of miles's parser at the pinned commits, extracted by AST "
        "(devtools/grpo_dev/miles_flags.py; regenerate with `make miles-flags`). Facts, not code.",
        "sources": {
            "miles": {"repo": MILES_REPO, "commit": miles_commit},
            "megatron": {"repo": MEGATRON_REPO, "branch": MEGATRON_BRANCH, "commit": megatron_commit},
            "router": router,
            "sglang": {
                "package": "sglang",
                "version": SGLANG_VERSION,
                "wheel": sglang_wheel.name,
                "sha256": hashlib.sha256(sglang_wheel.read_bytes()).hexdigest(),
                "note": sglang_note,
            },
        },
        "not_extracted": [
            "miles add_user_provided_function_arguments (MILES_EXPERIMENTAL_ROLLOUT_REFACTOR=1 only)",
            "the FSDP backend's flags (--train-backend fsdp)",
        ],
        "notes": sorted(set(result.notes)),
        "flags": sorted((asdict(f) for f in unique.values()), key=lambda f: f["names"][0]),
    }


# ---------------------------------------------------------------- checking an argv


@dataclass(frozen=True)
class FlagData:
    by_name: dict[str, dict[str, Any]]
    sources: dict[str, Any]

    @classmethod
    def load(cls, path: Path = DATA_FILE) -> FlagData:
        data = json.loads(path.read_text())
        return cls({n: f for f in data["flags"] for n in f["names"]}, data["sources"])

    @property
    def pinned(self) -> str:
        m, g, s = self.sources["miles"], self.sources["megatron"], self.sources["sglang"]
        return f"miles {m['repo']}@{m['commit'][:8]} (Megatron {g['branch']}@{g['commit'][:8]}, SGLang {s['version']})"


def _looks_like_value(token: str) -> bool:
    # argparse takes a negative number as a value only in its plain forms (CPython 3.12 `_negative_number_matcher`):
    # `-1e-8` after a flag is another flag to it.
    return not token.startswith("-") or re.match(r"^-\d+$|^-\d*\.\d+$", token) is not None


def _arity(flag: dict[str, Any]) -> tuple[int, int | None]:
    if flag["action"] in ZERO_ARITY and flag["nargs"] is None:
        return 0, 0
    nargs = flag["nargs"]
    if nargs is None:
        return 1, 1
    if isinstance(nargs, int):
        return nargs, nargs
    return {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(nargs, (0, None))


def _type_problem(flag: dict[str, Any], value: str) -> str | None:
    kind = flag["type"]
    converted: Any = value
    if kind in ("int", "float"):
        try:
            converted = int(value) if kind == "int" else float(value)
        except ValueError:
            return f"{value!r} is not {'an int' if kind == 'int' else 'a float'}"
    choices = flag["choices"]
    if choices is not None and converted not in choices and value not in [str(c) for c in choices]:
        return f"{value!r} is not one of {choices}"
    return None


def check_argv(argv: Sequence[str], data: FlagData) -> list[str]:
    """One line per problem in a miles argv (`[python, train.py, --flag, value, ...]`); empty when clean."""
    problems: list[str] = []
    seen: set[str] = set()
    given: Values = {}
    tokens = [t for t in argv if t]
    i = next((k for k, t in enumerate(tokens) if t.startswith("--")), len(tokens))
    while i < len(tokens):
        token = tokens[i]
        name, _, inline = token.partition("=")
        flag = data.by_name.get(name)
        if not name.startswith("--") or flag is None:
            near = difflib.get_close_matches(name, data.by_name, n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            problems.append(f"{name}: not a flag of {data.pinned}{hint}")
            i += 1
            while i < len(tokens) and _looks_like_value(tokens[i]):
                i += 1
            continue
        seen.add(flag["dest"])
        if flag["action"] and flag["action"].startswith("Deprecated"):
            problems.append(f"{name}: deprecated in {data.pinned} ({flag['source']})")
        low, high = _arity(flag)
        values = [inline] if inline else []
        i += 1
        while not inline and i < len(tokens) and _looks_like_value(tokens[i]) and (high is None or len(values) < high):
            values.append(tokens[i])
            i += 1
        given.setdefault(name, []).extend(values)
        if len(values) < low:
            problems.append(f"{name}: needs {low} value(s), got {len(values)} ({data.pinned}, {flag['source']})")
        for value in values:
            why = _type_problem(flag, value)
            if why:
                problems.append(f"{name}: {why} ({data.pinned}, {flag['source']})")
    for flag in {f["dest"]: f for f in data.by_name.values() if f["required"]}.values():
        if flag["dest"] not in seen:
            problems.append(f"{flag['names'][0]}: required by {data.pinned} ({flag['source']}) but missing")
    for what, where, refused in REFUSED_COMBINATIONS:
        if refused(given):
            problems.append(f"{what}: refused by {data.pinned} ({where})")
    return problems


def _add_to(parser: argparse.ArgumentParser, flag: dict[str, Any]) -> None:
    low, high = _arity(flag)
    kwargs: dict[str, Any] = {"dest": flag["dest"], "required": flag["required"]}
    if (low, high) == (0, 0):
        kwargs["action"] = "store_true"
    else:
        # Only int and float are rebuilt: the other converters are miles's own functions (json.loads, enums),
        # which the operator's check leaves to miles too.
        kwargs["type"] = {"int": int, "float": float}.get(flag["type"] or "", str)
        if flag["nargs"] is not None or (low, high) != (1, 1):
            kwargs["nargs"] = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((low, high), low)
        if flag["choices"] and flag["choices_resolved"]:
            kwargs["choices"] = [kwargs["type"](c) if kwargs["type"] is not str else str(c) for c in flag["choices"]]
    parser.add_argument(*flag["names"], **kwargs)


def miles_parsers(data: FlagData) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """CPython's own argparse, built as miles builds its two parsers from the extracted flags: the pre-parser
    (`parse_args_train_backend`, miles/utils/arguments.py:2373-2380: miles's flags only, argparse's default
    allow_abbrev, parse_known_args over the whole argv) and Megatron's (megatron/training/arguments.py:87-102:
    every flag, allow_abbrev=False, parse_args)."""
    pre = argparse.ArgumentParser(prog="miles-pre-parser", exit_on_error=False)
    main = argparse.ArgumentParser(prog="train.py", allow_abbrev=False, exit_on_error=False)
    for flag in {f["dest"] + f["names"][0]: f for f in data.by_name.values()}.values():
        _add_to(main, flag)
        if flag.get("preparser"):
            _add_to(pre, flag)
    return pre, main


def parse_like_miles(
    argv: Sequence[str], parsers: tuple[argparse.ArgumentParser, argparse.ArgumentParser]
) -> str | None:
    """None when both of miles's parsers take the argv (`[python, train.py, --flag, ...]`), else the first one's
    error as argparse words it (each exits 2 there)."""
    args = list(argv)
    while args and not args[0].startswith("-"):
        args.pop(0)
    pre, main = parsers
    for parser, parse in ((pre, pre.parse_known_args), (main, main.parse_args)):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parse(args)
        except argparse.ArgumentError as exc:
            return f"{parser.prog}: {exc}"
        except SystemExit as exc:
            return (
                f"{parser.prog}: exit {exc.code}: {err.getvalue().strip().splitlines()[-1] if err.getvalue() else ''}"
            )
    return None


def table_module(data: dict[str, Any], data_name: str = DATA_FILE.name) -> str:
    """The operator's flag table (`grpo_operator.planning.miles_flag_table`) from the data file: one line per
    flag, `names|dest|min|max|condition` (max `*` when unbounded), parsed once at import."""
    m, g, s, r = (data["sources"][k] for k in ("miles", "megatron", "sglang", "router"))
    pinned = (
        f"miles {m['repo']}@{m['commit'][:8]} (Megatron {g['branch']}@{g['commit'][:8]}, SGLang {s['version']}, "
        f"router {r.get('commit', 'not extracted')[:8]})"
    )
    rows = []
    for flag in data["flags"]:
        low, high = _arity(flag)
        kind = flag["type"] if flag["type"] in ("int", "float") else ""
        choices = ",".join(str(c) for c in flag["choices"]) if flag["choices"] and flag["choices_resolved"] else ""
        rows.append(
            f"{' '.join(flag['names'])}|{flag['dest']}|{low}|{'*' if high is None else high}|"
            f"{flag.get('conditional') or ''}|{kind}|{choices}|{'pre' if flag.get('preparser') else ''}"
        )
    body = "\n".join(sorted(rows))
    return (
        '"""miles\'s command-line flags at the pins, for checking spec.extraArgs: generated by `make miles-flags`\n'
        f"from tests/data/{data_name} (devtools/grpo_dev/miles_flags.py); do not edit.\n\n"
        "Each line: the names (aliases share the dest), the argparse dest, the least and most values the flag\n"
        "takes (`*`: no limit), the condition under which the flag exists (empty: always), the type argparse\n"
        "converts each value to (`int`, `float`; empty: no check), the choices (comma-separated; empty: any), and\n"
        '`pre` where miles\'s pre-parser (miles/utils/arguments.py:2373-2380) knows the name too."""\n\n'
        f"PINNED = {json.dumps(pinned)}\n"
        f'TABLE = """\\\n{body}\n"""\n'
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grpo_dev.miles_flags", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="write tests/data/miles_flags.json from the pinned sources")
    ex.add_argument("--miles-git", type=Path, required=True, help="a git dir holding radixark/miles")
    ex.add_argument("--megatron-git", type=Path, required=True, help="a git dir holding radixark/Megatron-LM")
    ex.add_argument("--sglang-wheel", type=Path, required=True, help=f"the sglang=={SGLANG_VERSION} wheel")
    ex.add_argument("--router-git", type=Path, help=f"a git dir holding {ROUTER_REPO} (its flags are left out without)")
    ex.add_argument("--version", choices=VERSIONS, default="dec268f7", help="the miles version (%(default)s)")
    ex.add_argument("--out", type=Path, default=None, help="the data file (default: the version's)")
    ck = sub.add_parser("check", help="check one argv (after --) against the data file")
    ck.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "extract":
        version = VERSIONS[args.version]
        data = extract(
            args.miles_git,
            args.megatron_git,
            args.sglang_wheel,
            version.miles,
            version.megatron,
            router_git=args.router_git,
            sglang_note=version.sglang_note,
        )
        out = args.out or version.data_file
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        version.table_module.write_text(table_module(data, out.name))
        print(f"wrote {out}: {len(data['flags'])} flags, {len(data['notes'])} notes")
        return 0
    problems = check_argv([a for a in args.argv if a != "--"], FlagData.load())
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
