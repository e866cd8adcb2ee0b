"""The user's docs link each other as a reader follows them: every relative link of the README and of docs/ (its
own pages and reference/; docs/integrations/ has its own check) names a file of this repository, and a link with
an anchor names a heading of that page, as GitHub makes the anchor. Moving a section out of the README cannot leave
a link pointing at where it was."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "reference").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped but `-` and `_`, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def _links() -> list[tuple[str, Path, str]]:
    out = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            out.append((f"{page.relative_to(REPO)} -> {target}", (page.parent / path) if path else page, anchor))
    return out


LINKS = _links()


@pytest.mark.parametrize(("where", "file", "anchor"), LINKS, ids=[where for where, _, _ in LINKS])
def test_every_link_of_the_user_docs_names_a_file_and_heading_that_exist(where: str, file: Path, anchor: str) -> None:
    assert file.exists(), f"{where}: {file.relative_to(REPO) if file.is_relative_to(REPO) else file} does not exist"
    if anchor:
        assert anchor in _anchors(file), f"{where}: no heading of {file.name} makes the anchor #{anchor}"
