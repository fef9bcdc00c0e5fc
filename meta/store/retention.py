"""Retention: the ``deletePolicy`` work.

When it runs is the ``deleteWhen`` Quartz cron of ``meta.config.cron``. What lives here:
    * ``eligible_count`` (pure): how many of a partition's oldest segments a policy may process.
    * ``retain_partition``: applies a ``DeletePolicySpec`` to one partition (delete, rename
      ``X.meta`` to ``X.meta.arc``, or compress it to ``X.meta.zip``), oldest segment first.
      A ``get`` reply still streaming a dropped segment ends its connection (server protocol).
    * ``write_zip``: the compressed archive, written atomically (temporary file, fsync,
      rename, fsync of the directory) on a worker thread.

Invariants:
    * The last (active) segment is never processed, nor a segment with bytes not yet fsynced
      (a flush batch may still hold its descriptor), nor any segment after one that is kept:
      only a prefix of the oldest segments goes, so the log stays contiguous and ``min_offset``
      only grows. (Java also processes old segments behind a young one; we do not.)
    * A segment leaves its ``PartitionLog`` only after its file was deleted, renamed, or its
      archive is durable; a failure leaves it (and every newer one) in the log.
    * A ``.zip`` exists under its final name only when complete and fsynced.

Thread affinity: ``eligible_count`` is pure and thread-safe;
``retain_partition`` runs on the reactor thread and hands ``write_zip`` to an executor.
"""

from __future__ import annotations

import logging
import os
import threading
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from meta.config.grammars import DeletePolicySpec
from meta.store.files import Files

logger = logging.getLogger("meta.store")

ZIP_CHUNK_BYTES = 1024 * 1024  # a segment is compressed in pieces of this size
ARCHIVE_SUFFIX = ".arc"
ZIP_SUFFIX = ".zip"
TEMPORARY_SUFFIX = ".tmp"

# --- Which segments go --------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentFacts:
    """What eligibility looks at for one segment."""

    path: str
    size_bytes: int
    modified_s: float | None  # the file's mtime; None when it could not be read
    durable: bool  # every written byte fsynced (no flush batch holds it)


def eligible_count(facts: Iterable[SegmentFacts], now_s: float, retention_ms: int) -> int:
    """How many of the oldest segments a policy may process now.

    A segment is eligible when it is not the last one, is durable, and
    ``now - mtime > retention`` (strictly, in milliseconds, as Java). Counting stops at the
    first segment that is not eligible, so only a prefix goes.

    Args:
        facts: the partition's segments, oldest first (may be a lazy iterator).
        now_s: the current time, epoch seconds.
        retention_ms: the policy's retention time.
    """
    count = 0
    previous: SegmentFacts | None = None
    for fact in facts:
        if previous is not None:  # ``previous`` is not the last segment
            if not _old_enough(previous, now_s, retention_ms):
                break
            count += 1
        previous = fact
    return count


def _old_enough(fact: SegmentFacts, now_s: float, retention_ms: int) -> bool:
    if not fact.durable or fact.modified_s is None:
        return False
    return (now_s - fact.modified_s) * 1000 > retention_ms


def segment_facts(segments: Iterable[Any]) -> Iterator[SegmentFacts]:
    """Lazily stat each ``Segment`` (reactor thread; one ``stat`` per segment looked at)."""
    for segment in segments:
        try:
            modified_s: float | None = os.stat(segment.path).st_mtime
        except OSError as error:
            logger.warning("retention cannot read the age of %s: %s", segment.path, error)
            modified_s = None
        durable = segment.flushed_size == segment.written_size
        yield SegmentFacts(segment.path, segment.written_size, modified_s, durable)


# --- Doing it -----------------------------------------------------------------------------


class RetentionStopped(Exception):
    """The store closed while an archive was being written; the segment stays."""


def archive_path(segment_path: str, compress: bool) -> str:
    """``X.meta.arc`` or ``X.meta.zip`` (ignored when segments are loaded)."""
    return segment_path + (ZIP_SUFFIX if compress else ARCHIVE_SUFFIX)


