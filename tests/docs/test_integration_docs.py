"""docs/integrations cite the tests that check each upstream fact and the files of this repository they rely
on: every cited test exists (file and function, or a test file alone, named from the repository or from tests/,
or a test function alone, named in prose after its file), and so does every cited path of this repository, so a
renamed test or a moved module cannot leave a claim unchecked while the doc still names its check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs" / "integrations").glob("*.md"))
# `file.py::name` with the file relative to the repository or to tests/ (a test), or to a package's root (a
# function of the product); `::name` is in the file cited last before it.
CITE = re.compile(r"`([\w/.-]*\.py)?::(\w+)(?:\[[^`\]]*\])?`")
PACKAGE_ROOTS = ("", "tests", "operator/grpo_operator", "reward_service/src", "trainer_image/src/grpo_launcher")
# Paths of this repository: the first folder is one of ours. examples/ and docs/ also name upstream folders
# (miles has both), so of those only our own kinds count: examples/<run>.yaml and docs/<page>.md.
OURS = re.compile(
    r"`((?:tests|operator|devtools|trainer_image|crds|charts|deploy|benchmarks)/[\w/.-]*[\w]"
    r"|examples/[\w.-]+\.yaml|docs/[\w/.-]+\.md)(?::[\d,-]+)?`"
)


# A test file named alone (`status/test_recovery.py`, from tests/ or the repository), and a test function named
# alone in prose (`test_a_gzip_bomb_is_refused_while_it_inflates`, its file named in the same paragraph).
TEST_FILE = re.compile(r"`((?:[\w.-]+/)*test_\w+\.py)`")
TEST_NAME = re.compile(r"`(test_\w+)`")


def _resolve(path: str) -> Path | None:
    for root in PACKAGE_ROOTS:
        candidate = REPO / root / path
        if candidate.exists():
            return candidate
    return None


def _citations() -> list[tuple[str, str, str]]:
    """(doc:line, file, name) for each `file.py::name` of the docs."""
    out = []
    for doc in DOCS:
        last = ""
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for match in CITE.finditer(line):
                last = match.group(1) or last
                out.append((f"{doc.name}:{number}", last, match.group(2)))
    return out


@pytest.mark.parametrize(("where", "path", "name"), _citations(), ids=str)
def test_every_cited_test_and_function_exists(where: str, path: str, name: str) -> None:
    file = _resolve(path if not name.startswith("test_") or path.startswith("tests/") else f"tests/{path}")
    assert file is not None, f"{where}: {path} does not exist"
    assert re.search(rf"^\s*(async )?def {name}\b|^{name} = ", file.read_text(), re.MULTILINE), (
        f"{where}: {path} has no {name}"
    )


def _paths() -> list[tuple[str, str]]:
    return [
        (f"{doc.name}:{number}", match.group(1))
        for doc in DOCS
        for number, line in enumerate(doc.read_text().splitlines(), 1)
        for match in OURS.finditer(line)
    ]


@pytest.mark.parametrize(("where", "path"), _paths(), ids=str)
def test_every_cited_path_of_this_repository_exists(where: str, path: str) -> None:
    assert (REPO / path).exists() or list(REPO.glob(path)), f"{where}: {path} does not exist"


def _lines() -> list[tuple[str, str]]:
    return [
        (f"{doc.name}:{number}", line) for doc in DOCS for number, line in enumerate(doc.read_text().splitlines(), 1)
    ]


@pytest.mark.parametrize(
    ("where", "path"), [(where, m.group(1)) for where, line in _lines() for m in TEST_FILE.finditer(line)], ids=str
)
def test_every_test_file_named_alone_exists(where: str, path: str) -> None:
    assert _resolve(path) is not None, f"{where}: {path} is neither under tests/ nor under the repository's root"


def _test_functions() -> set[str]:
    names = set()
    for file in (REPO / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", file.read_text(), re.MULTILINE))
    return names


_TEST_FUNCTIONS = _test_functions()


@pytest.mark.parametrize(
    ("where", "name"), [(where, m.group(1)) for where, line in _lines() for m in TEST_NAME.finditer(line)], ids=str
)
def test_every_test_function_named_alone_exists(where: str, name: str) -> None:
    assert name in _TEST_FUNCTIONS, f"{where}: no test under tests/ is named {name}"
