"""The tables that the pages show as ``meta-admin`` output are laid out as it prints them.

Transcripts (fenced blocks without a language, ``$`` prompts and output) are not run, so
nothing else compares them with the program. This test takes every table that follows a
``$ meta-admin COMMAND`` line in the README and ``docs/*.md`` and checks what holds whatever
the data: the header row is the command's own, every ``PARTITION`` cell is ``B-P``, and the
rows lined up again by ``meta.admin.output.table`` are the text on the page (numbers
right-aligned, text and ``-`` columns left-aligned, two spaces between columns).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from meta.admin.groups import LAG_HEADERS
from meta.admin.messages import RECORD_HEADERS
from meta.admin.output import table
from meta.admin.recover import HEADERS as RECOVER_HEADERS
from meta.admin.replication import HEADERS as REPLICATION_HEADERS
from meta.admin.slaves import HEADERS as SLAVES_HEADERS
from meta.admin.spark_writes import HEADERS as SPARK_WRITES_HEADERS
from tests.doc_examples import blocks

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in REPO.glob("docs/*.md"))]
PROMPT = re.compile(r"^\$ (?:\S*/)?meta-admin (\S+)")
HEADER_ROW = re.compile(r"^[A-Z][A-Z_]*(?:  +[A-Z][A-Z_]*)+$")
CELL_GAP = re.compile(r"  +")
NUMBER = re.compile(r"-?\d+")
# The headers of the commands that name their columns in one constant.
COMMAND_HEADERS = {
    "lag": LAG_HEADERS,
    "slaves": SLAVES_HEADERS,
    "replication": REPLICATION_HEADERS,
    "recover-offsets": RECOVER_HEADERS,
    "browse": RECORD_HEADERS,
    "find-message": ["TOPIC", "PARTITION", *RECORD_HEADERS],
    "spark-writes": SPARK_WRITES_HEADERS,
}
# Columns whose digits the program prints as text (left-aligned): a checksum is a name.
DIGIT_TEXT_COLUMNS = {"CONFIG_CHECKSUM"}


def shown_tables(markdown: str) -> list[tuple[str, int, list[str]]]:
    """``(command, line, [header, row, ...])`` for each table after a ``$ meta-admin`` line.

    A table is a header row and the lines after it that have as many cells; it ends at the
    first line that does not (a blank line, ``total lag: ...``, the next prompt).
    """
    found = []
    for block in blocks(markdown):
        if block.language:
            continue
        lines = block.text.split("\n")
        command = None
        for index, line in enumerate(lines):
            prompt = PROMPT.match(line)
            if prompt:
                command = prompt.group(1)
                continue
            if command is None or not HEADER_ROW.match(line):
                continue
            width = len(CELL_GAP.split(line))
            end = index + 1
            while end < len(lines) and len(CELL_GAP.split(lines[end].strip())) == width:
                end += 1
            found.append((command, block.line + 1 + index, lines[index:end]))
    return found


def relaid(lines: list[str]) -> list[list[str]]:
    """Every way ``table`` could lay out the shown cells: a column of integers (and ``-``) is
    a number column, unless the program prints such digits as text."""
    headers = CELL_GAP.split(lines[0])
    rows = [CELL_GAP.split(line.strip()) for line in lines[1:]]
    choices = []
    for index, header in enumerate(headers):
        cells = [row[index] for row in rows]
        digits = all(NUMBER.fullmatch(c) or c == "-" for c in cells) and any(
            c != "-" for c in cells
        )
        choices.append((True, False) if digits and header in DIGIT_TEXT_COLUMNS else (digits,))
    layouts = []
    for numbers in itertools.product(*choices):
        typed = [
            [
                None if c == "-" else int(c) if number else c
                for c, number in zip(row, numbers, strict=True)
            ]
            for row in rows
        ]
        layouts.append(table(headers, typed).split("\n"))
    return layouts


def all_tables() -> list[tuple[str, str, int, list[str]]]:
    return [
        (page, command, line, lines)
        for page in PAGES
        for command, line, lines in shown_tables((REPO / page).read_text())
    ]


def test_the_pages_show_tables_of_the_commands_with_named_columns():
    commands = {command for _page, command, _line, _lines in all_tables()}
    assert {"lag", "slaves", "browse", "find-message"} <= commands


@pytest.mark.parametrize(("page", "command", "line", "lines"), all_tables())
def test_a_shown_table_is_laid_out_as_the_command_prints_it(page, command, line, lines):
    headers = CELL_GAP.split(lines[0])
    assert headers == COMMAND_HEADERS.get(command, headers), f"{page}:{line}"
    if "PARTITION" in headers:
        column = headers.index("PARTITION")
        cells = [CELL_GAP.split(row.strip())[column] for row in lines[1:]]
        assert all(re.fullmatch(r"\d+-\d+", cell) for cell in cells), f"{page}:{line}"
    assert lines in relaid(lines), f"{page}:{line}: as printed:\n" + "\n".join(relaid(lines)[0])


def test_the_check_finds_left_aligned_numbers_and_a_missing_column():
    shown = "```\n$ meta-admin lag g\nTOPIC  PARTITION  COMMITTED\nt      0-0        5\n```\n"
    ((command, _line, lines),) = shown_tables(shown)
    assert command == "lag"
    assert lines not in relaid(lines)
    assert CELL_GAP.split(lines[0]) != LAG_HEADERS
