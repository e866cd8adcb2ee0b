"""Every path of this repository that the product's code names exists: a docstring or comment that sends the reader
to `docs/queueing.md`, `tests/edges/test_stacks_job.py` or `charts/grpo-operator`, and a string that hands a path to
a tool (the mutation groups' test paths, which pytest refuses when one is missing). The product is operator/,
trainer_image/src, reward_service/src and devtools/. A path is named from the repository's root (its first folder
one of ours) or, for a module or a test, from a package or from tests/ (`render/job.py`, `status/test_recovery.py`).
A moved file then fails here, with the file and line that still name its old place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("operator", "trainer_image/src", "reward_service/src", "devtools")
PACKAGES = (
    "operator/grpo_operator",
    "trainer_image/src/grpo_launcher",
    "reward_service/src/reward_service",
    "devtools/grpo_dev",
)
TOP = ("docs", "tests", "charts", "crds", "deploy", "examples", "benchmarks", *{p.split("/")[0] for p in PRODUCT})
FROM_ROOT = re.compile(rf"(?<![\w/.{{-])((?:{'|'.join(TOP)})/[\w./*-]*[\w*])")
# Of the paths not named from the root, only modules and tests of ours: the first folder is a package's own
# subpackage or a folder of tests/ (upstream paths such as miles's `utils/arguments.py` are left alone).
SUBFOLDERS = sorted(
    {d.name for root in (*PACKAGES, "tests") for d in (REPO / root).iterdir() if (d / "__init__.py").exists()}
)
FROM_PACKAGE = re.compile(rf"(?<![\w/.{{-])((?:{'|'.join(SUBFOLDERS)})/[\w/]*\w\.py)\b")
ROOTS = ("", *PACKAGES, "tests", "trainer_image/src", "reward_service/src", "devtools")
TEXT = {".py", ".toml", ".cfg", ".conf", ".yaml", ".yml", ".md", ".txt", ".sh", ".c", ".json", ""}


def _files() -> list[Path]:
    out = []
    for top in PRODUCT:
        for file in sorted((REPO / top).rglob("*")):
            parts = set(file.relative_to(REPO).parts)
            if not file.is_file() or "__pycache__" in parts or any(p.endswith(".egg-info") for p in parts):
                continue
            if file.suffix in TEXT or file.name.endswith("Dockerfile"):
                out.append(file)
    return out


def _named() -> list[tuple[str, str, tuple[str, ...]]]:
    """(file:line, path, the roots it may be named from) for every path the product names."""
    out = []
    for file in _files():
        where = file.relative_to(REPO)
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            out += [(f"{where}:{number}", m.group(1), ("",)) for m in FROM_ROOT.finditer(line)]
            out += [(f"{where}:{number}", m.group(1), ROOTS) for m in FROM_PACKAGE.finditer(line)]
    return out


def _exists(path: str, roots: tuple[str, ...]) -> bool:
    path = path.rstrip(".")
    return any((REPO / root / path).exists() or any((REPO / root).glob(path)) for root in roots)


NAMED = _named()


def test_the_product_names_paths_of_this_repository_at_all() -> None:
    # A guard on the scan itself: a pattern that stopped matching would pass every path below by finding none.
    assert len({path for _, path, _ in NAMED}) > 100, NAMED


@pytest.mark.parametrize(("where", "path", "roots"), NAMED, ids=[f"{w} {p}" for w, p, _ in NAMED])
def test_every_path_the_product_names_exists(where: str, path: str, roots: tuple[str, ...]) -> None:
    assert _exists(path, roots), (
        f"{where} names {path}, which is not in the repository"
        + ("" if roots == ("",) else " (tried from the root, the packages and tests/)")
        + ": point it at the file's present place"
    )
