"""Each rule of a put has one home: a source check over ``meta/`` (STYLE 26).

The put reply's format lives in ``meta/protocol/put_reply.py``; the checksum rule, the record
header packing and the put failure texts live in ``meta/server/puts.py``. Fast paths bind those
definitions instead of spelling them again; these tests fail when a copy reappears anywhere in
``meta/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE_DIR = REPO_ROOT / "meta"

PUT_REPLY_FORMAT = re.compile(r"result 200 %")
CHECKSUM_RULE = re.compile(r"checksum\s*!=\s*(-1|crc)\b|\bcrc\s*!=\s*checksum\b|-1\s*!=\s*checksum")
FAILURE_TEXT = re.compile(r"Put message to \[broker")
CHECKSUM_FAILURE_TEXT = re.compile(r"Checksum failure,")
HEADER_PACK = re.compile(r"\bHEADER\.pack\b")
HEADER_SIZE_LITERAL = re.compile(r"(?<![\w.])20\s*\+|\+\s*20(?![\w.])")


def _where(pattern: re.Pattern[str], under: Path = PACKAGE_DIR) -> list[tuple[str, str]]:
    """(module path, enclosing function) of every line of ``meta/`` matching ``pattern``."""
    found = []
    for path in sorted(under.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = [
            number for number, line in enumerate(source.splitlines(), 1) if pattern.search(line)
        ]
        if not lines:
            continue
        functions = [
            node
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for number in lines:
            enclosing = [f for f in functions if f.lineno <= number <= (f.end_lineno or 0)]
            name = min(enclosing, key=lambda f: f.end_lineno - f.lineno).name if enclosing else ""
            found.append((path.relative_to(REPO_ROOT).as_posix(), name))
    return found


def test_the_put_reply_format_is_written_once_in_the_protocol_package():
    assert _where(PUT_REPLY_FORMAT) == [
        ("meta/protocol/put_reply.py", ""),
        ("meta/protocol/put_reply.py", "put_reply"),  # the same, as a literal (pinned there)
    ]


def test_the_checksum_rule_is_written_once():
    assert _where(CHECKSUM_RULE) == [("meta/server/puts.py", "accepted_crc")]


def test_the_server_masks_a_put_checksum_only_in_the_rule():
    assert _where(re.compile(r"\bCHECKSUM_MASK\b"), PACKAGE_DIR / "server") == [
        ("meta/server/puts.py", ""),  # the import
        ("meta/server/puts.py", "accepted_crc"),
    ]


def test_the_put_failure_texts_are_written_once():
    assert _where(FAILURE_TEXT) == [("meta/server/puts.py", "failure_text")]
    assert _where(CHECKSUM_FAILURE_TEXT) == [("meta/server/puts.py", "")]


def test_the_server_packs_record_headers_only_through_the_put_home():
    assert _where(HEADER_PACK, PACKAGE_DIR / "server") == [("meta/server/puts.py", "")]


def test_the_server_names_the_record_header_size_instead_of_writing_20():
    assert _where(HEADER_SIZE_LITERAL, PACKAGE_DIR / "server") == []


def test_the_checks_would_see_a_copy():
    """The patterns match the spellings they stand for (so the checks above can fail)."""
    assert CHECKSUM_RULE.search("if checksum is not None and checksum != -1 and checksum != crc:")
    assert CHECKSUM_RULE.search("if command.checksum != crc")
    assert PUT_REPLY_FORMAT.search('b"result 200 %d %s\\r\\n%s"')
    assert HEADER_SIZE_LITERAL.search("offset += 20 + len(body)")
    assert HEADER_SIZE_LITERAL.search("batch.size += size + 20")
    assert not HEADER_SIZE_LITERAL.search("x = 120 + y")
