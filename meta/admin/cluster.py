"""``meta-admin brokers|topics|partitions|stats``: what is in the cluster.

* ``brokers``: each ``R/brokers/ids/B`` with its master URI, slaves, config checksum and the
  topics it registers (ZooKeeper only).
* ``topics``: each registered topic, the broker nodes registering it with their partition
  counts, and how many partitions producers (``topics-pub``) and consumers (``topics-sub``)
  see (ZooKeeper only).
* ``partitions [TOPIC]``: per broker partition, its min and max offsets and size in bytes
  (``stats json:offsets``, or ``stats offsets`` on a broker that answers text) and the number
  of segments holding data (walked with ``offset``, see
  ``meta.admin.reads``). Partitions registered in ZooKeeper that have no store yet show
  ``-`` offsets and 0 segments. An unreachable broker is reported on stderr, the other rows
  are printed, and the exit status is 2.
* ``stats BROKER``: the ``stats`` general block of one broker (id, or ``HOST:PORT`` without
  ZooKeeper), the puts it refused for their size, and ``stats topics`` with ``--topics``.
  Each is read from the broker's ``stats json:<item>`` document, or parsed from the text item
  on a broker that answers text (a Java broker); the output is the same either way.
  ``stats BROKER ITEM`` prints one other item as the broker answers it
  (``meta.admin.stats_items``).

Single-threaded.
"""

from __future__ import annotations

import argparse
import sys

