"""Every relative link of README.md and docs/*.md leads somewhere.

A link to another page must name a file of the checkout, and a ``#fragment`` must name a
heading of its page, with GitHub's rule for heading anchors (lower case; punctuation other
than ``-`` and ``_`` dropped; spaces become ``-``). Links to ``http(s)://`` and ``mailto:``
are not followed. ``PLANNED`` names pages the README's table lists before they are written;
a link to one of them is checked once the page exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLANNED = {"docs/spark.md", "docs/ha.md", "docs/security.md"}

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^`{3,}")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines of a page outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        anchor(match.group(1))
        for line in prose_lines(page.read_text())
        if (match := _HEADING.match(line))
    }


def links(page: Path) -> list[str]:
    return [
        target
        for line in prose_lines(page.read_text())
        for target in _LINK.findall(line)
        if not re.match(r"[a-z]+:", target)
    ]


def test_the_readme_links_into_docs_and_into_itself():
    targets = links(REPO / "README.md")
    assert len([target for target in targets if target.startswith("docs/")]) >= 10
    assert "#quick-start" in targets


def test_the_anchor_rule_is_githubs():
    assert anchor("`[topic=NAME]`") == "topicname"
    assert anchor("Direct mode (no ZooKeeper)") == "direct-mode-no-zookeeper"
    assert anchor("async_slave.properties") == "async_slaveproperties"


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_of_a_page_resolves(page):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        name = file.relative_to(REPO).as_posix() if file.is_relative_to(REPO) else str(file)
        if not file.exists():
            if name not in PLANNED:
                broken.append(target)
            continue
        if fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(target)
    assert broken == []
