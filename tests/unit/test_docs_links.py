"""Every relative link in the README and docs/ reaches a file that exists, and every ``#anchor``
a heading of that file: pages moved out of the README must not leave links behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings (outside code blocks)."""
    anchors, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def _links(page: Path) -> list[str]:
    text, in_code, links = page.read_text().splitlines(), False, []
    for line in text:
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code:
            links += LINK.findall(line)
    return [link for link in links if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    links = _links(page)
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no such heading")
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_links_every_page_in_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f"docs/{p.name}" not in readme]
    assert not missing, f"pages under docs/ the README does not link: {missing}"
