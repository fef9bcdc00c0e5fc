"""The metaq-py client library: producers and consumers for MetaQ brokers.

Start with ``MetaMessageSessionFactory(MetaClientConfig(zk_connect=...))`` and
``factory.create_producer()``, ``factory.create_xa_producer()`` or
``factory.create_consumer(ConsumerConfig(group))``; all of them are context managers.
``producer.send(topic, data)`` raises on a refused put (``SendFailedError``) where Java's
``send_message`` returns a failed ``SendResult``; ``consumer.subscribe(topic)`` then
``consumer.poll(timeout_s)`` or ``for message in consumer.messages(...)`` reads without a
listener. Local transactions:
``with producer.begin_transaction(): ...``; XA: ``producer.get_xa_resource()``.
Importing this package has no side effects: no thread, no socket, and no kazoo import
(kazoo is imported only when a factory uses ZooKeeper).
"""

from meta.client.cluster import BrokerAddress, Partition
from meta.client.consume.consumer import ConsumerConfig, MessageConsumer
from meta.client.consume.pull import FetchResult, MessageIterator, TopicBrowser
from meta.client.consume.recover import RecoverStore
from meta.client.factory import MetaClientConfig, MetaMessageSessionFactory
from meta.client.fetch.received import PartitionControl, ReceivedMessage
from meta.client.message import Message, SendResult
from meta.client.produce.async_producer import AsyncMessageProducer
from meta.client.produce.log_handler import MetaLogHandler
from meta.client.produce.ordered import OrderedMessageProducer, parse_partitions_info
from meta.client.produce.producer import MessageProducer
from meta.client.produce.rotation import SendRetryPolicy
from meta.client.produce.selectors import (
    HashPartitionSelector,
    PartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.client.produce.xa import XAMessageProducer, XAResource, Xid
from meta.client.transact.transaction import LocalTransaction

__all__ = [
    "AsyncMessageProducer",
    "BrokerAddress",
    "ConsumerConfig",
    "HashPartitionSelector",
    "FetchResult",
    "LocalTransaction",
    "Message",
    "MessageIterator",
    "MessageConsumer",
    "MessageProducer",
    "MetaLogHandler",
    "MetaClientConfig",
    "MetaMessageSessionFactory",
    "OrderedMessageProducer",
    "Partition",
    "PartitionControl",
    "PartitionSelector",
    "RandomPartitionSelector",
    "ReceivedMessage",
    "RecoverStore",
    "RoundRobinPartitionSelector",
    "SendResult",
    "SendRetryPolicy",
    "TopicBrowser",
    "XAMessageProducer",
    "XAResource",
    "Xid",
    "parse_partitions_info",
]
