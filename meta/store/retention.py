"""Retention (spec 4.8, zk spec 5): Quartz ``deleteWhen`` times and the ``deletePolicy`` work.

What lives here:
    * ``QuartzCron``: a Quartz cron expression (``sec min hour day-of-month month day-of-week
      [year]``) translated into a croniter expression; ``next_fire_s`` is the next fire time.
      Quartz and croniter differ: croniter puts seconds after day-of-week, numbers the days
      of the week 0-6 from Sunday (Quartz: 1-7 from ``SUN``), does not check Quartz's rule
      that exactly one day field is ``?``, reads an equal range such as ``5-5`` as the whole
      cycle, and spells "last Friday" ``L5`` (Quartz ``6L``). So every plain field is expanded
      here into the explicit list of its values and only the date arithmetic is croniter's.
      Quartz's ``LW`` and ``L-n`` have no croniter form and are refused.
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

Thread affinity: ``QuartzCron`` and ``eligible_count`` are pure and thread-safe;
``retain_partition`` runs on the reactor thread and hands ``write_zip`` to an executor.
"""

from __future__ import annotations

import logging
import os
import threading
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import partial
from typing import Any

from croniter import CroniterError, croniter

from meta.config_values import DeletePolicySpec
from meta.store.files import Files

logger = logging.getLogger("meta.store")

CRON_CHARS_MAX = 256  # a longer deleteWhen is refused before it is parsed
ZIP_CHUNK_BYTES = 1024 * 1024  # a segment is compressed in pieces of this size
ARCHIVE_SUFFIX = ".arc"
ZIP_SUFFIX = ".zip"
TEMPORARY_SUFFIX = ".tmp"

# (name, lowest, highest) of the Quartz fields, in Quartz order.
_FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 1, 7),
    ("year", 1970, 2099),
)
_DAY_OF_MONTH = 3
_MONTH = 4
_DAY_OF_WEEK = 5
_MONTH_NAMES = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
_DAY_NAMES = "SUN MON TUE WED THU FRI SAT".split()
_NAMES = {
    _MONTH: {name: number for number, name in enumerate(_MONTH_NAMES, 1)},
    _DAY_OF_WEEK: {name: number for number, name in enumerate(_DAY_NAMES, 1)},
}


class CronError(ValueError):
    """A ``deleteWhen`` that is not a Quartz cron expression this broker can run.

    Attributes:
        expression: the text as given.
        reason: what is wrong, without the expression (the config error adds its own context).
    """

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"invalid Quartz cron expression {expression!r}: {reason}")
        self.expression = expression
        self.reason = reason


class QuartzCron:
    """A validated Quartz cron expression and its croniter translation.

    Args:
        expression: e.g. ``0 0 6,18 * * ?`` (06:00:00 and 18:00:00 every day).
        tz: the time zone the fields are read in; None is the local time zone, as Quartz
            uses the JVM's default zone.

    Raises:
        CronError: malformed, or a Quartz feature croniter cannot express (``LW``, ``L-n``).
    """

    def __init__(self, expression: str, tz: tzinfo | None = None) -> None:
        self.expression = expression.strip()
        self.croniter_expression = to_croniter(self.expression)
        self._tz = tz

    def next_fire_s(self, after_s: float) -> float | None:
        """The first fire time strictly after ``after_s`` (epoch seconds); None if none is left."""
        start = datetime.fromtimestamp(after_s, self._tz)
        try:
            fire = croniter(self.croniter_expression, start).get_next(datetime)
        except CroniterError:  # CroniterBadDateError: e.g. 30 February, or only past years
            return None
        return fire.timestamp()

    def __repr__(self) -> str:
        return f"QuartzCron({self.expression!r})"


def to_croniter(expression: str) -> str:
    """Translate a Quartz expression into croniter's ``min hour dom month dow sec [year]``.

    Raises:
        CronError: the expression is malformed.
    """
    text = expression.strip()
    if len(text) > CRON_CHARS_MAX:
        raise CronError(text[:40] + "...", f"longer than {CRON_CHARS_MAX} characters")
    fields = text.upper().split()
    if len(fields) not in (6, 7):
        raise CronError(
            text,
            "a Quartz cron expression needs 6 or 7 fields "
            f"(sec min hour day-of-month month day-of-week [year]), got {len(fields)}",
        )
    converted = [_convert_field(text, index, field) for index, field in enumerate(fields)]
    if (fields[_DAY_OF_MONTH] == "?") == (fields[_DAY_OF_WEEK] == "?"):
        raise CronError(text, "exactly one of day-of-month and day-of-week must be '?'")
    second, minute, hour, day_of_month, month, day_of_week, *year = converted
    result = " ".join([minute, hour, day_of_month, month, day_of_week, second, *year])
    try:
        croniter(result)
    except CroniterError as error:  # a combination croniter refuses
        raise CronError(text, str(error)) from None
    return result


