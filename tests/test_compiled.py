"""The optional compiled build (``setup.py``, ``METAQ_COMPILE=1``) and its pure-Python twin.

The suite runs whichever build the checkout holds: pure Python after a plain install, the
compiled modules after an in-place compiled build. The slow test runs the other one over the
tests that pin the hot path's bytes (the codec's golden bytes and byte-by-byte decoding, the
put and sync runs' replies and segments against one command at a time, the put replies'
bytes, a samsa master's answer to a replicated put, the slave's record check) in a scratch
copy of the checkout (``tests.compiled_build``, made as the session starts): without the
extensions when this run is compiled, else with them, built there in the background.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from meta import compiled
from meta.compiled import COMPILED_MODULES, compiled_modules, describe

ROOT = Path(__file__).resolve().parent.parent
PINNING_TESTS = (
    "tests/protocol/test_codec.py",
    "tests/protocol/test_put_reply.py",
    "tests/protocol/test_sync_frame.py",
    "tests/server/test_put_run.py",
    "tests/server/test_sync_run.py",
    "tests/sync/test_gregor.py",
    "tests/sync/test_samsa_outcome.py",
    "tests/sync/test_slave_link.py",
    "tests/slave/test_record_ends.py",  # the slave's record check, C or pure
)
TESTS_TIMEOUT_S = 900.0


def test_every_compiled_module_is_a_module_of_the_package():
    for name in COMPILED_MODULES:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


def test_the_build_is_described_as_what_runs():
    compiled = compiled_modules()
    if not compiled:
        assert describe() == "pure Python"
    else:
        assert describe().startswith(f"compiled (mypyc, {len(compiled)} of ")


def test_the_slave_record_check_is_described_as_what_runs():
    from meta.slave import record_check

    built = record_check.EXTENSION is not None
    expected = "C (ISA-L crc32_gzip_refl, GIL released)" if built else "pure Python"
    assert compiled.record_check() == expected


def _run(command: list[str], cwd: Path, timeout: float, **extra: str) -> str:
    environment = {**os.environ, "PYTHONPATH": str(cwd), **extra}
    result = subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


@pytest.mark.slow
def test_the_other_build_passes_the_tests_that_pin_the_hot_path_bytes(other_build):
    """Goal: both builds give the same bytes. Method: in the scratch copy the session made
    (``tests.compiled_build``: built in the background when this run is pure Python), check
    which build the copy runs, then run the pinning tests there."""
    if other_build.skipped:
        pytest.skip(other_build.skipped)
    other_build.wait()
    checkout = other_build.directory
    probe = "import meta.compiled as c; print(len(c.compiled_modules()), c.stale_modules())"
    found = _run([sys.executable, "-c", probe], checkout, 120.0).split()
    expected = len(COMPILED_MODULES) if other_build.compiled else 0
    assert found == [str(expected), "[]"]
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    output = _run([*pytest_command, *PINNING_TESTS], checkout, TESTS_TIMEOUT_S)
    assert " passed" in output and "failed" not in output, output[-2000:]


def fake_compiled_module(directory: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``meta.fake``, the only compiled module as ``stale_modules`` sees it: imported from an
    extension in ``directory``, beside its source ``fake.py``. Returns both paths."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    extension, source = directory / f"fake{suffix}", directory / "fake.py"
    extension.write_bytes(b"")
    source.write_bytes(b"VALUE = 1\n")
    module = types.ModuleType("meta.fake")
    module.__file__ = str(extension)

    def import_module(name: str) -> types.ModuleType:
        assert name == "meta.fake"
        return module

    monkeypatch.setattr(compiled, "COMPILED_MODULES", ("meta.fake",))
    monkeypatch.setattr(compiled.importlib, "import_module", import_module)
    return extension, source


def build(extension: Path, source: Path) -> None:
    """Record ``source`` as what ``extension`` was compiled from, as ``setup.py`` does."""
    compiled.write_built_digest(str(extension), "meta.fake", compiled.source_digest(str(source)))


def test_a_source_touched_since_the_build_with_the_same_bytes_is_not_stale(tmp_path, monkeypatch):
    """Goal: a rebase or a checkout that rewrites a compiled module's source with the same
    bytes leaves the build current. Method: a fake compiled module built from its source,
    whose source is then rewritten as it was and dated after the build."""
    extension, source = fake_compiled_module(tmp_path, monkeypatch)
    build(extension, source)
    os.utime(extension, (1e9, 1e9))
    source.write_bytes(source.read_bytes())
    os.utime(source, (2e9, 2e9))
    assert compiled.stale_modules() == []


def test_a_source_changed_since_the_build_is_stale_whatever_its_time(tmp_path, monkeypatch):
    """Goal: an edited source is stale even when its file looks older than the build (a
    checkout of an older commit). Method: a fake compiled module built from its source, whose
    source is then changed and dated before the build."""
    extension, source = fake_compiled_module(tmp_path, monkeypatch)
    build(extension, source)
    source.write_bytes(b"VALUE = 2\n")
    os.utime(source, (1e9, 1e9))
    os.utime(extension, (2e9, 2e9))
    assert compiled.stale_modules() == ["meta.fake"]


def test_a_build_that_recorded_no_digest_is_stale(tmp_path, monkeypatch):
    fake_compiled_module(tmp_path, monkeypatch)
    assert compiled.stale_modules() == ["meta.fake"]


def test_the_stale_message_names_the_modules_and_the_rebuild_command_of_the_docs():
    message = compiled.stale_message(["meta.fake", "meta.other"])
    assert "meta.fake, meta.other" in message
    assert compiled.REBUILD_COMMAND in message
    assert compiled.REBUILD_COMMAND in (ROOT / "docs" / "performance.md").read_text()
