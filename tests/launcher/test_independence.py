"""The launcher's only contract with the operator is the run config: it never imports the operator's code."""

from __future__ import annotations

import ast
from pathlib import Path

import grpo_launcher

PACKAGE = Path(grpo_launcher.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_launcher_module_imports_the_operator_or_heavy_runtime_at_import_time() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 10
    for module in modules:
        imported = _imported_modules(module)
        assert not any(name.split(".")[0] == "grpo_operator" for name in imported), module
        top_level = {n.module or "" for n in ast.parse(module.read_text()).body if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.parse(module.read_text()).body if isinstance(n, ast.Import) for a in n.names
        }
        assert not {"torch", "ray", "sglang"} & {name.split(".")[0] for name in top_level}, module
