"""Offsets of the ``metaq`` streaming source: Kafka-style JSON and the arithmetic on them.

A stream offset is the JSON document ``{"topic": {"B-P": offset}}``: for every partition the
stream knows, the byte offset where its next batch starts. Every offset in a document is a
message start (or a partition's end), so the next batch can read from it directly.

Spark compares offsets as JSON text, so ``to_document`` always emits topics and partitions
in one order (topics by name, partitions numerically): equal positions give equal text.

Pure: no Spark, no sockets. Thread-safe: functions of their arguments only.
"""

from __future__ import annotations

from collections.abc import Mapping

from meta.client.cluster import Partition
from meta.errors import ClientError

Key = tuple[str, Partition]
"""(topic, partition): one partition of one topic."""


def to_document(offsets: Mapping[Key, int]) -> dict[str, dict[str, int]]:
    """``{(topic, partition): offset}`` -> ``{"topic": {"B-P": offset}}``, in a fixed order."""
    document: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        document.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return document


def from_document(document: object, what: str = "stream offset") -> dict[Key, int]:
    """The inverse of ``to_document``.

    Raises:
        ClientError: the document is not ``{"topic": {"B-P": non-negative int}}``.
    """
    if not isinstance(document, Mapping):
        raise ClientError(f"malformed {what} {document!r}: expected {{'topic': {{'B-P': n}}}}")
    offsets: dict[Key, int] = {}
    for topic, partitions in document.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise ClientError(f"malformed {what} {document!r}: topic {topic!r}")
        for text, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ClientError(f"malformed {what} {document!r}: offset of {topic}/{text}")
            offsets[(topic, Partition.parse(text))] = offset
    return offsets


def advanced(start: Mapping[Key, int], ends: Mapping[Key, int]) -> dict[Key, int]:
    """The next end offset: every partition of ``start`` and ``ends``, never moving back.

    A partition known to ``start`` but missing from ``ends`` (its broker is away) keeps its
    offset; a partition new in ``ends`` takes its end.
    """
    merged = dict(start)
    for key, end in ends.items():
        merged[key] = max(merged.get(key, end), end)
    return merged


def byte_cuts(begin: Mapping[Key, int], ends: Mapping[Key, int], max_bytes: int) -> dict[Key, int]:
    """Where to cut each partition so a batch holds about ``max_bytes`` bytes in all.

    The budget is shared in proportion to each partition's backlog (as Kafka's source shares
    ``maxOffsetsPerTrigger``), with at least one byte each, so every partition with a backlog
    advances by at least one message once the cut is moved to a message boundary.

    Args:
        begin: where each partition of ``ends`` starts (its start offset or earliest).
        ends: where each partition ends now.
        max_bytes: the batch's byte budget, > 0.

    Returns:
        ``{key: cut}`` for the partitions to cut, ``begin < cut < end``; ``{}`` when the whole
        backlog fits.
    """
    assert max_bytes > 0
    backlog = {key: ends[key] - begin[key] for key in ends if ends[key] > begin[key]}
    total = sum(backlog.values())
    if total <= max_bytes:
        return {}
    cuts = {}
    for key, size in backlog.items():
        budget = max(1, size * max_bytes // total)
        if budget < size:
            cuts[key] = begin[key] + budget
    return cuts
