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

import contextlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
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
    with contextlib.ExitStack() as stack:
        if other_build is None:  # under pytest-xdist: made here (conftest.other_build)
            from tests.compiled_build import ScratchBuild

            other_build = stack.enter_context(contextlib.closing(ScratchBuild()))
        _run_the_pinning_tests(other_build)


def _run_the_pinning_tests(other_build) -> None:
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


def fake_built_module(
    directory: Path, monkeypatch: pytest.MonkeyPatch, source_name: str = "fake.py"
) -> tuple[Path, Path]:
    """``meta.fake``, the only built module as ``stale_modules`` sees it: a mypyc module (its
    source ``fake.py``) or, with another ``source_name``, a C extension built from that
    source, its extension in ``directory`` beside the source. Returns both paths."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    extension, source = directory / f"fake{suffix}", directory / source_name
    extension.write_bytes(b"")
    source.write_bytes(b"VALUE = 1\n")
    real_find_spec = compiled.importlib.util.find_spec

    def find_spec(name: str) -> object:
        if name != "meta.fake":
            return real_find_spec(name)
        return importlib.machinery.ModuleSpec(name, None, origin=str(extension))

    if source_name == "fake.py":
        monkeypatch.setattr(compiled, "COMPILED_MODULES", ("meta.fake",))
        monkeypatch.setattr(compiled, "C_EXTENSIONS", {})
    else:
        monkeypatch.setattr(compiled, "COMPILED_MODULES", ())
        monkeypatch.setattr(compiled, "C_EXTENSIONS", {"meta.fake": (f"meta/{source_name}", ())})
    monkeypatch.setattr(compiled.importlib.util, "find_spec", find_spec)
    return extension, source


def build(extension: Path, source: Path) -> None:
    """Record ``source`` as what ``extension`` was compiled from, as ``setup.py`` does."""
    compiled.write_built_digest(str(extension), "meta.fake", compiled.source_digest(str(source)))


def test_a_source_touched_since_the_build_with_the_same_bytes_is_not_stale(tmp_path, monkeypatch):
    """Goal: a rebase or a checkout that rewrites a compiled module's source with the same
    bytes leaves the build current. Method: a fake compiled module built from its source,
    whose source is then rewritten as it was and dated after the build."""
    extension, source = fake_built_module(tmp_path, monkeypatch)
    build(extension, source)
    os.utime(extension, (1e9, 1e9))
    source.write_bytes(source.read_bytes())
    os.utime(source, (2e9, 2e9))
    assert compiled.stale_modules() == []


def test_a_source_changed_since_the_build_is_stale_whatever_its_time(tmp_path, monkeypatch):
    """Goal: an edited source is stale even when its file looks older than the build (a
    checkout of an older commit). Method: a fake compiled module built from its source, whose
    source is then changed and dated before the build."""
    extension, source = fake_built_module(tmp_path, monkeypatch)
    build(extension, source)
    source.write_bytes(b"VALUE = 2\n")
    os.utime(source, (1e9, 1e9))
    os.utime(extension, (2e9, 2e9))
    assert compiled.stale_modules() == ["meta.fake"]


def test_a_build_that_recorded_no_digest_is_stale(tmp_path, monkeypatch):
    fake_built_module(tmp_path, monkeypatch)
    assert compiled.stale_modules() == ["meta.fake"]


def test_a_c_extension_whose_c_source_changed_is_stale(tmp_path, monkeypatch):
    """Goal: an edited ``.c`` file without a rebuild is found, as an edited compiled module
    is. Method: a fake C extension built from ``fake.c``, which is then changed."""
    extension, source = fake_built_module(tmp_path, monkeypatch, source_name="fake.c")
    build(extension, source)
    assert compiled.stale_modules() == []
    source.write_bytes(b"int value = 2;\n")
    assert compiled.stale_modules() == ["meta.fake"]


def test_every_c_extension_is_a_c_source_of_the_package():
    for name, (source, _libraries) in compiled.C_EXTENSIONS.items():
        assert (ROOT / source).is_file(), name
        assert Path(source).parent == Path(name.replace(".", "/")).parent, name


def test_the_stale_message_names_the_modules_and_the_rebuild_command_of_the_docs():
    message = compiled.stale_message(["meta.protocol.codec", "meta.store._flush_worker"])
    assert "meta.protocol.codec, meta.store._flush_worker" in message
    assert compiled.REBUILD_COMMAND in message
    assert compiled.REBUILD_COMMAND in (ROOT / "docs" / "performance.md").read_text()


def test_stale_c_extensions_alone_are_rebuilt_without_the_compiled_build():
    message = compiled.stale_message(["meta.store._flush_worker"])
    assert compiled.C_REBUILD_COMMAND in message and "METAQ_COMPILE" not in message
    assert compiled.C_REBUILD_COMMAND in (ROOT / "docs" / "performance.md").read_text()


def _build_c_extensions(
    tmp_path: Path, **environment: str
) -> tuple[subprocess.CompletedProcess, Path]:
    """``setup.py build_ext --inplace`` without ``METAQ_COMPILE``, as every install runs it,
    in a copy of ``setup.py`` and ``meta/`` without their extensions."""
    copy = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "meta",
        copy / "meta",
        ignore=shutil.ignore_patterns("*.so", "*.built-sha256", "__pycache__"),
    )
    shutil.copy(ROOT / "setup.py", copy / "setup.py")
    shutil.copy(ROOT / "setup.cfg", copy / "setup.cfg")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    env = {**os.environ, **environment}
    env.pop("METAQ_COMPILE", None)
    result = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, copy


def test_every_install_builds_the_c_extensions_and_records_their_sources(tmp_path):
    """Goal: a plain install gets the C flusher thread and the C record check, and the stale
    check knows what they were built from. Method: the C build of every install, in a copy."""
    result, copy = _build_c_extensions(tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name, (source, _libraries) in compiled.C_EXTENSIONS.items():
        extension = copy / (name.replace(".", "/") + suffix)
        assert extension.is_file(), result.stderr[-4000:]
        recorded = Path(compiled.built_digest_path(str(extension), name)).read_text().strip()
        assert recorded == compiled.source_digest(str(copy / source))
    assert not list(copy.glob("meta/**/codec*.so"))  # no mypyc without METAQ_COMPILE


def test_an_install_without_a_c_compiler_goes_on_without_the_c_extensions(tmp_path):
    """Goal: no C compiler is no failed install: the broker then runs the Python twins.
    Method: the same build with a compiler that always fails (``CC=false``)."""
    result, copy = _build_c_extensions(tmp_path, CC="false", LDSHARED="false")
    assert result.returncode == 0, result.stderr[-4000:]
    assert list(copy.glob("meta/**/*.so")) == []
    assert list(copy.glob("meta/**/*.built-sha256")) == []
