"""The project speaks of itself, not of the process that built it (STYLE 28).

What users and readers of the code see must stand on its own: the README, ``docs/``, the
sample configuration, the scripts under ``tools/`` with their help texts, the help of
``meta-admin`` and ``meta-server``, the package metadata, the examples, and the source of
``meta/`` (module docstrings, other docstrings and comments). None of it may point at things
outside the repository or at the work that made it: numbered issues, work periods or items,
work sessions, or the numbered sections of specifications that are not shipped
("DECISIONS 8", "zk spec §1.3"). The compatibility contract such references used to cite
is ``docs/compatibility.md``; formats are in ``docs/formats.md``.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from meta.admin.main import build_parser
from meta.server.main import parse_arguments

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = re.compile(
    r"\bissue \d+"
    r"|\bthe issue's\b"
    r"|\bwork (?:period|item|session)s?\b"
    r"|\bsession \d+\b"
    r"|\b(?-i:DECISIONS)\b"
    r"|\b(?:zk|wire|sync|client|http|dashboard|tx|storage)(?:/client/tx)? spec\b"
    r"|\bspec (?:section|§|\d)"
    r"|shared/spec"
    r"|\bthe lead\b",
    re.IGNORECASE,
)


def offending_lines(text: str) -> list[str]:
    """The lines of ``text`` that speak of the development process."""
    return [line.strip() for line in text.splitlines() if FORBIDDEN.search(line)]


def shipped_text_files() -> list[Path]:
    """README.md, docs/*.md, conf/*, tools/*, the Python files of meta/ and examples/, and
    setup.cfg."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    files += sorted(path for path in (REPO / "conf").iterdir() if path.is_file())
    files += sorted(path for path in (REPO / "tools").iterdir() if path.is_file())
    files += sorted((REPO / "meta").rglob("*.py"))
    files += sorted((REPO / "examples").rglob("*.py"))
    files += [REPO / "setup.cfg"]
    return files


@pytest.mark.parametrize(
    "path", shipped_text_files(), ids=lambda path: path.relative_to(REPO).as_posix()
)
def test_shipped_text_does_not_speak_of_the_development_process(path):
    assert offending_lines(path.read_text(encoding="utf-8")) == []


def help_texts(parser) -> list[str]:
    """``parser``'s help and that of every subcommand below it."""
    texts = [parser.format_help()]
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for subparser in choices.values():
                texts += help_texts(subparser)
    return texts


def test_meta_admin_help_does_not_speak_of_the_development_process():
    texts = help_texts(build_parser())
    assert len(texts) > 10  # every subcommand was reached
    assert [line for text in texts for line in offending_lines(text)] == []


def test_meta_server_help_does_not_speak_of_the_development_process():
    output = io.StringIO()
    with contextlib.redirect_stdout(output), pytest.raises(SystemExit):
        parse_arguments(["--help"])
    assert "meta-server" in output.getvalue()
    assert offending_lines(output.getvalue()) == []


@pytest.mark.parametrize(
    "text",
    [
        "as issue 17 asked",
        "the targets of work period 3",
        "(DECISIONS 8)",
        "registers (zk spec §1.3 step 1)",
        "see wire spec 2.2",
        "spec section 4.8",
        "see ../shared/spec/DECISIONS.md",
        "measured in session 4",
    ],
)
def test_the_check_finds_references_to_the_process(text):
    assert offending_lines(f"A line.\nSomething {text} here.\n") == [f"Something {text} here."]


@pytest.mark.parametrize(
    "text",
    [
        "new ZooKeeper session 0x%x: registering broker %s again",
        "the consumer's session timeout",
        "see docs/compatibility.md#long-polling",
        "docs/formats.md §6.1",
        "Invariants and decisions:",
    ],
)
def test_the_check_lets_ordinary_words_pass(text):
    assert offending_lines(text) == []
