"""The test tree's layout holds: shared fixtures and builders live in tests/support/ only (no test module imports
another, so moving or deleting one test file cannot break another), and every path of this repository that product
code names in a comment or docstring (the test that holds a fact, the doc that explains it) exists, so a moved file
cannot leave a pointer that leads nowhere. docs/integrations/ citations are tests/docs/test_integration_docs.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_IMPORT = re.compile(r"^\s*(?:from|import)\s+(?:tests\.[\w.]*\btest_\w*|\.+test_\w*)", re.MULTILINE)
PRODUCT = ("operator/grpo_operator", "trainer_image/src", "reward_service/src", "devtools")
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|tests|charts|crds|deploy|examples|benchmarks|operator|trainer_image|reward_service|devtools)"
    r"/[\w/.-]*\w\.(?:md|py|yaml|yml|json|sh|txt|toml))\b"
)


def test_no_test_module_imports_another() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {match.group(0).strip()}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for match in TEST_IMPORT.finditer(path.read_text())
    ]
    assert offenders == [], "move what is shared to tests/support/:\n" + "\n".join(offenders)


def _named_paths() -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(REPO)}:{number}", match.group(1))
        for root in PRODUCT
        for path in sorted((REPO / root).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in REPO_PATH.finditer(line)
    ]


def test_product_code_names_repository_paths() -> None:
    # The scan below is not vacuous: product code does point at its tests and docs.
    assert len(_named_paths()) > 50


@pytest.mark.parametrize(("where", "path"), _named_paths(), ids=str)
def test_every_repository_path_product_code_names_exists(where: str, path: str) -> None:
    assert (REPO / path).exists(), f"{where} names {path}, which does not exist"