def write_zip(
    files: Files, source_path: str, size_bytes: int, target_path: str, stop: threading.Event
) -> None:
    """Worker thread: write ``target_path``, a zip holding ``source_path``'s first ``size_bytes``.

    The one entry is named after the segment file (``X.meta``) and deflated. Written as
    ``<target>.tmp``, fsynced, renamed, then the directory fsynced, so a ``.zip`` is complete
    whenever it exists. The temporary file is removed on any failure.

    Raises:
        OSError: reading, writing, fsync or rename failed.
        RetentionStopped: ``stop`` was set (the store is closing).
    """
    temporary = target_path + TEMPORARY_SUFFIX
    try:
        _write_zip_file(source_path, size_bytes, temporary, stop)
        files.rename(temporary, target_path)
        files.fsync_directory(os.path.dirname(target_path) or ".")
    except BaseException:
        try:
            os.remove(temporary)
        except OSError:
            pass  # never created, or already renamed
        raise


def _write_zip_file(
    source_path: str, size_bytes: int, temporary: str, stop: threading.Event
) -> None:
    info = zipfile.ZipInfo.from_file(
        source_path, os.path.basename(source_path), strict_timestamps=False
    )
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(temporary, "wb") as raw:
        with (
            zipfile.ZipFile(raw, "w") as archive,
            open(source_path, "rb") as source,
            archive.open(info, "w", force_zip64=size_bytes >= zipfile.ZIP64_LIMIT) as entry,
        ):
            left = size_bytes
            while left > 0:
                if stop.is_set():
                    raise RetentionStopped(f"store closing; {source_path} not archived")
                chunk = source.read(min(left, ZIP_CHUNK_BYTES))
                if not chunk:
                    raise OSError(f"{source_path} is shorter than its {size_bytes} bytes")
                entry.write(chunk)
                left -= len(chunk)
        raw.flush()
        os.fsync(raw.fileno())


async def retain_partition(
    log: Any,
    spec: DeletePolicySpec,
    now_s: float,
    files: Files,
    executor: Callable[[Callable[[], Any]], Any],
    stop: threading.Event,
) -> int:
    """Apply ``spec`` to the eligible oldest segments of ``log`` (a ``PartitionLog``).

    Reactor thread. Deletion and renaming happen here (quick); compression goes to
    ``executor`` (``callable(work) -> Deferred``) and the segment leaves the log only when
    its archive is durable. Logs one INFO line per segment.

    Returns:
        How many segments were processed.

    Raises:
        OSError: a file operation failed; that segment and newer ones stay in the log.
        RetentionStopped: ``stop`` was set while compressing.
    """
    facts: list[SegmentFacts] = []

    def looked_at() -> Iterator[SegmentFacts]:
        for fact in segment_facts(log.segments):
            facts.append(fact)
            yield fact

    eligible = eligible_count(looked_at(), now_s, spec.retention_ms)
    done = 0
    for fact in facts[:eligible]:
        path = fact.path
        if spec.name == "delete":
            files.remove(path)
            action = f"deleted segment {path}"
        else:
            target = archive_path(path, spec.compress)
            if spec.compress:
                await executor(partial(write_zip, files, path, fact.size_bytes, target, stop))
                if stop.is_set():
                    break  # the store closed meanwhile; the segment stays (redone next start)
                files.remove(path)
            else:
                files.rename(path, target)
            action = f"archived segment {path} to {target}"
        segment = log.drop_oldest_segment()
        assert segment.path == path
        segment.close()
        done += 1
        logger.info(
            "retention: %s (%d bytes, %s old, retention %s); %s now starts at offset %d",
            action,
            fact.size_bytes,
            _age_text(now_s - (fact.modified_s or now_s)),
            _age_text(spec.retention_ms / 1000),
            log.name,
            log.min_offset,
        )
    return done


def _age_text(age_s: float) -> str:
    if age_s < 120:
        return f"{age_s:.1f} s"
    if age_s < 7200:
        return f"{age_s / 60:.1f} min"
    return f"{age_s / 3600:.1f} h"


def thread_pool_executor(reactor: Any) -> Callable[[Callable[[], Any]], Any]:
    """An executor running work on the reactor's thread pool (``deferToThreadPool``)."""
    from twisted.internet.threads import deferToThreadPool

    def run(work: Callable[[], Any]) -> Any:
        return deferToThreadPool(reactor, reactor.getThreadPool(), work)

    return run
