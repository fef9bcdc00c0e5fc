"""The run dirs the docs suggest are ignored by git, as ``run/`` is.

A run dir holds a broker's pid file and log (and, for ``start local``, ZooKeeper's data):
nothing to commit. The pages show second brokers on one machine with ``META_RUN_DIR=NAME``;
each such relative NAME must be ignored, so following the docs leaves ``git status`` clean.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_DIR_SETTING = re.compile(r"\bMETA_RUN_DIR=([\w.-]+)")


def suggested_run_dirs() -> set[str]:
    """The relative run dirs named by ``META_RUN_DIR=`` in the README and docs/."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return {name for page in pages for name in RUN_DIR_SETTING.findall(page.read_text())}


def ignored(path: str) -> bool:
    """Whether git ignores ``path`` in this checkout (tracked or not)."""
    done = subprocess.run(
        ["git", "check-ignore", "--quiet", "--no-index", path], cwd=REPO, timeout=30
    )
    return done.returncode == 0


def test_the_docs_suggest_a_run_dir_for_a_second_broker():
    assert "run-slave" in suggested_run_dirs()


def test_every_run_dir_the_docs_suggest_is_ignored_like_run():
    assert ignored("run/meta-server.log")
    assert [name for name in sorted(suggested_run_dirs()) if not ignored(f"{name}/x.log")] == []
