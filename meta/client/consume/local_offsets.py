"""Broadcast consumers' offsets in a local JSON file (Java ``LocalOffsetStorage``).

File format (Java's, so either client can read the other's file)::

    {"<group>":[{"topic":"t","partition":{"brokerId":0,"partition":1},
                 "offset":123,"messageId":-1,"modified":false}, ...], ...}

Where: the Java client's default file is ``~/.meta_offsets``, and a Java broadcast consumer
rewrites that whole file from its own memory on every commit, erasing any entry another
process added. So metaq-py writes its own file by default, ``~/.metaq-py_offsets``, and only
*reads* Java's file, as a fallback for a (group, topic, partition) its own file does not hold
yet: a group moved from a Java consumer to a Python one starts where Java left off, and a Java
consumer running beside it can never erase a Python entry.

Invariants:

- A commit rewrites the whole file atomically: ``<path>.tmp.<pid>`` is written and fsynced,
  renamed over the file with ``os.replace``, then the directory is fsynced (Java renames without
  any fsync). Read, merge and rename happen under an exclusive ``flock`` of ``<path>.lock``, so
  processes of this client sharing a file never lose each other's entries; an entry is
  replaced only by a newer one for the same (group, topic, partition), as ZooKeeper offset
  nodes are.
- A file that cannot be read or parsed raises ``ClientError`` naming the path: offsets are
  never silently reset. A missing or empty file means "no offsets yet".
- On load, ``messageId`` is read when present (Java ignores it and reports -1).

Thread-safe: one lock per file path (shared by every storage of this process on that path)
guards every read and write, so two storages on one file never interleave their commits; the
``flock`` does the same across processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from meta.client.cluster import Partition
from meta.client.local.durable import fsync_directory
from meta.errors import ClientError

DEFAULT_FILE_NAME = ".metaq-py_offsets"
JAVA_FILE_NAME = ".meta_offsets"

_Entries = dict[tuple[str, Partition], dict[str, Any]]

_PATH_LOCKS: dict[str, threading.Lock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def _path_lock(path: str) -> threading.Lock:
    """Return the process-wide lock of ``path`` (the temporary name is per process only)."""
    key = os.path.realpath(path)
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(key, threading.Lock())


def default_path() -> str:
    """Return this client's default file, ``~/.metaq-py_offsets``."""
    return str(Path.home() / DEFAULT_FILE_NAME)


def java_path() -> str:
    """Return the Java client's default file, ``~/.meta_offsets`` (read as a fallback only)."""
    return str(Path.home() / JAVA_FILE_NAME)


class LocalOffsetStorage:
    """Offsets of broadcast consumer groups, stored in one JSON file.

    Args:
        path: the file. It is created on the first commit, not here.
        fallback_path: a file only read, for partitions ``path`` holds no entry of (the Java
            client's file); None: none.
    """

    def __init__(self, path: str, fallback_path: str | None = None) -> None:
        self.path = path
        self.fallback_path = fallback_path
        self._lock = _path_lock(path)

    def load(self, topic: str, group: str, partition: Partition) -> tuple[int, int] | None:
        """Return the stored ``(msg_id, offset)`` of one partition, or None if none is stored.

        Raises:
            ClientError: the file cannot be read or is not in the expected format.
        """
        with self._lock:
            groups = self._read(self.path)
        entry = groups.get(group, {}).get((topic, partition))
        if entry is None and self.fallback_path is not None:
            entry = self._read(self.fallback_path).get(group, {}).get((topic, partition))
        if entry is None:
            return None
        return entry["messageId"], entry["offset"]

    def commit(self, group: str, entries: Iterable[tuple[str, Partition, int, int]]) -> None:
        """Store the offsets of ``group``, rewriting the file atomically; no-op when empty.

        Args:
            group: the (broadcast) consumer group.
            entries: ``(topic, partition, offset, msg_id)`` for each partition to store.

        Raises:
            ClientError: the existing file is unreadable or corrupt, or the write failed.
        """
        updates = list(entries)
        if not updates:
            return
        with self._lock, self._file_lock():
            groups = self._read(self.path)
            stored = groups.setdefault(group, {})
            for topic, partition, offset, msg_id in updates:
                stored[(topic, partition)] = _entry_document(topic, partition, offset, msg_id)
            self._write(_file_document(groups))

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` of ``<path>.lock`` (other processes on the same file)."""
        lock_path = f"{self.path}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise ClientError(
                f"cannot write local offsets file {self.path}: its lock {lock_path}: {error}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # Closing releases the flock.

    def close(self) -> None:
        """Nothing to release: the file is only open during a load or a commit."""

    def _read(self, path: str) -> dict[str, _Entries]:
        """Return group -> (topic, partition) -> entry document of ``path``, in file order."""
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as error:
            raise ClientError(f"cannot read local offsets file {path}: {error}") from None
        if not text.strip():
            return {}
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ClientError(f"local offsets file {path} is not JSON: {error}") from None
        if not isinstance(document, dict):
            raise ClientError(f"local offsets file {path}: expected a JSON object")
        return {group: _parse_group(path, group, infos) for group, infos in document.items()}

    def _write(self, document: dict[str, list[dict[str, Any]]]) -> None:
        """Replace the file with ``document``: temporary file, fsync, rename, fsync directory."""
        data = json.dumps(document, separators=(",", ":")).encode("utf-8")
        temporary = f"{self.path}.tmp.{os.getpid()}"
        try:
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            fsync_directory(os.path.dirname(os.path.abspath(self.path)))
        except OSError as error:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise ClientError(f"cannot write local offsets file {self.path}: {error}") from None


def _parse_group(path: str, group: str, infos: Any) -> _Entries:
    if infos is None:
        return {}
    if not isinstance(infos, list):
        raise ClientError(f"local offsets file {path}: group {group!r} is not a list")
    entries: _Entries = {}
    for info in infos:
        parsed = _parse_entry(info)
        if parsed is None:
            raise ClientError(
                f"local offsets file {path}: malformed entry {info!r} of group {group!r}"
            )
        topic, partition, offset, msg_id = parsed
        entries[(topic, partition)] = _entry_document(topic, partition, offset, msg_id)
    return entries


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_offset(value: Any) -> int | None:
    """Java reads ``offset`` with ``Long.valueOf(String.valueOf(x))``: a number or its text."""
    if _is_int(value):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        return int(value)
    return None


def _parse_entry(info: Any) -> tuple[str, Partition, int, int] | None:
    """Return ``(topic, partition, offset, msg_id)`` of one stored entry, or None if malformed."""
    if not isinstance(info, dict) or not isinstance(info.get("topic"), str):
        return None
    where = info.get("partition")
    if not isinstance(where, dict):
        return None
    broker_id, number = where.get("brokerId"), where.get("partition")
    offset = _as_offset(info.get("offset"))
    if not (_is_int(broker_id) and _is_int(number)) or offset is None:
        return None
    msg_id = info.get("messageId", -1)
    return info["topic"], Partition(broker_id, number), offset, msg_id if _is_int(msg_id) else -1


def _entry_document(topic: str, partition: Partition, offset: int, msg_id: int) -> dict[str, Any]:
    """One entry in Java's field order (Jackson's ``TopicPartitionRegInfo`` form)."""
    return {
        "topic": topic,
        "partition": {"brokerId": partition.broker_id, "partition": partition.partition},
        "offset": offset,
        "messageId": msg_id,
        "modified": False,
    }


def _file_document(groups: dict[str, _Entries]) -> dict[str, list[dict[str, Any]]]:
    return {group: list(entries.values()) for group, entries in groups.items()}
