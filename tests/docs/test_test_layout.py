"""How the tests share: what more than one test module uses (builders, fixtures' helpers, tables of inputs) lives
in tests/support/, so no test module imports another (its private helpers and its tables then change under a test
that never meant to depend on them, and pytest collects the imported module's tests twice where it is imported
with its own name), and no module reaches into another folder's conftest. And every row of a parametrized table
has a name, so a failing row says which case broke (`[a suspend stops the job]`, not `[patch3-expected3]`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def _imports(file: Path) -> list[tuple[int, str]]:
    """(line, module) for every module `file` imports, relative imports written as `.name` or `..name`."""
    out = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if _is_test_module(module):
                out.append((node.lineno, module))
            else:  # `from tests.render import test_golden` imports the module by its name
                out += [(node.lineno, f"{module}.{alias.name}".replace("..", ".")) for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append((node.lineno, node.args[0].value))
    return out


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_module_is_imported_by_another_module_of_the_tests() -> None:
    found = [
        f"{file.relative_to(REPO)}:{line} imports {module}"
        for file in _python_files()
        for line, module in _imports(file)
        if _is_test_module(module)
    ]
    assert not found, "move what is shared to tests/support/ and import it from there:\n" + "\n".join(found)


def test_no_module_imports_the_conftest_of_another_folder() -> None:
    found = []
    for file in _python_files():
        folder = ".".join(file.parent.relative_to(REPO).parts)
        for line, module in _imports(file):
            if module.endswith(".conftest") or ".conftest." in module:
                owner = module[: module.index(".conftest")]
                if owner != folder and not owner.startswith("."):
                    found.append(f"{file.relative_to(REPO)}:{line} imports {module}")
    assert not found, "move what is shared to tests/support/ and import it from there:\n" + "\n".join(found)


def test_the_import_check_sees_each_way_of_importing_a_test_module(tmp_path: Path) -> None:
    file = tmp_path / "test_x.py"
    file.write_text(
        "import tests.render.test_a\nfrom tests.render.test_b import X\nfrom .test_c import Y\n"
        "from tests.render import test_d\nimport importlib\nimportlib.import_module('tests.render.test_e')\n"
        "from tests.support.builders import base\n"
    )
    assert [m for _, m in _imports(file) if _is_test_module(m)] == [
        "tests.render.test_a",
        "tests.render.test_b",
        ".test_c",
        "tests.render.test_d",
        "tests.render.test_e",
    ]


def _fallback_ids(item: pytest.Item) -> list[str]:
    """The parts of `item`'s id that pytest made up because a value had no readable form: `<argname><index>`."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    names = "|".join(re.escape(name) for name in callspec.params)
    return [part for part in callspec.id.split("-") if names and re.fullmatch(rf"(?:{names})\d+", part)]


def test_every_row_of_a_parametrized_table_has_a_name(request: pytest.FixtureRequest) -> None:
    """Checks every test this session collected (the whole tier under `make unit` or `make test`), so a run of
    this file alone checks only itself. A row is named by `pytest.param(..., id="...")`, by `ids=`, or by values
    pytest can spell (strings, numbers, enums); a dict, a list or an object gets `<argname><index>`."""
    tables: dict[str, list[str]] = {}
    for item in request.session.items:
        if _fallback_ids(item):
            test = f"{item.path.relative_to(REPO)}::{getattr(item, 'originalname', item.name)}"
            tables.setdefault(test, []).append(f"[{item.callspec.id}]")  # type: ignore[attr-defined]
    assert not tables, "name these rows with pytest.param(..., id=...) or ids=:\n" + "\n".join(
        f"{test}: {' '.join(rows)}" for test, rows in sorted(tables.items())
    )