from meta.admin.client import (
    EXIT_OK,
    EXIT_USAGE,
    AdminClient,
    AdminError,
    BrokerUnreachableError,
    NotFoundError,
    UsageError,
    parse_broker_address,
)
from meta.admin.options import cluster_options
from meta.admin.output import Progress, key_values, table, to_json
from meta.admin.reads import PartitionReader, stats_document, stats_lines
from meta.admin.session import ClusterSession
from meta.admin.stats_items import STATS_ITEMS, item_text, items_help
from meta.status.facts import COUNTER_NAMES


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``brokers``, ``topics``, ``partitions`` and ``stats``."""
    del connection  # These commands find brokers through ZooKeeper, not --broker.
    options = cluster_options()
    brokers = commands.add_parser(
        "brokers",
        parents=[options],
        help="list the brokers registered in ZooKeeper",
        description="List each broker id with its master URI, slaves, config checksum and "
        "the topics it registers, as ZooKeeper holds them.",
    )
    brokers.set_defaults(run=run_brokers, open_session=ClusterSession.from_arguments)
    topics = commands.add_parser(
        "topics",
        parents=[options],
        help="list the topics registered in ZooKeeper",
        description="List each topic with the broker nodes registering it (B-m master, "
        "B-sN slave) and their partition counts, and the number of partitions producers "
        "(topics-pub) and consumers (topics-sub) see.",
    )
    topics.set_defaults(run=run_topics, open_session=ClusterSession.from_arguments)
    partitions = commands.add_parser(
        "partitions",
        parents=[options],
        help="show each partition's offsets, size and segments",
        description="Show, per broker partition, the min and max offsets and the size in "
        "bytes (from 'stats json:offsets', or 'stats offsets' on a broker without JSON stats "
        "such as a Java broker) and the number of segments holding data (walked with the "
        "offset command).",
    )
    partitions.add_argument("topic", nargs="?", metavar="TOPIC", help="only this topic")
    partitions.set_defaults(run=run_partitions, open_session=ClusterSession.from_arguments)
    stats = commands.add_parser(
        "stats",
        parents=[options],
        help="pretty-print a broker's stats",
        description="Print the general block of a broker's 'stats' command, the puts it "
        "refused for their size, and the per-topic lines of 'stats topics' with --topics; "
        "with ITEM, that item of 'stats' instead, as the broker answers it. "
        "A metaq-py broker is read through its JSON items (stats json:general, json:rejected, "
        "json:topics); a broker that answers only text (a Java broker) through the text "
        "items. The output is the same either way.",
    )
    stats.add_argument(
        "broker_name", metavar="BROKER", help="broker id (looked up in ZooKeeper) or HOST:PORT"
    )
    stats.add_argument(
        "item",
        nargs="?",
        metavar="ITEM",
        choices=sorted(STATS_ITEMS),
        help=f"print this item of 'stats' instead, as the broker answers it: {items_help()}",
    )
    stats.add_argument("--topics", action="store_true", help="also print 'stats topics'")
    stats.set_defaults(run=run_stats, open_session=ClusterSession.from_arguments)


# --- brokers and topics ----------------------------------------------------------------------


def run_brokers(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    per_broker: dict[int, list[str]] = {}
    for topic in zk.topics():
        for registration in zk.registrations(topic):
            topics = per_broker.setdefault(registration.broker_id, [])
            if topic not in topics:
                topics.append(topic)
    documents = [
        {
            "broker_id": node.broker_id,
            "master": node.master,
            "slaves": [{"slave_id": n, "uri": node.slaves[n]} for n in sorted(node.slaves)],
            "config_checksum": node.config_checksum,
            "topics": per_broker.get(node.broker_id, []),
        }
        for node in zk.brokers()
    ]
    if arguments.json:
        print(to_json({"zk_root": zk.root, "brokers": documents}))
        return EXIT_OK
    if not documents:
        print(f"no brokers registered under {zk.root}/brokers/ids")
        return EXIT_OK
    rows = [
        [
            document["broker_id"],
            document["master"],
            ",".join(f"{s['slave_id']}={s['uri']}" for s in document["slaves"]) or None,
            document["config_checksum"],
            ",".join(document["topics"]) or None,
        ]
        for document in documents
    ]
    print(table(["BROKER", "MASTER", "SLAVES", "CONFIG_CHECKSUM", "TOPICS"], rows))
    return EXIT_OK


def run_topics(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    documents = []
    for topic in zk.topics():
        nodes = [
            {
                "node": registration.node,
                "broker_id": registration.broker_id,
                "partitions": registration.partitions,
                "publish": registration.publish,
                "subscribe": registration.subscribe,
            }
            for registration in zk.registrations(topic)
        ]
        documents.append(
            {
                "topic": topic,
                "brokers": nodes,
                "publish_partitions": zk.publish_partitions(topic),
                "subscribe_partitions": len(zk.subscribe_partitions(topic)),
            }
        )
    if arguments.json:
        print(to_json({"zk_root": zk.root, "topics": documents}))
        return EXIT_OK
    if not documents:
        print(f"no topics registered under {zk.root}/brokers")
        return EXIT_OK
    rows = [
        [
            document["topic"],
            " ".join(_node_text(node) for node in document["brokers"]) or None,
            document["publish_partitions"],
            document["subscribe_partitions"],
        ]
        for document in documents
    ]
    print(table(["TOPIC", "BROKERS", "PUB_PARTITIONS", "SUB_PARTITIONS"], rows))
    return EXIT_OK


def _node_text(node: dict) -> str:
    """``1-m:4`` (both pub and sub), ``1-m:4(pub)`` or ``1-s0:4(sub)``."""
    count = "?" if node["partitions"] is None else node["partitions"]
    only = "" if node["publish"] == node["subscribe"] else "(pub)" if node["publish"] else "(sub)"
    return f"{node['node']}:{count}{only}"


# --- partitions ------------------------------------------------------------------------------


def run_partitions(arguments: argparse.Namespace, session: ClusterSession) -> int:
    zk = session.zk
    if arguments.topic is not None:
        zk.check_topic(arguments.topic)
    topics = [arguments.topic] if arguments.topic is not None else None
    registered: dict[int, set[tuple[str, int]]] = {}
    for topic in topics if topics is not None else zk.topics():
        for registration in zk.registrations(topic):
            keys = registered.setdefault(registration.broker_id, set())
            keys.update((topic, n) for n in range(registration.partitions or 0))
    status, rows = EXIT_OK, []
    for node in zk.brokers():
        try:
            rows += _broker_partitions(session, node.broker_id, topics, registered)
        except (BrokerUnreachableError, NotFoundError) as error:
            print(f"meta-admin: broker {node.broker_id} left out: {error}", file=sys.stderr)
            status = EXIT_USAGE
    rows.sort(key=lambda row: (row["topic"], row["broker_id"], row["partition"]))
    if arguments.json:
        print(to_json({"zk_root": zk.root, "partitions": rows}))
        return status
    headers = ["TOPIC", "PARTITION", "MIN_OFFSET", "MAX_OFFSET", "SIZE_BYTES", "SEGMENTS"]
    lines = [
        [
            row["topic"],
            f"{row['broker_id']}-{row['partition']}",
            row["min_offset"],
            row["max_offset"],
            row["size_bytes"],
            row["segments"],
        ]
        for row in rows
    ]
    print(table(headers, lines) if lines else "no partitions")
    return status


def _broker_partitions(
    session: ClusterSession,
    broker_id: int,
    topics: list[str] | None,
    registered: dict[int, set[tuple[str, int]]],
) -> list[dict]:
    """The partition rows of one broker: its stores (of ``topics``; None: all), then the
    registered partitions without one."""
    stores = {
        key: store
        for key, store in session.partition_stats(broker_id).items()
        if topics is None or key[0] in topics
    }
    client = session.broker_client(broker_id)
    rows = []
    with Progress(f"broker {broker_id}: walking segments", len(stores)) as progress:
        for (topic, partition), store in sorted(stores.items()):
            label = f"{topic} {broker_id}-{partition}"
            reader = PartitionReader(client, topic, partition, label)
            starts = reader.segment_starts(store.min_offset, store.max_offset)
            rows.append(
                _partition_row(
                    topic, broker_id, partition, store.min_offset, store.max_offset, len(starts)
                )
            )
            progress.advance()
    for topic, partition in sorted(registered.get(broker_id, set()) - set(stores)):
        rows.append(_partition_row(topic, broker_id, partition, None, None, 0))
    return rows


def _partition_row(
    topic: str, broker_id: int, partition: int, low: int | None, high: int | None, segments: int
) -> dict:
    size = 0 if low is None or high is None else high - low
    return {
        "topic": topic,
        "broker_id": broker_id,
        "partition": partition,
        "min_offset": low,
        "max_offset": high,
        "size_bytes": size,
        "segments": segments,
    }


# --- stats -----------------------------------------------------------------------------------


TOPIC_FIELDS = ("topic", "partitions", "message_count", "message_bytes")
TOPIC_FIELDS += ("accept_publish", "accept_subscribe")
"""The keys of a ``meta-admin stats --topics`` row."""

GENERAL_FROM_JSON = {
    "uptime": lambda document: int(document["uptime_seconds"]),
    "version": lambda document: document["wire_version"],
    "slave": lambda document: document["role"] != "master",
    "curr_connections": lambda document: document["connections"],
}
"""General block names whose ``stats json:general`` fact has another name or unit."""

GENERAL_NAMES = ("pid", "broker_id", "port", "uptime", "version", "slave", "curr_connections")
GENERAL_NAMES += ("threads", "counters", "total_messages", "topics", "config_checksum")
"""The text general block's names in its order; ``counters`` stands for the command counters."""


