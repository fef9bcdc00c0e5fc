"""Which Python interpreter Spark's Python workers run for the ``metaq`` source, checked.

Spark runs a Python data source in Python workers it starts itself, with the interpreter the
source was registered with: ``PYSPARK_PYTHON``, or ``python3`` from ``PATH`` when that is
not set. That interpreter must import this package and its dependencies (kazoo, croniter,
pyarrow, numpy); when it cannot, the failure used to surface as a ``ModuleNotFoundError``
deep inside a Py4J trace. So:

* ``worker_python`` (on the driver, from ``meta.spark.register``) picks the interpreter to
  register with: with ``PYSPARK_PYTHON`` unset and a local master, this interpreter (it has
  just imported the source; workers run on this host); otherwise the one Spark would use,
  which it checks by importing the source in it when it exists on this host (a cluster's
  executors may have interpreters the driver's host has not: those are not checked here).
* ``missing_module_text`` is the one line a worker raises when an import fails anyway (for
  example on an executor whose interpreter lacks kazoo): what is missing, in which
  interpreter, and what to set. ``worker_import`` imports a module with that text.

This module imports only the standard library at import time, so that a worker lacking a
dependency can still import it to say so. Pure except ``check_interpreter``, which runs the
interpreter once (bounded by ``CHECK_TIMEOUT_S``). Thread-safe.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from types import ModuleType

DEFAULT_WORKER_PYTHON = "python3"
"""PySpark's interpreter for Python workers when ``PYSPARK_PYTHON`` is not set."""
CHECK_TIMEOUT_S = 60.0
CHECK_MODULES = ("meta.spark.datasource", "meta.spark.reading", "meta.spark.writing")
"""What a worker imports: the source, the executor-side reader and writer, their dependencies."""
_CHECK_CODE = f"""
import sys
try:
    import {", ".join(CHECK_MODULES)}
except ModuleNotFoundError as error:
    print(error.name)
    sys.exit(3)
"""


def missing_module_text(module: str | None, python: str | None = None) -> str:
    """One line: the interpreter lacks ``module`` (named by its top-level package, the one to
    install); set ``PYSPARK_PYTHON`` to one that has it."""
    python = python or sys.executable
    package = module.partition(".")[0] if module else "a module"
    return (
        f"the metaq Spark source cannot import {package} in the Python of Spark's "
        f"workers ({python}): set PYSPARK_PYTHON to an interpreter where metaq-py[spark] is "
        "installed (for example the driver's own, PYSPARK_PYTHON=$(which python)) before "
        "the Spark session starts"
    )


def worker_import(module: str) -> ModuleType:
    """``importlib.import_module(module)``; a missing dependency raises with the one line.

    Raises:
        ModuleNotFoundError: with ``missing_module_text`` as its text.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(missing_module_text(error.name), name=error.name) from None


def check_interpreter(python: str, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """Import what a worker imports in ``python``; None when it can, else the one-line text.

    ``python`` runs in this process's working directory with this process's ``PYTHONPATH``,
    as Spark starts a local worker. An interpreter not found on this host is not checked
    (None): it may exist where the executors run.
    """
    path = shutil.which(python)
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, "-c", _CHECK_CODE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None  # Too slow to tell here; a worker that fails says why itself.
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        return missing_module_text(done.stdout.strip() or None, python)
    lines = done.stderr.strip().splitlines()
    failure = lines[-1] if lines else f"exit status {done.returncode}"
    return f"the Python of Spark's workers ({python}) fails to import the metaq source: {failure}"


def worker_python(
    configured: str, master: str, environment: Mapping[str, str] | None = None
) -> str:
    """The interpreter to register the source with (see the module docstring).

    Args:
        configured: the interpreter Spark would use (``SparkContext.pythonExec``).
        master: the session's master URL (``local``, ``local[N]``, ``spark://...``).
        environment: the driver's environment (``os.environ`` when None).

    Raises:
        OptionError: the interpreter exists on this host and cannot import the source; the
            text is one line saying what to set.
    """
    from meta.spark.options import OptionError

    environment = os.environ if environment is None else environment
    if _same_interpreter(configured, sys.executable):
        return configured
    if "PYSPARK_PYTHON" not in environment and master.startswith("local"):
        return sys.executable
    problem = check_interpreter(configured)
    if problem is not None:
        raise OptionError(problem)
    return configured


def _same_interpreter(python: str, other: str) -> bool:
    # Not realpath: a virtual environment's python is a link to the base interpreter, and
    # which environment it runs depends on the path it is started by.
    path = shutil.which(python)
    return path is not None and os.path.abspath(path) == os.path.abspath(other)
