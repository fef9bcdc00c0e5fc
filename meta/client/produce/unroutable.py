"""Why a producer cannot route a message, as one of three ``NoPartitionError`` subclasses.

A send finds no partition for one of these reasons, and each needs a different fix:

* ``TopicNotPublishedError``: the producer never called ``publish(topic)``;
* ``TopicNotServedError``: ZooKeeper has no partition of the topic and this producer never
  saw a broker serve it (no broker is configured for the topic, or none has run since);
* ``BrokersUnavailableError``: the brokers that served the topic are gone from ZooKeeper, or
  a partition's broker has not registered its address yet (starting or stopping), or
  (keyless sends) every broker of the topic failed and is out of the producer's rotation.

Each text names the topic, the brokers seen and what to do. No wire reply carries these
texts, so they need not match Java's one text for all three causes.

Pure functions: they build errors and never read ZooKeeper (the producer passes what it saw).
"""

from __future__ import annotations

from collections.abc import Mapping

from meta.client.cluster import BrokerAddress, Partition
from meta.errors import BrokersUnavailableError, TopicNotPublishedError, TopicNotServedError


def describe_brokers(brokers: Mapping[int, BrokerAddress]) -> str:
    """``"0 (meta://host:8123), 1 (meta://other:8123)"``, or ``"none"``."""
    if not brokers:
        return "none"
    return ", ".join(f"{broker_id} ({address.uri})" for broker_id, address in brokers.items())


def not_published(topic: str) -> TopicNotPublishedError:
    """The error for a send to a topic the producer has not published."""
    return TopicNotPublishedError(
        f"topic {topic!r} is not published by this producer: call "
        f"producer.publish({topic!r}) once before sending to it"
    )


def no_partition(
    topic: str, publish_path: str, seen: Mapping[int, BrokerAddress]
) -> TopicNotServedError | BrokersUnavailableError:
    """The error for a published topic that has no partition in ZooKeeper now.

    Args:
        topic: the topic.
        publish_path: the ZooKeeper node whose children are the topic's partitions.
        seen: the brokers this producer last saw serving the topic (empty: none ever).
    """
    if not seen:
        return TopicNotServedError(
            f"no broker serves topic {topic!r}: ZooKeeper has no partition under "
            f"{publish_path} (brokers seen serving it: none). Configure the topic on a broker "
            f"(a [topic={topic}] section in its server.ini, then tools/metaServer.sh reload) "
            "and make sure that broker runs with the same ZooKeeper root as this client"
        )
    return BrokersUnavailableError(
        f"the brokers of topic {topic!r} are down: brokers seen serving it: "
        f"{describe_brokers(seen)}, but none is registered under {publish_path} now. "
        "Start them (tools/metaServer.sh start) or wait until they register again; "
        "sends succeed again as soon as one does"
    )


def no_master(
    topic: str, partition: Partition, brokers: Mapping[int, BrokerAddress]
) -> BrokersUnavailableError:
    """The error for a partition whose broker has not registered its address (yet).

    Args:
        topic: the topic.
        partition: the partition chosen, whose broker has no ``ids/B/master`` node.
        brokers: the topic's brokers that have an address now.
    """
    return BrokersUnavailableError(
        f"broker {partition.broker_id} serves partition {partition} of topic {topic!r} but "
        f"has no address in ZooKeeper (starting, stopping or not registered yet); brokers "
        f"of the topic with an address: {describe_brokers(brokers)}. Retry in a moment, or "
        f"start broker {partition.broker_id}"
    )


def all_out(topic: str, out: str) -> BrokersUnavailableError:
    """The error for a keyless send when every broker of the topic is out of rotation.

    Args:
        topic: the topic.
        out: the brokers out of rotation, each with its last error and next probe
            (``BrokerRotation.describe``).
    """
    return BrokersUnavailableError(
        f"cannot place the message of topic {topic!r} anywhere: every broker of the topic "
        f"failed and is out of the producer's rotation: {out}. They are probed in the "
        "background and used again as soon as one accepts a connection"
    )
