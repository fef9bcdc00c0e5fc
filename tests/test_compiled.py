"""The optional compiled build (``setup.py``, ``METAQ_COMPILE=1``) and its pure-Python twin.

The suite runs whichever build the checkout holds: pure Python after a plain install, the
compiled modules after an in-place compiled build. The slow test runs the other one over the
tests that pin the hot path's bytes (the codec's golden bytes and byte-by-byte decoding, the
put and sync runs' replies and segments against one command at a time, the put replies'
bytes, the slave's record check) in a scratch copy of the checkout (``tests.compiled_build``,
made as the session starts): without the extensions when this run is compiled, else with
them, built there in the background.
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
    "tests/sync/test_slave_link.py",
    "tests/slave/test_record_ends.py",  # the slave's record check, C or pure
    "tests/store/test_flush_worker.py",  # the flusher's C thread, or the Python thread
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


def test_the_flusher_thread_is_described_as_what_runs():
    from meta.store import native_flush

    built = native_flush.NATIVE is not None
    expected = "C thread (GIL never taken)" if built else "Python thread"
    assert compiled.flush_thread() == expected


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


def test_a_rebuild_whose_shims_did_not_change_is_not_stale(tmp_path, monkeypatch):
    """Goal: a rebuild after an edit counts as new even where it left a module's shim as it
    was, in a process that has not imported the compiled modules yet (the suite's check at
    start-up). Method: a fake compiled module whose import loads the group's library, with
    the shim older than the source and the library newer than both."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    shim, source, library = tmp_path / f"fake{suffix}", tmp_path / "fake.py", tmp_path / "lib"
    for age_s, path in ((300, shim), (200, source), (100, library)):
        path.write_bytes(b"")
        os.utime(path, (1e9 - age_s, 1e9 - age_s))
    module = types.ModuleType("meta.fake")
    module.__file__ = str(shim)
    library_module = types.ModuleType(compiled.GROUP_NAME + "__mypyc")
    library_module.__file__ = str(library)

    def import_module(name: str) -> types.ModuleType:
        assert name == "meta.fake"
        monkeypatch.setitem(sys.modules, library_module.__name__, library_module)
        return module

    monkeypatch.delitem(sys.modules, library_module.__name__, raising=False)
    monkeypatch.setattr(compiled, "COMPILED_MODULES", ("meta.fake",))
    monkeypatch.setattr(compiled.importlib, "import_module", import_module)
    assert compiled.stale_modules() == []
    os.utime(source, (1e9, 1e9))  # now newer than the library too
    assert compiled.stale_modules() == ["meta.fake"]
