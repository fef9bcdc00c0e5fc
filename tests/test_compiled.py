"""The optional compiled build (``setup.py``, ``METAQ_COMPILE=1``) and its pure-Python twin.

The suite runs whichever build the checkout holds: pure Python after a plain install, the
compiled modules after an in-place compiled build. The slow test runs the other one over the
tests that pin the hot path's bytes (the codec's golden bytes and byte-by-byte decoding, the
put and sync runs' replies and segments against one command at a time, the put replies'
bytes) in a scratch copy of the checkout: without the extensions when this run is compiled,
else with them, built there (at mypyc's ``opt_level`` 0, which only makes the C compiler
quicker).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from meta.compiled import COMPILED_MODULES, compiled_modules, describe

ROOT = Path(__file__).resolve().parent.parent
PINNING_TESTS = (
    "tests/protocol/test_codec.py",
    "tests/protocol/test_put_reply.py",
    "tests/server/test_put_run.py",
    "tests/server/test_sync_run.py",
)
BUILD_TIMEOUT_S = 900.0
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


def _scratch_checkout(target: Path) -> None:
    """The package, its tests and its build files, without extensions or build output."""
    ignored = shutil.ignore_patterns("*.so", "__pycache__")
    for name in ("meta", "tests"):
        shutil.copytree(ROOT / name, target / name, ignore=ignored)
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        shutil.copy2(ROOT / name, target / name)


def _run(command: list[str], cwd: Path, timeout: float, **extra: str) -> str:
    environment = {**os.environ, "PYTHONPATH": str(cwd), **extra}
    result = subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def _can_compile() -> bool:
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        import mypyc  # noqa: F401 - only whether it is installed
    except ImportError:
        return False
    return headers.is_file() and shutil.which(compiler) is not None


@pytest.mark.slow
def test_the_other_build_passes_the_tests_that_pin_the_hot_path_bytes(tmp_path):
    """Goal: both builds give the same bytes. Method: in a scratch copy, build (or leave
    out) the extensions, check which build the copy runs, then run the pinning tests."""
    checkout = tmp_path / "checkout"
    _scratch_checkout(checkout)
    want_compiled = not compiled_modules()
    if want_compiled:
        if not _can_compile():
            pytest.skip("the compiled build needs mypy, a C compiler and Python's headers")
        build = [sys.executable, "setup.py", "build_ext", "--inplace"]
        _run(build, checkout, BUILD_TIMEOUT_S, METAQ_COMPILE="1", METAQ_COMPILE_OPT_LEVEL="0")
    probe = "import meta.compiled as c; print(len(c.compiled_modules()), c.stale_modules())"
    found = _run([sys.executable, "-c", probe], checkout, 120.0).split()
    expected = len(COMPILED_MODULES) if want_compiled else 0
    assert found == [str(expected), "[]"]
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    output = _run([*pytest_command, *PINNING_TESTS], checkout, TESTS_TIMEOUT_S)
    assert " passed" in output and "failed" not in output, output[-2000:]
