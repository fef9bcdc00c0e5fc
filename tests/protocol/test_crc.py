"""``meta.protocol.crc``: zlib-ng's CRC-32 is zlib's, the stdlib's takes over without it, and
every checksum of the package comes from that one module."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from meta.protocol import crc
from meta.protocol.crc import crc32

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "meta"
HOME = PACKAGE / "protocol" / "crc.py"
BENCH = PACKAGE / "bench" / "crc.py"
"""``python -m meta.bench.crc`` times the implementations against each other: it names them."""
CONFIG_LOADING = PACKAGE / "config" / "loading.py"
"""The config file's checksum (``BrokerConfig.checksum``, read once per load, not a message
or journal checksum) stays on ``zlib``: ``meta.config`` imports no layer above it."""
ACCELERATED = ("zlib_ng", "isal")
"""Top-level packages of accelerated CRC-32s: imported by ``meta.protocol.crc`` only."""
CHECKSUM_USERS = (
    "server/puts.py",  # the put checksum and the record header of a run of puts
    "protocol/message.py",  # pack_message, iter_messages, scan_valid_prefix
    "tx/records.py",  # the transaction journal's records
    "tx/recovery.py",
    "tx/checkpoint.py",
    "tx/java_journal.py",
    "client/fetch/received.py",  # the consumer's record check
    "client/local/message_file.py",  # the recover store
    "slave/record_check.py",  # the slave's record check
    "spark/decoding.py",  # the Spark decoder
)
"""Modules that compute message or journal checksums: each imports ``crc32`` from the home."""
FALLBACK_TESTS = (
    "tests/protocol/test_crc.py::test_crc32_gives_the_ieee_crc32_of_zlib",
    "tests/protocol/test_crc.py::test_crc32_takes_memoryview_slices_and_bytearrays",
    "tests/protocol/test_crc.py::test_crc32_continues_from_a_previous_value_as_zlib_does",
    "tests/protocol/test_message.py",
    "tests/protocol/test_golden_trace.py",
    "tests/tx/test_records.py",
    "tests/tx/test_checkpoint.py",
    "tests/client/local",
)
"""The golden CRC vectors, the Java wire trace and the journal and recover-store formats: run
again with zlib-ng hidden, so the stdlib's CRC-32 goes through them too."""
FALLBACK_EXAMPLES = 10
"""Examples per property test in that run. A property test there encodes and decodes with
the one CRC function, so a few examples show that the fallback serves both sides; the suite's
own run draws a hundred each, and the golden vectors pin that both CRCs give the same bits."""
FALLBACK_SCRIPT = """\
import sys
for name in {accelerated!r}:
    sys.modules[name] = None  # import zlib_ng.zlib_ng now raises ImportError
from meta.protocol import crc
assert crc.IMPLEMENTATION == "zlib", crc.IMPLEMENTATION
import zlib
assert crc.crc32 is zlib.crc32
import pytest
from hypothesis import settings
settings.register_profile("fallback", max_examples={examples})
settings.load_profile("fallback")
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *{tests!r}]))
"""


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"a", 0xE8B7BE43),
        (b"hello", 907060870),
        (b"123456789", 0xCBF43926),  # the CRC-32 check value
        (bytes(range(256)) * 5, zlib.crc32(bytes(range(256)) * 5)),
    ],
)
def test_crc32_gives_the_ieee_crc32_of_zlib(data, expected):
    assert crc32(data) == expected


def test_crc32_takes_memoryview_slices_and_bytearrays():
    data = os.urandom(3000)
    view = memoryview(data)
    assert crc32(view[20:1044]) == zlib.crc32(data[20:1044])
    assert crc32(bytearray(data)) == zlib.crc32(data)


def test_crc32_continues_from_a_previous_value_as_zlib_does():
    head, tail = b"\x00\x00\x00\x05", b"hello"
    assert crc32(tail, crc32(head)) == zlib.crc32(head + tail)
    assert crc32(tail, 0xFFFFFFFF) == zlib.crc32(tail, 0xFFFFFFFF)


def test_the_accelerated_crc32_is_in_use_where_it_is_installed():
    """zlib-ng is a dependency of the package, so the test environment has it."""
    assert crc.IMPLEMENTATION == "zlib-ng"
    assert crc32 is not zlib.crc32


def test_fallback_to_zlib_passes_the_golden_vectors_and_the_java_trace():
    """Goal: without zlib-ng, the stdlib's CRC-32 is used and every golden checksum holds.
    Method: a fresh interpreter hides zlib-ng (and isal) from imports, checks that the module
    chose ``zlib``, then runs the checksum tests (``FALLBACK_TESTS``) in it."""
    script = FALLBACK_SCRIPT.format(
        accelerated=ACCELERATED, tests=FALLBACK_TESTS, examples=FALLBACK_EXAMPLES
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def crc_references(path: Path) -> list[str]:
    """``zlib.crc32`` or an accelerated CRC package, referenced in the code of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "crc32":
            if isinstance(node.value, ast.Name) and node.value.id == "zlib":
                found.append(f"{path}:{node.lineno}: zlib.crc32")
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in ACCELERATED or (top == "zlib" and "crc32" in {a.name for a in node.names}):
                found.append(f"{path}:{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ACCELERATED:
                    found.append(f"{path}:{node.lineno}: import {alias.name}")
    return found


def test_crc_module_is_the_only_place_a_crc32_implementation_is_referenced():
    found = [
        reference
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (HOME, BENCH, CONFIG_LOADING)
        for reference in crc_references(path)
    ]
    assert found == []
    assert crc_references(HOME)  # the grep does find what it looks for


@pytest.mark.parametrize("relative", CHECKSUM_USERS)
def test_every_checksum_module_imports_crc32_from_the_crc_module(relative):
    tree = ast.parse((PACKAGE / relative).read_text())
    imports = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "meta.protocol.crc"
    ]
    assert [alias.name for node in imports for alias in node.names] == ["crc32"]
