"""The flusher's C thread (``meta.store._flush_worker``): loading it, and a batch in its terms.

Every install builds the extension when it can (``setup.py``, ``meta.compiled.C_EXTENSIONS``:
optional, since it needs a C compiler and Python's headers); without it
``NATIVE`` is None and ``meta.store.group_commit.ThreadExecutor`` runs every batch on its
Python thread, with the same results. With it, a batch whose tasks all sync through the
operating system's ``Files`` is described as one plan of syncs per task (``native_plans``:
each task's ``syncs()``, the same plan its ``run`` follows through
``meta.store.files.run_syncs``); the C thread runs every plan without the GIL and writes the
completion eventfd, and ``native_errors`` turns its results into the errors that ``Files``
raises for the same calls. ``IMPLEMENTATION`` says which thread runs in production.

Reactor thread only (the C thread's own work is in ``_flush_worker.c``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Final

from meta.store.files import CHECK_LENGTH, CHECK_OFFSET, UNCHECKABLE, Files, Sync, journal_error


def _load_extension() -> Any:
    try:
        return importlib.import_module("meta.store._flush_worker")
    except ImportError:  # not built (setup.py): the Python thread, same results
        return None


NATIVE: Any = _load_extension()
"""The C thread's extension (``meta.store._flush_worker``) when the install built it."""
IMPLEMENTATION: Final = "C thread (GIL never taken)" if NATIVE is not None else "Python thread"
"""Which thread runs the flusher's system calls in production (``ThreadExecutor``)."""


def native_worker(eventfd: int) -> Any:
    """A started C thread that adds 1 to ``eventfd`` after each batch, checking the journal
    after each fdatasync as ``meta.store.files.confirm_journal`` does. Needs ``NATIVE``."""
    assert NATIVE is not None
    return NATIVE.Worker(eventfd, CHECK_OFFSET, CHECK_LENGTH, tuple(UNCHECKABLE))


def native_plans(tasks: list[Any]) -> list[tuple[Sync, ...]] | None:
    """Each task's plan of syncs (``syncs()``) for the C thread, or None when one task has
    none or syncs through other ``Files`` than the operating system's (a test's)."""
    plans = []
    for task in tasks:
        syncs = getattr(task, "syncs", None)
        if syncs is None or type(getattr(task, "files", None)) is not Files:
            return None
        plans.append(syncs())
    return plans


def native_errors(results: list[Any]) -> list[BaseException | None]:
    """The C thread's results (None, or ``(errno, stage, sync)``) as
    ``meta.store.group_commit.run_batch``'s errors: the ``OSError`` that the same call of
    ``Files`` raises."""
    errors: list[BaseException | None] = []
    for result in results:
        if result is None:
            errors.append(None)
            continue
        code, stage, sync = result
        if stage == NATIVE.STAGE_CHECK:
            errors.append(journal_error(code))
        elif isinstance(sync, str):
            errors.append(OSError(code, os.strerror(code), sync))
        else:
            errors.append(OSError(code, os.strerror(code)))
    return errors
