"""The thin file interface every store module does its I/O through.

What lives here: ``Files``, a handful of methods over file descriptors and directories, with the
real operating-system implementation as the default. Tests subclass it to record the order of
events ("write", "fsync", ...) and to inject failures (EIO on fsync, ENOSPC on write), so crash
and error paths can be driven on purpose (STYLE 22).

Invariants: methods raise ``OSError`` exactly as the system calls do and never retry or log;
the callers decide what a failure means. ``fsync`` is ``os.fdatasync`` followed by a journal
check (see its docstring) and ``fsync_directory`` a real ``fsync`` of the directory;
``allocate`` reserves a file's blocks ahead of its size and ``trim_allocation`` frees them
again, neither ever changing the size. A short
``write`` is reported, not hidden: the caller loops. Thread-safe: no state of its own, so the
flusher's worker thread may call ``fsync`` and ``fsync_directory`` while the reactor thread
writes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

FALLOC_FL_KEEP_SIZE = 1
# What ``fallocate`` answers where the check cannot be made: a file system without it, a range
# it refuses, a descriptor open for reading only (a segment loaded read-only). The
# ``fdatasync`` result then stands alone.
UNCHECKABLE = frozenset(
    (
        errno.EOPNOTSUPP,
        errno.ENOTSUP,
        errno.ENOSYS,
        errno.EINVAL,
        errno.ENODEV,
        errno.ENOSPC,
        errno.EBADF,
    )
)


def _load_fallocate():
    """libc's ``fallocate(2)``, or None where the C library has none (not Linux)."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).fallocate
    except (OSError, AttributeError, TypeError):
        return None
    # No ``argtypes``: converting each argument through them cost more than the system call's
    # own user-space work, once per fsync. The call passes the descriptor and the mode as
    # Python ints (C ints) and the range as the ``c_longlong`` constants below.
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()
CHECK_OFFSET = 0
CHECK_LENGTH = 1
"""The range of the journal check (``confirm_journal``): the file's first byte."""
_CHECK_OFFSET = ctypes.c_longlong(CHECK_OFFSET)
_CHECK_LENGTH = ctypes.c_longlong(CHECK_LENGTH)


def allocate_keeping_size(
    fd: int, offset: int | ctypes.c_longlong, length: int | ctypes.c_longlong
) -> int:
    """``fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length)``: 0, or the errno it failed with.

    The one call of ``fallocate(2)`` (the journal check and the blocks allocated ahead of a
    segment's writes). Where the C library has none, it answers ``ENOSYS``.
    """
    if _fallocate is None:
        return errno.ENOSYS
    if not isinstance(offset, ctypes.c_longlong):
        offset = ctypes.c_longlong(offset)
    if not isinstance(length, ctypes.c_longlong):
        length = ctypes.c_longlong(length)
    if _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return 0
    return ctypes.get_errno()


def confirm_journal(fd: int) -> None:
    """Raise ``OSError`` when the file system of ``fd`` can no longer write metadata.

    Linux's ext4 may let an ``fdatasync`` return success for data it will never write: an
    fsync that waits for a journal commit while an error aborts the journal (an ext4 error
    with ``errors=remount-ro``, as a failing disk causes) returns 0 for a transaction that
    is never committed, until the file system is flagged read-only a few milliseconds later.
    The journal is already aborted when that ``fdatasync`` returns, so any operation that
    starts a journal transaction after it fails. ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``
    over the file's first byte is such an operation that changes nothing: the block is
    allocated already and the size is kept; only the modification time moves, as the write
    before it did. Where a file system has no ``fallocate`` (or the C library none), there is
    nothing to check.
    """
    code = allocate_keeping_size(fd, _CHECK_OFFSET, _CHECK_LENGTH)
    if code and code not in UNCHECKABLE:
        raise journal_error(code)


def journal_error(code: int) -> OSError:
    """The error of a failed journal check (``confirm_journal``) that answered ``code``."""
    return OSError(code, f"{os.strerror(code)} (the file system failed after an fsync)")


Sync = str | int
"""One step of a flush: a directory (``Files.fsync_directory``) or a descriptor
(``Files.fsync``)."""


def run_syncs(files: Files, syncs: tuple[Sync, ...]) -> None:
    """Run a flush task's syncs in order through ``files``; raise at the first failure.

    The one reading of a plan of syncs in Python; ``meta.store.group_commit`` hands the same
    plan to its C thread (``meta.store._flush_worker``) when ``files`` is the operating
    system's.
    """
    for sync in syncs:
        if isinstance(sync, str):
            files.fsync_directory(sync)
        else:
            files.fsync(sync)


def read_small_file(files: Files, path: str, bytes_max: int) -> bytes:
    """The first ``bytes_max`` bytes of the file ``path`` (one of ``replace_file``'s), read
    through ``files``.

    Raises:
        OSError: it cannot be opened or read.
    """
    fd = files.open(path, writable=False)
    try:
        return files.read(fd, 0, bytes_max)
    finally:
        files.close(fd)


