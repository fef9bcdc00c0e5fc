"""Cluster identifiers and the pure rules clients use to read the cluster out of ZooKeeper.

What lives here:

- ``Partition`` (``B-P``) and ``BrokerAddress`` (``meta://host:port[?slaveId=N]``);
- the producer partition list (``topics-pub`` ``B-m`` children, sorted numerically) and the
  consumer partition list (every ``topics-sub`` child, sorted as Java strings);
- the ``<msgId>-<offset>`` offset node text, consumer id strings, group validation and the
  broadcast group name.

Invariants: nothing here talks to ZooKeeper; callers pass the children (name -> node data) they
read. Sorting and parsing follow the Java client exactly, because Java and Python consumers in
one group must compute the same assignment, or they fight over owner nodes.
``local_host`` reads this machine's interface addresses (``meta.local_address``) and sends
nothing.
Thread-safe: pure functions and immutable values.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from meta import local_address
from meta.config import validate_topic_name
from meta.errors import ClientError, InvalidGroupError
from meta.protocol.commands import LONG_MAX

log = logging.getLogger("meta.client")

RANDOM_PARTITION_TEXT = "-1--1"
"""Java's "random partition" (broker -1, partition -1): the broker picks one."""

PARTITIONS_PER_BROKER_MAX = 65_536
"""Our sanity bound on a topic node's ``numParts``; a larger value is treated as corrupt."""

INVALID_GROUP_CHARACTERS = "~!#$%^&*()+=`'\",;/?[]<>.: "
"""Characters Java's ``checkConsumerConfig`` refuses in a group name."""

_DIGITS_RE = re.compile(r"[0-9]+")
_PARTITION_RE = re.compile(r"([0-9]+)-([0-9]+)")
_LONG_RE = re.compile(r"-?[0-9]+")
_LONG_MIN = -(2**63)
_PORT_MAX = 65_535


def java_string_key(text: str) -> bytes:
    """Sort key that orders strings as Java's ``String.compareTo`` does (UTF-16 code units).

    Python compares code points; the two differ only when characters above U+FFFF meet
    characters in U+E000..U+FFFF, but the assignment must match Java's in every case.
    """
    return text.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, order=True, slots=True)
class Partition:
    """One partition of one broker. Ordering is numeric (broker, partition): Java's producer order.

    ``str(partition)`` is the ``B-P`` text used in ZooKeeper paths and ``parse`` reads it back.
    """

    broker_id: int
    partition: int

    def __str__(self) -> str:
        return f"{self.broker_id}-{self.partition}"

    @classmethod
    def parse(cls, text: str) -> Partition:
        """Parse ``B-P`` (non-negative decimal integers) or the special ``-1--1``.

        Raises:
            ClientError: ``text`` is not a partition string.
        """
        if text == RANDOM_PARTITION_TEXT:
            return cls(-1, -1)
        match = _PARTITION_RE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ClientError(f"malformed partition {text!r}: expected <brokerId>-<partition>")
        return cls(int(match.group(1)), int(match.group(2)))


RANDOM_PARTITION = Partition(-1, -1)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where a broker listens. ``slave_id`` is -1 for a master, else the slave's number ``N``.

    ``host`` is stored without IPv6 brackets, ready for ``socket.create_connection``.
    """

    host: str
    port: int
    slave_id: int = -1

    @property
    def uri(self) -> str:
        """``meta://host:port`` (IPv6 hosts bracketed), without the ``slaveId`` query."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"meta://{host}:{self.port}"

    @property
    def is_slave(self) -> bool:
        return self.slave_id >= 0

    @classmethod
    def parse_uri(cls, uri: str) -> BrokerAddress:
        """Parse ``meta://host:port``, ``meta://[v6]:port``, each with an optional ``?slaveId=N``.

        Args:
            uri: a broker node's data, possibly with the ``?slaveId=N`` clients append.

        Raises:
            ClientError: the URI is malformed; the text names it and says why.
        """
        if not isinstance(uri, str) or not uri.startswith("meta://"):
            raise ClientError(f"malformed broker URI {uri!r}: it must start with meta://")
        authority, _, query = uri[len("meta://") :].partition("?")
        if authority.endswith("/"):
            authority = authority[:-1]
        host, port_text = _split_authority(uri, authority)
        if _DIGITS_RE.fullmatch(port_text) is None or not 0 < int(port_text) <= _PORT_MAX:
            raise ClientError(f"malformed broker URI {uri!r}: port must be 1..{_PORT_MAX}")
        return cls(host, int(port_text), _slave_id(uri, query))


