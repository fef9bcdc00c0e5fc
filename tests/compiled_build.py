"""The other build of the hot path, prepared in the background for ``tests/test_compiled.py``.

A scratch copy of the checkout (the package, its tests and its build files, without
extensions) is made at the start of the session, and, when this run is pure Python, the
compiled build (mypyc at ``opt_level`` 0, which only makes the C compiler quicker) starts
there in a child process, so that its minute of compiling overlaps the rest of the suite
instead of adding to it. The test waits for it; the session stops it if it still runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from meta.compiled import compiled_modules

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 900.0


def can_compile() -> bool:
    """mypy (mypyc), Python's headers and the C compiler are all here."""
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        import mypyc  # noqa: F401 - only whether it is installed
    except ImportError:
        return False
    return headers.is_file() and shutil.which(compiler) is not None


class ScratchBuild:
    """A scratch checkout in ``directory``, compiled in the background when ``compiled``.

    Attributes:
        directory: the copy's root (PYTHONPATH for what runs in it).
        compiled: whether the copy is to run the compiled build (this run is pure Python).
        skipped: why the compiled build cannot be made here, or None.
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="metaq-other-build-"))
        self.compiled = not compiled_modules()
        self.skipped: str | None = None
        self._process: subprocess.Popen | None = None
        self._log = self.directory / "build.log"
        ignored = shutil.ignore_patterns("*.so", "__pycache__")
        for name in ("meta", "tests"):
            shutil.copytree(ROOT / name, self.directory / name, ignore=ignored)
        for name in ("setup.py", "setup.cfg", "pyproject.toml"):
            shutil.copy2(ROOT / name, self.directory / name)
        if not self.compiled:
            return
        if not can_compile():
            self.skipped = "the compiled build needs mypy, a C compiler and Python's headers"
            return
        environment = {
            **os.environ,
            "PYTHONPATH": str(self.directory),
            "METAQ_COMPILE": "1",
            "METAQ_COMPILE_OPT_LEVEL": "0",
        }
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "setup.py", "build_ext", "--inplace"],
                cwd=self.directory,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait(self) -> None:
        """Wait (bounded) for the build; AssertionError with its output when it failed."""
        if self._process is None:
            return
        status = self._process.wait(timeout=BUILD_TIMEOUT_S)
        assert status == 0, self._log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        """Stop the build if it still runs, and remove the copy."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)
