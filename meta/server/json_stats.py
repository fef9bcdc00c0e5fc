"""The ``stats json:<item>`` items: one JSON document per item, for tools that read stats.

``stats json:general``, ``json:topics``, ``json:offsets``, ``json:slave``,
``json:transactions`` and ``json:rejected`` answer ``result 200 <length> <opaque>\\r\\n``
followed by one JSON object in ASCII (no ``STATS``/``END`` lines, no trailing newline), built
by ``meta.status.facts``, the functions behind the dashboard's JSON API, so both show the
same facts under the same names. Every document names its item (``"item"``).

Why this item name: a Java broker answers any item it does not know as a topic name (the
``STATS`` text block with ``resultCode 1``). A ``:`` never appears in a legal topic name
(docs/compatibility.md), so ``json:...`` cannot shadow a topic on either broker, and a client tells
the two answers apart by the body's first bytes (``{`` here, ``STATS`` from Java). An
unknown ``json:`` item answers 400 with a text naming the known ones.

Reactor thread only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from meta.status import facts
from meta.status.json_items import NAMES, PREFIX

RESULT_BAD_REQUEST = 400


def _general(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return facts.general_facts(broker, started_at_s, now_s)


def _topics(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return {
        "topics": facts.topics_facts(broker),
        "without_stores": facts.topics_without_stores(broker),
    }


def _offsets(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return {"partitions": facts.partitions_facts(broker)}


def _slave(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return facts.replication_facts(broker)


def _transactions(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return {"transactions": facts.transactions_facts(broker)}


def _rejected(broker: Any, started_at_s: float, now_s: float) -> dict[str, Any]:
    return facts.rejected_facts(broker)


DOCUMENTS: dict[str, Callable[[Any, float, float], dict[str, Any]]] = {
    "general": _general,
    "topics": _topics,
    "offsets": _offsets,
    "slave": _slave,
    "transactions": _transactions,
    "rejected": _rejected,
}
"""The ``json:`` items and the function building each document."""

assert tuple(DOCUMENTS) == NAMES


def is_json_item(item: str) -> bool:
    """Whether ``stats <item>`` is answered by ``render_json_stats``."""
    return item.startswith(PREFIX)


def render_json_stats(
    item: str, broker: Any, started_at_s: float, now_s: float
) -> tuple[int, bytes]:
    """Answer ``stats json:<name>``.

    Args:
        item: the whole item token, ``json:`` included.
        broker: the ``Broker`` (read through ``meta.status.facts``).
        started_at_s: when the broker started, on the clock of ``now_s``.
        now_s: the current time in seconds.

    Returns:
        ``(200, JSON object)``, or ``(400, text)`` for an unknown name.
    """
    name = item[len(PREFIX) :]
    build = DOCUMENTS.get(name)
    if build is None:
        known = ", ".join(PREFIX + known_name for known_name in DOCUMENTS)
        return RESULT_BAD_REQUEST, f"unknown stats item {item}; known: {known}".encode()
    document = {"item": name, **build(broker, started_at_s, now_s)}
    return 200, json_body(document)


def json_body(document: dict[str, Any]) -> bytes:
    """The bytes of one document: compact JSON, keys sorted, ASCII (others as ``\\u`` escapes,
    so any text, even an undecodable file name in an error, encodes)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("ascii")