def replace_file(files: Files, path: str, data: bytes, temporary_suffix: str = ".tmp") -> None:
    """Replace the file ``path`` with ``data`` atomically, through ``files``.

    The one home of the store's small atomic files (transaction checkpoints, pending
    truncation records, recovery points): ``path + temporary_suffix`` is written and fsynced,
    renamed over ``path``, then ``path``'s directory is fsynced. A crash leaves ``path`` with
    its old contents or its new ones, never a mix; a leftover temporary file is not ``path``.

    Raises:
        OSError: a step failed; ``path`` still holds its old contents unless the rename was
            made (then only the directory's fsync failed).
    """
    temporary = path + temporary_suffix
    fd = files.open(temporary, create=True)
    try:
        files.truncate(fd, 0)  # a leftover of an interrupted write may be longer
        written = 0
        while written < len(data):
            written += files.write(fd, data[written:], written)
        files.fsync(fd)
    finally:
        files.close(fd)
    files.rename(temporary, path)
    files.fsync_directory(os.path.dirname(path) or ".")


class Files:
    """File operations on descriptors and paths; the operating-system implementation."""

    def open(self, path: str, *, create: bool = False, writable: bool = True) -> int:
        """Open ``path`` and return its descriptor.

        Args:
            path: the file to open.
            create: create the file when it does not exist (``O_CREAT``).
            writable: open for reading and writing; otherwise read-only.
        """
        flags = os.O_RDWR if writable else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)

    def write(self, fd: int, data: bytes | memoryview, position: int) -> int:
        """Write ``data`` at ``position`` (``pwrite``); return the count written, maybe short."""
        return os.pwrite(fd, data, position)

    def read(self, fd: int, position: int, length: int) -> bytes:
        """Read up to ``length`` bytes at ``position`` (``pread``); shorter only at end of file."""
        data = os.pread(fd, length, position)
        if len(data) == length or not data:
            return data
        parts = [data]
        done = len(data)
        while done < length:
            more = os.pread(fd, length - done, position + done)
            if not more:
                break
            parts.append(more)
            done += len(more)
        return b"".join(parts)

    def fsync(self, fd: int) -> None:
        """Force the file's data to disk, with the size needed to read it back.

        ``fdatasync``: segments only grow by appends, and ``fdatasync`` includes the metadata
        needed to read the data (the file size); a new file's name is made durable separately
        by ``fsync_directory``. Then ``confirm_journal``: success means the file system could
        still write after the ``fdatasync`` returned, which an ext4 journal aborted under it
        cannot.
        """
        os.fdatasync(fd)
        confirm_journal(fd)

    def truncate(self, fd: int, size: int) -> None:
        """Cut or extend the file to ``size`` bytes (``ftruncate``)."""
        os.ftruncate(fd, size)

    def allocate(self, fd: int, position: int, length: int) -> bool:
        """Allocate the file's blocks over ``[position, position + length)``, keeping its size.

        ``fallocate`` with ``FALLOC_FL_KEEP_SIZE``: the size (what readers, recovery and Java
        go by) stays that of the data written; a later write into the range finds its blocks
        allocated already (ext4 then skips its delayed allocation in the ``pwrite``).

        Returns:
            Whether the blocks were allocated; False where the file system or the C library
            cannot (the caller writes without), or any other failure (a write that then
            cannot get its blocks reports that itself).
        """
        return allocate_keeping_size(fd, position, length) == 0

    def trim_allocation(self, fd: int, size: int) -> None:
        """Free the blocks allocated past ``size``, the file's size (``allocate``'s, unused).

        ``ftruncate`` to the size the file has: it frees every block past the end and changes
        no byte. Raises ``OSError`` as ``ftruncate`` does.
        """
        os.ftruncate(fd, size)

    def size(self, fd: int) -> int:
        """Return the file's current size in bytes."""
        return os.fstat(fd).st_size

    def close(self, fd: int) -> None:
        """Close the descriptor."""
        os.close(fd)

    def listdir(self, path: str) -> list[str]:
        """Return the names in directory ``path``, sorted."""
        return sorted(os.listdir(path))

    def is_directory(self, path: str) -> bool:
        """Return whether ``path`` is a directory (following symbolic links)."""
        return os.path.isdir(path)

    def is_file(self, path: str) -> bool:
        """Return whether ``path`` is a regular file (following symbolic links)."""
        return os.path.isfile(path)

    def mkdir(self, path: str) -> None:
        """Create one directory level; the parent must exist (as Java's ``File.mkdir``)."""
        os.mkdir(path, 0o755)

    def rename(self, source: str, target: str) -> None:
        """Atomically replace ``target`` with ``source`` (``rename``)."""
        os.replace(source, target)

    def remove(self, path: str) -> None:
        """Delete the file ``path``."""
        os.remove(path)

    def fsync_directory(self, path: str) -> None:
        """Make the directory's entries (new files, new sub-directories) durable."""
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