def _split_authority(uri: str, authority: str) -> tuple[str, str]:
    """Split ``host:port`` or ``[v6]:port`` into the bare host and the port text."""
    if authority.startswith("["):
        host, bracket, rest = authority[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ClientError(f"malformed broker URI {uri!r}: expected [ipv6]:port")
        port_text = rest[1:]
    else:
        host, _, port_text = authority.rpartition(":")
        if ":" in host:
            raise ClientError(f"malformed broker URI {uri!r}: an IPv6 host needs [brackets]")
    if not host or "/" in host:
        raise ClientError(f"malformed broker URI {uri!r}: no host")
    return host, port_text


def _slave_id(uri: str, query: str) -> int:
    """Return the ``slaveId`` of a query string (-1 when absent); other keys are ignored."""
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key == "slaveId":
            if _LONG_RE.fullmatch(value) is None:
                raise ClientError(f"malformed broker URI {uri!r}: slaveId must be an integer")
            return int(value)
    return -1


def _split_child(name: str) -> list[str]:
    """Split a topic child name on ``-`` dropping empty parts, like commons-lang ``split``."""
    return [part for part in name.split("-") if part]


def _num_parts(where: str, name: str, data: bytes | str | None) -> int | None:
    """Return ``numParts`` of a topic node's JSON, or None (with a warning) when unusable."""
    try:
        document = json.loads(data) if data else None
    except (ValueError, TypeError) as error:
        log.warning("skipping %s child %r: bad JSON %r (%s)", where, name, data, error)
        return None
    count = document.get("numParts") if isinstance(document, dict) else None
    if isinstance(count, bool) or not isinstance(count, int):
        log.warning("skipping %s child %r: no integer numParts in %r", where, name, data)
        return None
    if count > PARTITIONS_PER_BROKER_MAX:
        log.warning("skipping %s child %r: numParts %d is not plausible", where, name, count)
        return None
    return count


def _master_children(pub_children: Mapping[str, bytes]) -> Iterable[tuple[str, int]]:
    """Yield ``(child name, broker id)`` for every ``B-m`` child; warn about bad broker ids."""
    for name in pub_children:
        parts = _split_child(name)
        if len(parts) != 2 or parts[1] != "m":
            continue
        if _DIGITS_RE.fullmatch(parts[0]) is None:
            log.warning("skipping topics-pub child %r: broker id is not a number", name)
            continue
        yield name, int(parts[0])


def producer_partitions(pub_children: Mapping[str, bytes]) -> list[Partition]:
    """Return a producer's partitions of one topic (Java's numeric order).

    Only ``B-m`` children count (slaves never take writes). A child whose data is not usable
    JSON is skipped with a warning, as Java logs and skips it.

    Args:
        pub_children: the children of ``topics-pub/T``, child name -> node data.

    Returns:
        ``B-0 .. B-(numParts-1)`` of every master, deduplicated, sorted by (broker, partition).
    """
    partitions: set[Partition] = set()
    for name, broker_id in _master_children(pub_children):
        count = _num_parts("topics-pub", name, pub_children[name])
        if count is not None:
            partitions.update(Partition(broker_id, number) for number in range(count))
    return sorted(partitions)


def master_broker_ids(pub_children: Mapping[str, bytes]) -> list[int]:
    """Return the broker ids of the ``B-m`` children of ``topics-pub/T``, sorted, unique.

    The node data is not read: Java maps these ids to ``ids/B/master`` without parsing it.
    """
    return sorted({broker_id for _name, broker_id in _master_children(pub_children)})


def consumer_partition_strings(sub_children: Mapping[str, bytes]) -> list[str]:
    """Return a consumer's partition strings of one topic (Java's string order).

    Every ``X-Y`` child counts, masters and slaves alike, so a partition stays assigned while
    only a slave serves it. ``X`` is kept as written (Java does not parse it); a child whose
    ``X`` is not decimal, or whose data is not usable JSON, is skipped with a warning.

    Args:
        sub_children: the children of ``topics-sub/T``, child name -> node data.

    Returns:
        ``"X-0" .. "X-(numParts-1)"`` of every child, deduplicated, sorted as strings
        (``"0-10" < "0-2"``, ``"10-0" < "2-0"``).
    """
    strings: set[str] = set()
    for name, data in sub_children.items():
        parts = _split_child(name)
        if len(parts) != 2:
            log.warning("skipping topics-sub child %r: not of the form <broker>-<role>", name)
            continue
        if _DIGITS_RE.fullmatch(parts[0]) is None:
            log.warning("skipping topics-sub child %r: broker id is not a number", name)
            continue
        count = _num_parts("topics-sub", name, data)
        if count is not None:
            strings.update(f"{parts[0]}-{number}" for number in range(count))
    return sorted(strings, key=java_string_key)


def format_offset(msg_id: int, offset: int) -> str:
    """Return the offset node text ``<msgId>-<offset>``, e.g. ``-1-0``."""
    return f"{msg_id}-{offset}"


def parse_offset(text: str) -> tuple[int, int]:
    """Parse an offset node's text into ``(msg_id, offset)``.

    The text is split at the last ``-``. If that index is > 0 the parts are the message id and
    the offset (ids are often negative: ``-6054433245132763136-1048576``); otherwise the whole
    text is a bare pre-1.4 offset and the message id is -1.

    Raises:
        ClientError: the text is not one of those forms of 64-bit integers.
    """
    index = text.rfind("-") if isinstance(text, str) else -1
    if index > 0:
        msg_id_text, offset_text = text[:index], text[index + 1 :]
    else:
        msg_id_text, offset_text = "-1", text
    numbers = []
    for part in (msg_id_text, offset_text):
        if not isinstance(part, str) or _LONG_RE.fullmatch(part) is None:
            raise ClientError(f"malformed offset {text!r}: expected <msgId>-<offset>")
        number = int(part)
        if not _LONG_MIN <= number <= LONG_MAX:
            raise ClientError(f"malformed offset {text!r}: {number} is not a 64-bit integer")
        numbers.append(number)
    return numbers[0], numbers[1]


def local_host() -> str:
    """Return this machine's address for generated names (Java's ``getLocalHost``).

    Java's rule, in one place for the client and the broker: ``meta.local_address``.
    """
    return local_address.local_host()


def consumer_id_string(group: str, consumer_id: str | None) -> str:
    """Return the consumer id string ``<group>_<id>``.

    Args:
        group: the consumer group.
        consumer_id: ``ConsumerConfig.consumerId``; when None or empty the id is
            ``<localHost>-<pid>-<uuid4>``, as Java's ``getConsumerUUID`` builds it.
    """
    return f"{group}_{consumer_id or f'{local_host()}-{os.getpid()}-{uuid.uuid4()}'}"


def validate_group(group: str) -> None:
    """Refuse a consumer group that Java's ``checkConsumerConfig`` refuses.

    Raises:
        InvalidGroupError: blank, or containing one of ``INVALID_GROUP_CHARACTERS``; the text
            names the group and the character.
    """
    if not isinstance(group, str) or not group.strip():
        raise InvalidGroupError(f"invalid consumer group {group!r}: it must not be blank")
    for character in group:
        if character in INVALID_GROUP_CHARACTERS:
            raise InvalidGroupError(
                f"invalid consumer group {group!r}: it contains the character {character!r}"
            )


def broadcast_group(group: str, host: str | None = None) -> str:
    """Return the per-host group of a broadcast consumer (Java's broadcast variant).

    ``<group>-<host>`` with every ``.`` and ``:`` of the host replaced by ``-``. As in Java, an
    IPv6 host keeps its brackets, which makes the group fail ``validate_group``.

    Args:
        group: the group the application asked for.
        host: the host to use; ``local_host()`` when None.
    """
    host = local_host() if host is None else host
    return f"{group}-{host.replace('.', '-').replace(':', '-')}"


def validate_topic(topic: str) -> None:
    """Refuse a topic name the topic-name rule does not allow, before anything is sent or written.

    This is ``meta.config.validate_topic_name``; the error is not a ``ClientError`` because
    the broker raises the same type for the same rule.

    Raises:
        InvalidTopicError: the name is not 1..255 of ``[A-Za-z0-9_.-]`` or is ``.``/``..``.
    """
    validate_topic_name(topic)
