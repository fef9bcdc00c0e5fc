"""The transaction journal: append-only ``redo.<N>`` files under ``<dataLogPath>/transactions``.

What lives here: ``Journal``, which replays the files at start-up (truncating a damaged or torn
tail and logging the bytes cut), appends records (``meta.tx.records``), counts the open
transactions of each file, deletes a file once no open transaction is left in it, and makes
records durable as ``flushTxLogAtCommit`` says, as a ``FlushMode``:

* ``OS`` (0): never fsync explicitly;
* ``GROUP_COMMIT`` (1): ``sync`` answers after an fsync covering every record written before
  it (commits, rollbacks and prepares call it); concurrent callers share one fsync;
* ``THRESHOLD`` (2): ``sync`` answers at once; a timer fsyncs the written files once a second.

Placement: a transaction's first record goes to the current file, which then
counts one more open transaction (``retain``); its later records go to that same file, even
after newer files exist; finishing it ``release``s the file. The current file rolls over once
it holds ``file_bytes_max`` bytes, when the next transaction starts.

Invariants:
    * Records are only appended; a file's bytes up to ``size`` are whole records behind the
      magic. After a failed write or fsync the journal is failed for good (``failed``): every
      waiting and later ``sync`` and every ``append`` fails, as a partition does (durability.md).
      In ``GROUP_COMMIT`` each file is first cut back to its fsynced size (what a ``sync`` may
      have answered), so no record whose ``sync`` failed is replayed after a restart; the
      other modes answer ``sync`` once written, so their files keep what was written.
    * A roll that finds no free file descriptor (EMFILE, ENFILE) keeps the current file and
      is tried again by the next transaction, and a flush that cannot open the directory to
      fsync it runs again shortly, its ``sync`` callers still waiting: running out of
      descriptors is transient.
    * A file is deleted only when it is not the current one, no open transaction counts on it,
      no fsync of it is running, and its records are written (and fsynced, unless ``OS``):
      a crash or power loss that undoes the unlink leaves a file that says how its
      transactions ended (a ROLLBACK or FORGET is often its last record).
    * fsync runs on the store's flusher thread (the journal is a ``FlushClient``), never on the
      reactor thread.

Thread affinity: reactor thread only; ``RedoSyncTask.run`` runs on the flusher thread, and the
unlink of an unused file on the ``background`` executor (the reactor's thread pool).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from twisted.internet.task import LoopingCall
from twisted.python.failure import Failure

from meta.config import FlushMode
from meta.errors import DescriptorShortageError, InvalidRecordError, StoreError
from meta.store.append import append_at
from meta.store.files import Files
from meta.store.group_commit import Executor, Flusher, SynchronousExecutor
from meta.store.tail_cut import is_descriptor_shortage
from meta.tx.journal_location import JournalLocation
from meta.tx.records import FILE_MAGIC, FILE_MAGIC_V1, Record, encode, read_record
from meta.tx.redo_file import RedoFile, RedoSyncTask, cut_unsynced

logger = logging.getLogger("meta.tx")

PREFIX = "redo."
READ_CHUNK_BYTES = 1 << 20
FLUSH_EVERY_S = 1.0
DESCRIPTOR_RETRY_S = 0.1  # a flush that found no free file descriptor runs again after this

SyncDone = Callable[[BaseException | None], None]


class JournalError(StoreError):
    """The journal cannot take or keep records (I/O failure, or it is closed)."""


class Journal:
    """The redo files of one broker.

    Args:
        directory: ``<dataLogPath>/transactions`` (created if missing).
        files: the file layer.
        flusher: the store's flusher (its thread runs the fsyncs).
        reactor: provides ``callLater`` for the once-a-second flush of ``THRESHOLD``.
        file_bytes_max: roll the current file once it holds this many bytes.
        flush_mode: from ``flushTxLogAtCommit`` (``BrokerConfig.journal_flush_mode``).
        background: runs the deletion of unused files off the reactor thread (an executor
            as ``StoreManager.background``); inline when None.
    """

    def __init__(
        self,
        directory: str,
        *,
        files: Files,
        flusher: Flusher,
        reactor: Any,
        file_bytes_max: int,
        flush_mode: FlushMode,
        background: Executor | None = None,
    ) -> None:
        assert isinstance(flush_mode, FlushMode)
        assert file_bytes_max > len(FILE_MAGIC)
        self.directory = directory
        self.failed: JournalError | None = None
        self._files = files
        self._flusher = flusher
        self._reactor = reactor
        self._file_bytes_max = file_bytes_max
        self._flush_mode = flush_mode
        self._background = background if background is not None else SynchronousExecutor()
        self._redo: dict[int, RedoFile] = {}
        self._current: RedoFile | None = None
        self._directory_dirty = False
        self._waiters: list[SyncDone] = []
        self._flushing: set[int] = set()
        self._doomed: set[int] = set()
        self._timer: LoopingCall | None = None
        self._staged_files: list[RedoFile] = []
        self._retrying = False  # a flush waits for a free file descriptor
        self.bytes_cut = 0

    # -- start-up ----------------------------------------------------------------------------

    def replay(self, start: JournalLocation | None) -> Iterator[tuple[JournalLocation, Record]]:
        """Open the files and yield every record from ``start`` (the checkpoint) on.

        Files numbered below ``start.number`` hold no open transaction and are deleted. A
        damaged record or torn tail ends its file: the file is truncated there and the bytes
        cut are logged (STYLE 8). Consume the iterator fully, then call ``start``.

        Raises:
            StoreError: the directory cannot be created or read, or a file is not a journal of
                this format (a Java ``redo`` file, for example).
        """
        self.make_directory()
        numbers = self._redo_numbers()
        for number in numbers:
            path = os.path.join(self.directory, f"{PREFIX}{number}")
            if start is not None and number < start.number:
                logger.info("deleting %s: it is older than the checkpoint", path)
                self._files.remove(path)
                continue
            redo = self._open_file(number, path)
            self._redo[number] = redo
            position = len(FILE_MAGIC)
            if start is not None and number == start.number:
                position = max(position, start.position)
            yield from self._replay_file(redo, position)

    def make_directory(self) -> None:
        """Create the journal directory (and its parent) when missing."""
        parent = os.path.dirname(self.directory)
        try:
            for path in (parent, self.directory):
                if not self._files.is_directory(path):
                    self._files.mkdir(path)
                    # Start-up only: make the new entry durable in its parent right away.
                    self._files.fsync_directory(os.path.dirname(path))
        except OSError as error:
            raise StoreError(f"cannot create journal directory {self.directory}: {error}") from None

    def _redo_numbers(self) -> list[int]:
        numbers = []
        for name in self._files.listdir(self.directory):
            suffix = name[len(PREFIX) :]
            if name.startswith(PREFIX) and suffix.isdigit() and int(suffix) > 0:
                numbers.append(int(suffix))
        return sorted(numbers)

    def _open_file(self, number: int, path: str) -> RedoFile:
        try:
            fd = self._files.open(path)
            size = self._files.size(fd)
            head = self._files.read(fd, 0, len(FILE_MAGIC))
        except OSError as error:
            raise StoreError(f"cannot open journal file {path}: {error}") from None
        if head == FILE_MAGIC_V1:
            return RedoFile(number, path, fd, size, version=1)
        if head != FILE_MAGIC:
            if size < len(FILE_MAGIC) and FILE_MAGIC.startswith(head):
                # Torn while being created: nothing was ever recorded in it.
                self._write_all(fd, FILE_MAGIC, 0, path)
                size = len(FILE_MAGIC)
            else:
                self._files.close(fd)
                raise StoreError(
                    f"{path} is not a metaq-py transaction journal (a Java broker's: check "
                    "and move it aside with `meta-admin migrate-java-data DIR`; or one of a "
                    "newer version)"
                )
        return RedoFile(number, path, fd, size)

    def _replay_file(self, redo: RedoFile, position: int) -> Iterator:
        data = bytearray()
        data_start = cursor = position
        while True:
            try:
                found = read_record(data, cursor - data_start)
            except InvalidRecordError as error:
                self._truncate(redo, cursor, str(error))
                return
            if found is None:
                more = self._files.read(redo.fd, data_start + len(data), READ_CHUNK_BYTES)
                if more:
                    del data[: cursor - data_start]
                    data_start = cursor
                    data += more
                    continue
                if cursor < data_start + len(data):
                    self._truncate(redo, cursor, "torn record at the end")
                return
            record, size = found
            yield JournalLocation(redo.number, cursor), record
            cursor += size

    def _truncate(self, redo: RedoFile, position: int, why: str) -> None:
        cut = redo.size - position
        logger.error(
            "journal %s: %s at position %d; cutting %d bytes", redo.path, why, position, cut
        )
        self._files.truncate(redo.fd, position)
        redo.size = redo.written_size = redo.flushed_size = position
        self.bytes_cut += cut

    def start(self) -> None:
        """After ``replay``: make the last file current (or create ``redo.1``), start timers."""
        if self._redo:
            self._current = self._redo[max(self._redo)]
            if self._current.version < 2:
                # New transactions go to a file of this version; the old file keeps the
                # records of its own transactions only (``sweep`` deletes it once unused).
                self._current = self._create(self._current.number + 1)
        else:
            self._current = self._create(1)
        if self._flush_mode is FlushMode.THRESHOLD:
            self._timer = LoopingCall(self._flush_written)
            self._timer.clock = self._reactor
            self._timer.start(FLUSH_EVERY_S, now=False)

    def sweep(self) -> None:
        """Delete every file that no open transaction counts on (after recovery retained)."""
        for redo in list(self._redo.values()):
            self._delete_if_unused(redo)

    # -- writing -----------------------------------------------------------------------------

    @property
    def end(self) -> JournalLocation:
        """Where the next record of a new transaction would go."""
        assert self._current is not None
        return JournalLocation(self._current.number, self._current.size)

    def append(self, record: Record, number: int | None = None) -> JournalLocation:
        """Stage ``record``; see ``append_encoded``."""
        return self.append_encoded(encode(record), number)

    def append_encoded(self, data: bytes, number: int | None = None) -> JournalLocation:
        """Stage ``record`` for file ``number`` (a transaction's file), or the current file.

        ``data`` is a framed record (``meta.tx.records``). Appending to the current file
        (``number`` None) starts a transaction there: the current file rolls over first
        when full, and the caller must ``retain`` the file.
        Staged records are written by ``write_staged`` (at the end of each network read, as
        partition records are) and always before ``sync`` waits or answers.

        Raises:
            JournalError: the journal failed.
        """
        if self.failed is not None:
            raise JournalError(str(self.failed))
        if number is None:
            assert self._current is not None
            if self._current.size >= self._file_bytes_max:
                self._roll()
            redo = self._current
        else:
            redo = self._redo[number]
        position = redo.size
        if not redo.staged:
            self._staged_files.append(redo)
        redo.staged.append(data)
        redo.size = position + len(data)
        return JournalLocation(redo.number, position)

    def end_of_batch(self) -> None:
        """The broker handled one read: write what it staged, unless a requested flush is
        about to (its snapshot writes every staged record: one write for many reads).
        A batch without transactional records (plain puts, gets) costs one test."""
        if self._staged_files and not self._waiters:
            self.write_staged()

    def write_staged(self) -> None:
        """Write every staged record, one write per file. A failure fails the journal."""
        staged, self._staged_files = self._staged_files, []
        for redo in staged:
            data = b"".join(redo.staged)
            redo.staged.clear()
            if self.failed is not None or redo.number not in self._redo:
                continue
            try:
                self._write_all(redo.fd, data, redo.written_size, redo.path)
            except StoreError as error:
                self._fail(error)
                continue
            redo.written_size += len(data)

    def _write_all(self, fd: int, data: bytes, position: int, path: str) -> None:
        try:
            append_at(self._files, fd, data, position, path)
        except OSError as error:
            raise StoreError(f"write to {path} failed: {error}") from None

    def _roll(self) -> None:
        assert self._current is not None
        previous = self._current
        try:
            self._current = self._create(previous.number + 1)
        except DescriptorShortageError as error:
            logger.warning("journal cannot roll yet, it keeps %s: %s", previous.path, str(error))
            return
        logger.info("journal rolled to %s", self._current.path)
        self._delete_if_unused(previous)

    def _create(self, number: int) -> RedoFile:
        """Create ``redo.<number>``. Raises DescriptorShortageError (the journal stays
        usable) when no descriptor is free, JournalError (it failed) on any other error."""
        path = os.path.join(self.directory, f"{PREFIX}{number}")
        try:
            fd = self._files.open(path, create=True)
        except OSError as error:
            if is_descriptor_shortage(error):
                raise DescriptorShortageError(f"cannot create {path}: {error}") from error
            self._fail(error)
            raise JournalError(str(self.failed)) from None
        try:
            self._files.truncate(fd, 0)
            self._write_all(fd, FILE_MAGIC, 0, path)
        except (OSError, StoreError) as error:
            self._fail(error)
            raise JournalError(str(self.failed)) from None
        self._directory_dirty = True
        redo = RedoFile(number, path, fd, len(FILE_MAGIC))
        redo.flushed_size = 0
        self._redo[number] = redo
        return redo

    def retain(self, number: int) -> None:
        """One more open transaction has records in file ``number``."""
        self._redo[number].references += 1

    def release(self, number: int) -> None:
        """A transaction of file ``number`` finished; delete the file if it is now unused."""
        redo = self._redo.get(number)
        if redo is None:
            return
        redo.references -= 1
        assert redo.references >= 0
        self._delete_if_unused(redo)

    def _delete_if_unused(self, redo: RedoFile) -> None:
        """Delete ``redo`` when the module's invariant allows, else once a flush covered it."""
        if redo is self._current or redo.references > 0 or redo.number not in self._redo:
            return
        self.write_staged()  # rare: a file that was not current has just been let go
        if self.failed is not None:
            return  # a failed journal keeps its files for the restart
        unsynced = self._flush_mode is not FlushMode.OS and redo.written_size > redo.flushed_size
        if unsynced or redo.number in self._flushing:
            self._doomed.add(redo.number)  # the end of a flush that covers it deletes it
            if unsynced:
                self._flusher.request(self)
            return
        del self._redo[redo.number]
        self._files.close(redo.fd)
        # Unlinking a full file frees its blocks: milliseconds the reactor thread must not
        # stall for. Names are never reused (numbers only grow), so nothing waits for it.
        removed = self._background(partial(self._files.remove, redo.path))
        removed.addCallbacks(
            self._removed, self._not_removed, callbackArgs=(redo.path,), errbackArgs=(redo.path,)
        )

    def _removed(self, _result: object, path: str) -> None:
        self._directory_dirty = True
        logger.info("deleted journal file %s: no open transaction is left in it", path)

    def _not_removed(self, failure: Failure, path: str) -> None:
        logger.error("could not delete journal file %s: %s", path, failure.getErrorMessage())

    @property
    def file_numbers(self) -> list[int]:
        """The numbers of the redo files that exist, ascending."""
        return sorted(self._redo)

    # -- durability --------------------------------------------------------------------------

    def sync(self, done: SyncDone) -> None:
        """Call ``done(None)`` once the records written so far are as durable as the mode says.

        ``GROUP_COMMIT`` waits for the fsync that covers them; ``OS`` and ``THRESHOLD`` answer
        at once (``THRESHOLD``'s timer syncs within a second). ``done(error)`` when the journal
        failed.
        """
        if self._flush_mode is FlushMode.GROUP_COMMIT and self.failed is None:
            # The flush's snapshot writes what is staged (with what the rest of this read
            # stages, when a flush is running now): one write for many commits.
            self._waiters.append(done)
            self._flusher.request(self)
            return
        self.write_staged()
        if self.failed is not None:
            done(JournalError(str(self.failed)))
            return
        done(None)

    def _flush_written(self) -> None:
        """Mode 2 timer: fsync every file written since the last flush."""
        if self.failed is None and self._dirty_files():
            self._flusher.request(self)

    def _dirty_files(self) -> list[RedoFile]:
        return [redo for redo in self._redo.values() if redo.written_size > redo.flushed_size]

    def flush_snapshot(self) -> RedoSyncTask | None:
        """Reactor thread: what a flush started now must cover (FlushClient)."""
        self.write_staged()
        if self.failed is not None:
            waiters, self._waiters = self._waiters, []
            for done in waiters:
                done(JournalError(str(self.failed)))
            return None
        dirty = self._dirty_files()
        if not dirty and not self._directory_dirty and not self._waiters:
            return None
        directory = self.directory if self._directory_dirty else None
        self._directory_dirty = False
        waiters, self._waiters = self._waiters, []
        self._flushing.update(redo.number for redo in dirty)
        return RedoSyncTask(self._files, directory, dirty, waiters)

    def flush_done(self, task: RedoSyncTask) -> None:
        """Reactor thread: ``task`` is on disk; answer its waiters (FlushClient)."""
        self._retrying = False
        for redo, size in zip(task.redo_files, task.sizes, strict=True):
            if self.failed is None:  # a failed journal may have cut the file below ``size``
                redo.flushed_size = max(redo.flushed_size, size)
        self._end_flush(task)
        for done in task.waiters:
            done(None if self.failed is None else JournalError(str(self.failed)))

    def flush_failed(self, task: RedoSyncTask, error: BaseException) -> None:
        """Reactor thread: the fsync failed; the journal fails (FlushClient). Without a free
        descriptor to open the directory, the same sync is tried again shortly instead."""
        if self.failed is None and is_descriptor_shortage(error):
            self._retry_flush(task, error)
            return
        self._fail(StoreError(f"journal fsync failed: {error}"))
        self._end_flush(task)
        for done in task.waiters:
            done(JournalError(str(self.failed)))

    def _retry_flush(self, task: RedoSyncTask, error: BaseException) -> None:
        """Put ``task``'s directory entry and waiters back and ask for a flush again in
        ``DESCRIPTOR_RETRY_S``: nothing was answered, so nothing needs to be cut."""
        if not self._retrying:
            logger.warning("journal fsync waits for a free file descriptor: %s", str(error))
        self._retrying = True
        self._directory_dirty = self._directory_dirty or task.directory is not None
        self._waiters[:0] = task.waiters
        self._end_flush(task)
        self._reactor.callLater(DESCRIPTOR_RETRY_S, self._flusher.request, self)

    def _end_flush(self, task: RedoSyncTask) -> None:
        for redo in task.redo_files:
            self._flushing.discard(redo.number)
        doomed, self._doomed = self._doomed, set()
        for number in doomed:
            redo = self._redo.get(number)
            if redo is not None:
                self._delete_if_unused(redo)

    def _fail(self, error: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = JournalError(f"transaction journal {self.directory} failed: {error}")
        logger.error("%s; transactions are refused until restart", self.failed)
        if self._flush_mode is FlushMode.GROUP_COMMIT:
            cut_unsynced(self._files, self._redo.values(), len(FILE_MAGIC))
        waiters, self._waiters = self._waiters, []
        for done in waiters:
            done(JournalError(str(self.failed)))

    def close(self) -> None:
        """Stop the timer and close every file (call once the flusher is idle)."""
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self.write_staged()
        if self.failed is None:
            self.failed = JournalError("the transaction journal is closed")
        for redo in self._redo.values():
            self._files.close(redo.fd)
        self._redo.clear()
