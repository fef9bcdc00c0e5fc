"""``meta-admin stats BROKER ITEM``: one ``stats <item>`` of a broker, as the broker answers it.

``STATS_ITEMS`` names the items a metaq-py broker answers besides its general block, with
what each holds; ``meta-admin stats --help`` lists them from here. ``reset`` (it zeroes the
realtime counters) and per-topic items are left to the wire: this command only reads.

``slave`` and ``sync`` are answered only by the roles that have them (an async slave; a samsa
master or gregor slave). Any other broker reads the word as a topic name, as a Java broker
does, and answers that topic's block (``resultCode 1``, unknown topic): that answer is
refused here (exit 1) with the role the item needs, rather than printed as if it were the
item.

Single-threaded.
"""

from __future__ import annotations

from meta.admin.client import AdminClient, BrokerRefusedError
from meta.admin.reads import stats_lines
from meta.status.facts import is_unknown_topic_block

STATS_ITEMS: dict[str, str] = {
    "topics": "partitions, messages and bytes per topic",
    "offsets": "min and max offsets per partition",
    "realtime": "put and get rates and timings since the last reset",
    "config": "the broker's server.ini, as on its disk",
    "transactions": "the open and prepared transactions",
    "rejected": "the puts refused for their size",
    "http": "the requests of the HTTP protocol, with start --http",
    "slave": "on an async slave, its copy of each partition and its lag",
    "sync": "on a samsa master or gregor slave, the synchronous replication state",
    "help": "the broker's own list of items",
}
"""The items ``meta-admin stats BROKER ITEM`` asks for, with what each answers."""

ROLE_ITEMS = {"slave": "an async slave", "sync": "a samsa master or a gregor slave"}
"""The items only one role answers, and that role."""


def items_help() -> str:
    """``ITEM (what it holds)`` for each item, for ``--help``."""
    return ", ".join(f"{item} ({meaning})" for item, meaning in STATS_ITEMS.items())


def item_text(client: AdminClient, item: str) -> str:
    """The broker's answer to ``stats <item>``: its lines, or the raw file for ``config``.

    Raises:
        BrokerRefusedError: the broker refused the item, or (``slave``, ``sync``) does not
            have the role that answers it.
    """
    if item == "config":
        reply = client.stats(item)
        text = reply.body.decode("utf-8", "replace")
        if reply.code != 200:
            raise BrokerRefusedError(
                f"broker {client.name} answered 'stats config' with result {reply.code}: "
                f"{text.strip()[:200]!r}"
            )
        return text.rstrip("\n")
    lines = stats_lines(client, item)
    if item in ROLE_ITEMS and lines[:1] == [item] and is_unknown_topic_block(lines):
        raise BrokerRefusedError(
            f"broker {client.name} is not {ROLE_ITEMS[item]}: it reads 'stats {item}' as a "
            "topic name"
        )
    return "\n".join(lines)
