"""The README's Operations block and operations.md's list every command of metaServer.sh.

``tools/metaServer.sh --help`` is the list of commands; a reader of the README's Operations
block or of docs/operations.md's "The operations script" should meet each of them there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "metaServer.sh"


def script_commands() -> set[str]:
    """The commands ``metaServer.sh --help`` lists (``  NAME ...`` lines under commands:)."""
    shown = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0
    listing = shown.stdout.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^  ([a-z]+)\b", listing, re.MULTILINE))


def block_after(page: str, heading: str) -> str:
    """The first fenced block after ``heading`` in ``page``."""
    text = (REPO / page).read_text().split(heading, 1)[1]
    return text.split("```", 2)[1]


def test_the_help_lists_the_commands_the_script_runs():
    assert script_commands() == {"start", "stop", "restart", "reload", "status", "promote"}


@pytest.mark.parametrize(
    ("page", "heading"),
    [("README.md", "## Operations"), ("docs/operations.md", "## The operations script")],
)
def test_the_operations_block_lists_every_command(page, heading):
    listed = set(re.findall(r"^tools/metaServer\.sh ([a-z]+)", block_after(page, heading), re.M))
    assert script_commands() <= listed