def general_block(client: AdminClient) -> list[tuple[str, str]]:
    """The general block as name/value pairs, the same from ``stats json:general`` as from the
    text item (a Java broker's)."""
    document = stats_document(client, "general")
    if document is None:
        return [line.partition(" ")[::2] for line in stats_lines(client, "")]
    pairs = []
    for name in GENERAL_NAMES:
        if name == "counters":
            counters = document["counters"]
            pairs += [(counter, _text(counters.get(counter))) for counter in COUNTER_NAMES]
            continue
        fact = GENERAL_FROM_JSON.get(name, lambda document, name=name: document[name])
        pairs.append((name, _text(fact(document))))
    return pairs


def _text(value: object) -> str:
    """A JSON value as the text items write it: ``true``/``false``, ``-`` for none."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "-" if value is None else str(value)


def rejected_puts(client: AdminClient) -> list[tuple[str, str]]:
    """metaq-py's ``stats json:rejected`` or ``stats rejected`` (puts refused for their size) as
    name/value pairs; none from a Java broker, which reads both items as topic names."""
    document = stats_document(client, "rejected")
    if document is not None:
        names = ("put_too_large", "put_too_large_last", "max_message_size")
        return [(name, _text(document[name])) for name in names]
    lines = stats_lines(client, "rejected")
    if not lines or not lines[0].startswith("put_too_large "):
        return []
    return [line.partition(" ")[::2] for line in lines]


def run_stats(arguments: argparse.Namespace, session: ClusterSession) -> int:
    client = _stats_client(session, arguments.broker_name)
    if arguments.item is not None:
        if arguments.topics:
            raise UsageError("--topics goes with the general block, not with an ITEM")
        text = item_text(client, arguments.item)
        if arguments.json:
            print(to_json({"broker": client.name, "item": arguments.item, "text": text}))
        else:
            print(f"broker {client.name}")
            print(text)
        return EXIT_OK
    # "name value" lines; the table shows the values as the broker wrote them.
    general = general_block(client)
    rejected = rejected_puts(client)
    topics = topic_rows(client) if arguments.topics else None
    if arguments.json:
        document: dict = {"broker": client.name, "general": {n: _number(v) for n, v in general}}
        if rejected:
            document["rejected"] = {n: _number(v) for n, v in rejected}
        if topics is not None:
            document["topics"] = topics
        print(to_json(document))
        return EXIT_OK
    print(f"broker {client.name}")
    print(key_values(general))
    if rejected:
        print()
        print(key_values(rejected))
    if topics:
        headers = ["TOPIC", "PARTITIONS", "MESSAGES", "BYTES", "ACCEPT_PUBLISH", "ACCEPT_SUBSCRIBE"]
        rows = [
            [
                t["topic"],
                t["partitions"],
                t["message_count"],
                t["message_bytes"],
                t["accept_publish"],
                t["accept_subscribe"],
            ]
            for t in topics
        ]
        print()
        print(table(headers, rows))
    elif topics is not None:
        print("\nno topics")
    return EXIT_OK


def _stats_client(session: ClusterSession, name: str) -> AdminClient:
    """The broker named by id (through ZooKeeper) or by ``HOST:PORT``."""
    if name.isdigit():
        return session.broker_client(int(name))
    try:
        host, port = parse_broker_address(name)
    except UsageError:
        raise UsageError(
            f"invalid broker {name!r}: expected a broker id (e.g. 0) or HOST:PORT"
        ) from None
    return session.client_at(host, port)


def _number(text: str) -> object:
    if text.lstrip("-").isdigit():
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    return text


def topic_rows(client: AdminClient) -> list[dict]:
    """Per-topic rows from ``stats json:topics``, or from the text ``stats topics`` lines."""
    document = stats_document(client, "topics")
    if document is None:
        return [_topic_stats(line) for line in stats_lines(client, "topics")]
    rows = [
        {
            "topic": topic["topic"],
            "partitions": topic["partitions"],
            "message_count": topic["messages"],
            "message_bytes": topic["bytes"],
            "accept_publish": topic["accept_publish"],
            "accept_subscribe": topic["accept_subscribe"],
        }
        for topic in document["topics"]
    ]
    # A broker that lists its configured topics among "topics" (with their configured
    # partitions, empty) names them in "without_stores" too; older ones only there.
    listed = {row["topic"] for row in rows}
    unlisted = [name for name in document["without_stores"] if name not in listed]
    return rows + [_topic_without_stores(name) for name in unlisted]


def _topic_without_stores(name: str) -> dict:
    """The row of a configured topic without stores (``<topic> *Empty*`` in the text item)."""
    row: dict = dict.fromkeys(TOPIC_FIELDS)
    return {**row, "topic": name, "partitions": 0}


def _topic_stats(line: str) -> dict:
    """One ``stats topics`` line: ``<topic> partitions <n> message_count <n> message_bytes
    <n> accept_publish <b> accept_subscribe <b>``, or ``<topic> *Empty*``."""
    tokens = line.split(" ")
    document: dict = {**dict.fromkeys(TOPIC_FIELDS), "topic": tokens[0]}
    pairs = tokens[1:]
    if len(pairs) % 2:
        if pairs == ["*Empty*"]:
            return _topic_without_stores(tokens[0])
        raise AdminError(f"unexpected 'stats topics' line {line!r}")
    for name, value in zip(pairs[::2], pairs[1::2], strict=True):
        if name in document:
            document[name] = _number(value)
    return document
