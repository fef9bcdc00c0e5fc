"""Durability helpers for the client's local files (recover store, local offsets, backlogs).

``fsync_directory`` makes a create or rename in a directory durable. (The broker's store has
its own copy inside its injectable ``meta.store.files.Files`` layer, so tests can fault it.)
Thread-safe: no state.
"""

from __future__ import annotations

import os


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """fsync ``directory`` so that a file created or renamed in it survives a power loss.

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
