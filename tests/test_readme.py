"""The README stays a short entry point: it links every page of docs/, and no relative link of
the README or docs/ points at a missing file or heading. (policies/RULES.md, the rules table,
is checked against the pack in test_policy_e2e.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.project import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            text = m.group(1).strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


def test_readme_is_short_and_links_every_docs_page() -> None:
    readme = REPO / "README.md"
    assert len(readme.read_text().splitlines()) <= 150
    linked = {(readme.parent / t.split("#")[0]).resolve() for t in links(readme)}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert missing == [], f"README.md links no docs/ page for: {missing}"
    assert (REPO / "policies" / "RULES.md").resolve() in linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == [], f"{page.name}: {broken}"