def _convert_field(text: str, index: int, field: str) -> str:
    """One Quartz field as croniter text: ``*``, a sorted list, or a day special."""
    name, low, high = _FIELDS[index]
    if field == "?":
        if index not in (_DAY_OF_MONTH, _DAY_OF_WEEK):
            raise CronError(text, f"'?' is only allowed in day-of-month or day-of-week, not {name}")
        return "*"
    if _is_special(index, field):
        return _convert_special(text, index, field)
    values: set[int] = set()
    for item in field.split(","):
        values.update(_expand_item(text, index, item))
    if values == set(range(low, high + 1)):
        return "*"
    if index == _DAY_OF_WEEK:
        values = {value - 1 for value in values}  # Quartz SUN=1..SAT=7; croniter SUN=0..SAT=6
    return ",".join(str(value) for value in sorted(values))


def _expand_item(text: str, index: int, item: str) -> list[int]:
    """Expand ``*``, ``N``, ``A-B`` (wrapping when A > B, as Quartz) with an optional ``/step``."""
    name, low, high = _FIELDS[index]
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _number(text, index, step_text, 1, high - low + 1, "step")
    if base == "*" or (slash and base == ""):  # Quartz reads "/5" as "0/5"
        first, last = low, high
    elif "-" in base:
        first_text, _, last_text = base.partition("-")
        first, last = _value(text, index, first_text), _value(text, index, last_text)
    else:
        first = _value(text, index, base)
        last = high if slash else first  # "5/15": from 5 to the end of the field
    if first <= last:
        return list(range(first, last + 1, step))
    wrapped = [*range(first, high + 1), *range(low, last + 1)]
    return wrapped[::step]


def _value(text: str, index: int, token: str) -> int:
    """A number of the field, or a month / day-of-week name."""
    name, low, high = _FIELDS[index]
    names = _NAMES.get(index, {})
    if token in names:
        return names[token]
    return _number(text, index, token, low, high, "value")


def _number(text: str, index: int, token: str, low: int, high: int, what: str) -> int:
    name = _FIELDS[index][0]
    if not (token.isascii() and token.isdigit()) or not low <= int(token) <= high:
        hint = " or a name" if index in _NAMES and what == "value" else ""
        raise CronError(text, f"{name} {what} {token!r} is not a number {low}-{high}{hint}")
    return int(token)


def _is_special(index: int, field: str) -> bool:
    """Whether a day field uses ``L``, ``W`` or ``#`` (``WED`` and ``JUL`` are names)."""
    if index == _DAY_OF_MONTH:
        return "L" in field or "W" in field
    return index == _DAY_OF_WEEK and ("L" in field or "#" in field)


def _convert_special(text: str, index: int, field: str) -> str:
    """``L`` and ``nW`` (day-of-month); ``L``, ``nL`` and ``n#k`` (day-of-week)."""
    name = _FIELDS[index][0]
    if "," in field:
        raise CronError(text, f"'L', 'W' and '#' cannot be combined with a list in {name}")
    if index == _DAY_OF_MONTH:
        if field == "L":
            return "l"
        if field.endswith("W") and field != "LW":
            return f"{_number(text, index, field[:-1], 1, 31, 'value')}w"
        raise CronError(text, f"day-of-month {field!r} is not supported (use L or nW)")
    if index == _DAY_OF_WEEK:
        if field == "L":
            return "6"  # Quartz: a bare L in day-of-week is the last day of the week, SAT
        if field.endswith("L"):
            return f"l{_value(text, index, field[:-1]) - 1}"
        day, hash_mark, nth = field.partition("#")
        if hash_mark:
            return f"{_value(text, index, day) - 1}#{_number(text, index, nth, 1, 5, 'nth')}"
    raise CronError(text, f"day-of-week {field!r} is not supported (use L, nL or n#k)")


# --- Which segments go --------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentFacts:
    """What eligibility looks at for one segment."""

    path: str
    size_bytes: int
    modified_s: float | None  # the file's mtime; None when it could not be read
    durable: bool  # every written byte fsynced (no flush batch holds it)


def eligible_count(facts: Iterable[SegmentFacts], now_s: float, retention_ms: int) -> int:
    """How many of the oldest segments a policy may process now (spec 4.8).

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
    """``X.meta.arc`` or ``X.meta.zip`` (spec 4.8; ignored when segments are loaded)."""
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
