"""``ConsumerConfig`` and ``MessageConsumer``: a member of a consumer group.

A consumer records subscriptions (``subscribe``), then ``complete_subscribe`` joins the
group in ZooKeeper (``meta.client.zk.group``), which assigns it partitions and runs the fetch
loop (``meta.client.fetch.manager``) on them. A message whose listener fails more than
``max_fetch_retries`` times in a row is handed to the reject policy: the local recover store
(``meta.client.consume.recover``, redelivered every ``recover_interval_ms``) or a logged drop.
Offsets are committed to ZooKeeper every ``commit_offset_period_ms``, on every rebalance and
at shutdown, in the Java format, so Python and Java consumers can share a group. In direct
mode (a factory with ``server_url``) ``meta.client.consume.direct`` replaces the group: the
partitions named in ``ConsumerConfig.partition`` are read from that one broker, no
ZooKeeper, offsets in memory only. Topics subscribed without a listener are read
with ``poll`` or ``messages`` instead (``meta.client.consume.handoff``).

Invariants:

* ``complete_subscribe`` runs at most once; no subscription is accepted after it.
* A topic is subscribed at most once per group within one session factory (the factory's
  ``SubscribeRegistry``, Java's ``SubscribeInfoManager``); ``shutdown`` releases it.
* After ``shutdown()`` no thread of the consumer runs, its offsets are committed, its
  recover files are closed and its owner and ids nodes are deleted. ``shutdown`` is
  idempotent and bounded: with ZooKeeper unreachable it skips the commit and the node
  cleanup (the ephemeral nodes go with the session), and a thread stuck in a ZooKeeper
  call ends when the factory closes its ZooKeeper client.

Thread-safety: every public method is thread-safe. Listeners run on the fetch threads and,
for recovered messages, on the ``meta-recover`` thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from meta.client.cluster import (
    BrokerAddress,
    Partition,
    consumer_id_string,
    validate_group,
    validate_topic,
)
from meta.client.consume.delivery import Subscription
from meta.client.consume.handoff import Handoff
from meta.client.consume.recover import DEFAULT_DIRECTORY, RecoverManager, RecoverStore
from meta.client.consume.subscriptions import SubscribeRegistry
from meta.client.fetch.manager import FetchManager, FetchSettings, RejectHandler
from meta.client.fetch.received import ReceivedMessage
from meta.client.message import Message
from meta.client.zk.balance import STRATEGIES
from meta.errors import ClientClosedError, ClientError
from meta.protocol.commands import LONG_MAX

if TYPE_CHECKING:
    from meta.client.consume.direct import DirectConsumerGroup
    from meta.client.factory import ConnectionPool
    from meta.client.zk.group import ZkConsumerGroup

log = logging.getLogger("meta.client")

OFFSET_RESETS = ("follow-broker", "earliest", "latest", "error")
"""The ``offset_reset`` policies (compatibility.md)."""

COMMIT_JOIN_S = 10.0
"""How long ``shutdown`` waits for a periodic offset commit in progress."""

DEFAULT_MAX_SIZE = 1 << 20
"""Bytes a fetch asks for when ``subscribe`` is given no ``max_size`` (1 MiB)."""

REJECT_POLICIES = ("recover", "drop")
"""What happens to a message that failed too often (Java's ``RejectConsumptionHandler``)."""


@dataclass(frozen=True)
class ConsumerConfig:
    """Consumer settings (Java's ``ConsumerConfig``).

    Attributes:
        group: the consumer group (checked as Java's ``checkConsumerConfig`` does).
        consumer_id: the id in ``<group>_<id>``; None: ``<localHost>-<pid>-<uuid>``.
        fetch_timeout_s: bound on a get or offset request (plus ``long_poll_ms``).
        max_delay_fetch_ms: the largest backoff between fetches of one partition.
        commit_offset_period_ms: period of the offset commit.
        offset: the start offset of partitions without a committed offset.
        consume_from_max_offset: start those partitions at the newest message instead
            (compatibility.md: a get at ``Long.MAX_VALUE``, whose 301 answer is adopted);
            ``"always"`` is the same as ``always_consume_from_max_offset=True``.
        always_consume_from_max_offset: start every newly owned partition at the newest
            message, even one with a committed offset (Java's ``alwaysConsumeFromMaxOffset``).
        load_balance_strategy: ``"DEFAULT"`` or ``"CONSIST"``.
        offset_reset: what a 301 (offset out of range) does: ``"follow-broker"`` adopts the
            broker's offset (Java); ``"earliest"`` goes to the partition's first offset,
            ``"latest"`` to its end (both asked with an ``offset`` command); ``"error"`` logs
            and stops that partition until the next rebalance.
        long_poll_ms: the get's ``maxWaitMs`` (compatibility.md); 0 disables long polling.
        fetch_threads: number of fetch threads.
        zk_sync_s: pause between failed rebalance attempts (Java's ``zkSyncTimeMs``).
        max_fetch_retries: listener failures of one head message beyond which it is
            rejected (so the listener sees it at most ``max_fetch_retries + 1`` times).
        reject_policy: ``"recover"`` (the local recover store) or ``"drop"`` (ERROR log).
        recover_path: the recover store's directory (``~`` expanded).
        recover_interval_ms: the pause between redelivery rounds of the recover store.
        recover_messages_max: the most messages one ``<topic>@<group>`` file holds; later
            rejects are dropped with an ERROR log.
        partition: direct mode only (a factory with ``server_url``): the partitions to read,
            ``"B-P"`` or several comma-separated (``"0-0,0-1"``); ignored with ZooKeeper,
            as in Java.

    Raises:
        InvalidGroupError: the group is blank or has a character Java refuses.
        ClientError: another field is out of range.
    """

    group: str
    consumer_id: str | None = None
    fetch_timeout_s: float = 10.0
    max_delay_fetch_ms: int = 5000
    commit_offset_period_ms: int = 5000
    offset: int = 0
    consume_from_max_offset: bool | str = False
    always_consume_from_max_offset: bool = False
    load_balance_strategy: str = "DEFAULT"
    offset_reset: str = "follow-broker"
    long_poll_ms: int = 1000
    fetch_threads: int = 1
    zk_sync_s: float = 2.0
    max_fetch_retries: int = 5
    reject_policy: str = "recover"
    recover_path: str = DEFAULT_DIRECTORY
    recover_interval_ms: int = 300_000
    recover_messages_max: int = 500_000
    partition: str | None = None

    @property
    def always_from_max(self) -> bool:
        """True when every newly owned partition starts at the tail (compatibility.md)."""
        return self.always_consume_from_max_offset or self.consume_from_max_offset == "always"

    def __post_init__(self) -> None:
        validate_group(self.group)
        if self.load_balance_strategy not in STRATEGIES:
            raise ClientError(f"unknown load_balance_strategy {self.load_balance_strategy!r}")
        if self.offset_reset not in OFFSET_RESETS:
            raise ClientError(
                f"offset_reset {self.offset_reset!r} is not one of {', '.join(OFFSET_RESETS)}"
            )
        if self.consume_from_max_offset not in (False, True, "always"):
            raise ClientError("consume_from_max_offset must be a bool or 'always'")
        if self.reject_policy not in REJECT_POLICIES:
            raise ClientError(f"reject_policy {self.reject_policy!r} is not recover or drop")
        positive = ("fetch_timeout_s", "max_delay_fetch_ms", "commit_offset_period_ms")
        recover = ("recover_interval_ms", "recover_messages_max")
        for name in (*positive, "fetch_threads", "zk_sync_s", *recover):
            if not getattr(self, name) > 0:
                raise ClientError(f"ConsumerConfig.{name} must be positive")
        if self.partition is not None:
            from meta.client.consume.direct import parse_partitions

            if not isinstance(self.partition, str):
                raise ClientError(f"ConsumerConfig.partition must be a str, got {self.partition!r}")
            parse_partitions(self.partition)  # raises ClientError naming the bad part
        if self.long_poll_ms < 0 or self.offset < 0 or self.max_fetch_retries < 0:
            raise ClientError(
                "ConsumerConfig.long_poll_ms, offset and max_fetch_retries must not be negative"
            )


class MessageConsumer:
    """A consumer in a group: subscribe, ``complete_subscribe``, then ``shutdown``.

    Created by ``MetaMessageSessionFactory.create_consumer``.

    Args:
        config: the consumer settings.
        pool: the factory's connection pool.
        zk_client: the factory's started ``KazooClient``; None in direct mode.
        zk_root: the MetaQ root in ZooKeeper.
        on_shutdown: called with this consumer once it has shut down.
        pull: the factory's ``get`` (for ``consumer.get``).
        registry: the factory's ``SubscribeRegistry``; None: a private one.
        direct_broker: direct mode: the factory's ``server_url`` broker (no ZooKeeper).
        group_class: the ``ZkConsumerGroup`` (sub)class keeping the group's offsets; None:
            ``ZkConsumerGroup`` (offsets in ZooKeeper).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        pool: ConnectionPool,
        zk_client: Any,
        zk_root: str,
        on_shutdown: Callable[[MessageConsumer], None] | None = None,
        pull: Callable[..., Any] | None = None,
        registry: SubscribeRegistry | None = None,
        direct_broker: BrokerAddress | None = None,
        group_class: type[ZkConsumerGroup] | None = None,
    ) -> None:
        if direct_broker is None and zk_client is None:
            raise ClientError("a consumer needs ZooKeeper or a direct-mode broker")
        if direct_broker is not None and config.partition is None:
            raise ClientError(
                f"direct mode ({direct_broker.uri}) needs ConsumerConfig.partition, the "
                'partitions to read ("B-P" or "0-0,0-1"): without ZooKeeper there is no '
                "rebalance to assign them"
            )
        self.config = config
        self._registry = registry if registry is not None else SubscribeRegistry()
        self._direct_broker = direct_broker
        self._fetcher: FetchManager | None = None
        self._pull = pull
        self.consumer_id = consumer_id_string(config.group, config.consumer_id)
        self._pool = pool
        self._zk_client = zk_client
        self._zk_root = zk_root
        self._on_shutdown = on_shutdown
        self._lock = threading.Lock()
        self._subscriptions: dict[str, tuple[int, Any]] = {}
        self._group: ZkConsumerGroup | DirectConsumerGroup | None = None
        # The seam of offset storage: a ZkConsumerGroup subclass (None: ZooKeeper offsets).
        self._group_class = group_class
        self._completed = False
        self._closed = False
        self._stop_commits = threading.Event()
        self._committer: threading.Thread | None = None
        self._recover_store: RecoverStore | None = None
        self._recover_manager: RecoverManager | None = None
        self._handoff = Handoff()  # The listener of topics subscribed without one (poll).
        self._polled: set[str] = set()
        self._start_lock = threading.Lock()  # poll's one complete_subscribe

    def subscribe(
        self,
        topic: str,
        max_size: int = DEFAULT_MAX_SIZE,
        listener: Any = None,
        message_filter: Any = None,
    ) -> MessageConsumer:
        """Record a subscription; fetching starts with ``complete_subscribe``.

        Args:
            topic: the topic.
            max_size: bytes asked for per fetch (> 0).
            listener: ``listener(message)``, or an object with ``receive_messages(message)``
                and optionally an ``executor`` (``concurrent.futures.Executor``) that runs
                its batches (see ``meta.client.consume.delivery``); None: the topic's
                messages are returned by ``poll`` and ``messages``.
            message_filter: None, ``filter(group, message) -> bool`` or an object with
                ``accept(group, message)``; rejected messages skip the listener but count
                as consumed.

        Raises:
            ClientError: after ``complete_subscribe``, a topic subscribed twice, or a bad
                ``max_size``; ``InvalidTopicError`` for a bad topic name.
        """
        validate_topic(topic)
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size <= 0:
            raise ClientError(f"max_size must be a positive int, got {max_size!r}")
        polled = listener is None
        if polled:
            listener = self._handoff
        if not callable(getattr(listener, "receive_messages", listener)):
            raise ClientError(f"listener {listener!r} is neither callable nor has receive_messages")
        accept = getattr(message_filter, "accept", message_filter)
        if message_filter is not None and not callable(accept):
            raise ClientError(
                f"message_filter {message_filter!r} is neither callable nor has accept"
            )
        group = self.config.group
        with self._lock:
            self._check_open()
            if self._completed:
                raise ClientError("subscribe after complete_subscribe")
            if topic in self._subscriptions:
                raise ClientError(
                    f"topic {topic} is already subscribed by this consumer (group {group})"
                )
            self._registry.claim(group, topic)
            self._subscriptions[topic] = (max_size, Subscription(group, listener, message_filter))
            if polled:
                self._polled.add(topic)
        return self

    def poll(self, timeout_s: float | None = None) -> ReceivedMessage | None:
        """Return the next message of the topics subscribed without a listener.

        The first call joins the group (``complete_subscribe``) if that was not done. The
        offsets committed (periodically, on rebalance and at ``shutdown``) never pass a
        message ``poll`` has not returned (``meta.client.consume.handoff``).

        Args:
            timeout_s: the longest wait for a message; None: until one comes or shutdown.

        Returns:
            The message, or None when none came within ``timeout_s`` or the consumer was
            shut down meanwhile.

        Raises:
            ClientClosedError: the consumer was shut down before the call.
            ClientError: no topic is subscribed without a listener, or joining failed.
        """
        self._check_open()
        if not self._polled:
            raise ClientError(
                "poll() returns the messages of topics subscribed without a listener: "
                "call consumer.subscribe(topic) first"
            )
        with self._start_lock:
            if not self._completed:
                self.complete_subscribe()
        return self._handoff.poll(timeout_s)

    def messages(
        self, timeout_s: float | None = None, max_messages: int | None = None
    ) -> Iterator[ReceivedMessage]:
        """Iterate over the messages ``poll`` returns: ``for message in consumer.messages()``.

        Args:
            timeout_s: end after this long without a message; None: run until shutdown.
            max_messages: end after this many messages; None: no limit.

        Raises:
            ClientClosedError, ClientError: as ``poll`` (on the first step).
        """
        count = 0
        while max_messages is None or count < max_messages:
            message = self.poll(timeout_s)
            if message is None:
                return
            count += 1
            yield message

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def get(self, topic: str, partition: Partition, offset: int, max_size: int = 1 << 20) -> Any:
        """Pull one batch outside the group: a ``MessageIterator``, or None on
        404/403/301 as in Java (``meta.client.consume.pull.fetch`` also reports a 301's offset)."""
        if self._pull is None:
            raise ClientError("this consumer was not created by a session factory")
        return self._pull(topic, partition, offset, max_size)

    def complete_subscribe(self) -> None:
        """Join the group, take partitions and start fetching (once).

        Raises:
            ClientError: called twice, nothing subscribed, or the group could not be joined.
        """
        with self._lock:
            self._check_open()
            if self._completed:
                raise ClientError("complete_subscribe may be called only once")
            if not self._subscriptions:
                raise ClientError("complete_subscribe without any subscription")
            self._completed = True
            listeners = {topic: listener for topic, (_s, listener) in self._subscriptions.items()}
            fetcher = FetchManager(
                self._pool, f"<consumer {self.consumer_id}>", self._fetch_settings(),
                listeners, self._reject_handler(listeners),
            )  # fmt: skip
            self._fetcher = fetcher
            if self._direct_broker is not None:
                self._group = self._direct_group(fetcher)
            else:
                self._group = self._zk_group(fetcher)
        try:
            self._group.start()
        except ClientError:
            self.shutdown()
            raise
        if self._recover_manager is not None:
            self._recover_manager.start()
        self._committer = threading.Thread(
            target=self._commit_loop, name="meta-offset-commit", daemon=True
        )
        self._committer.start()

    def _direct_group(self, fetcher: FetchManager) -> DirectConsumerGroup:
        from meta.client.consume.direct import DirectConsumerGroup, parse_partitions

        config = self.config
        assert self._direct_broker is not None and config.partition is not None
        from_max = bool(config.consume_from_max_offset) or config.always_from_max
        return DirectConsumerGroup(
            self._direct_broker, self.consumer_id,
            {topic: size for topic, (size, _listener) in self._subscriptions.items()},
            parse_partitions(config.partition), fetcher,
            LONG_MAX if from_max else config.offset,
        )  # fmt: skip

    def _zk_group(self, fetcher: FetchManager) -> ZkConsumerGroup:
        from meta.client.zk.group import ZkConsumerGroup

        if self._group_class is None:
            self._group_class = ZkConsumerGroup
        group = self._group_class(
                self._zk_client, self._zk_root, self.config.group, self.consumer_id,
                {topic: size for topic, (size, _listener) in self._subscriptions.items()},
                self.config.load_balance_strategy, fetcher, self.config.offset,
                bool(self.config.consume_from_max_offset), self.config.zk_sync_s,
                always_from_max=self.config.always_from_max,
        )  # fmt: skip
        return group

    def owned_partitions(self) -> set[tuple[str, str]]:
        """The ``(topic, "B-P")`` pairs this consumer owns now (empty before joining)."""
        group = self._group
        return group.owned() if group is not None else set()

    def offsets(self) -> dict[tuple[str, str], int]:
        """``(topic, B-P)`` -> the offset of the next unacknowledged message, for the
        partitions fetched now (empty before ``complete_subscribe``). In direct mode this is
        the only record of progress: nothing is committed anywhere."""
        fetcher = self._fetcher
        if fetcher is None:
            return {}
        return {key: request.offset for key, request in fetcher.requests().items()}

    @property
    def paused(self) -> bool:
        """True while fetching is paused (the ZooKeeper connection is suspended)."""
        fetcher = self._fetcher
        return fetcher is not None and fetcher.paused

    def shutdown(self) -> None:
        """Stop fetching, commit offsets, leave the group. Idempotent; no thread remains."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            group = self._group
            topics = list(self._subscriptions)
        self._registry.release(self.config.group, topics)
        self._handoff.close()  # Before the group stops the fetch threads it may hold.
        self._stop_commits.set()
        if self._committer is not None and self._committer is not threading.current_thread():
            # Bounded: a commit stuck on a lost ZooKeeper connection ends when the factory
            # closes the ZooKeeper client.
            self._committer.join(COMMIT_JOIN_S)
        if group is not None:
            group.close()
        if self._recover_manager is not None:
            self._recover_manager.stop()
        if self._recover_store is not None:
            self._recover_store.close()
        self._pool.set_brokers(f"<consumer {self.consumer_id}>", [])
        if self._on_shutdown is not None:
            self._on_shutdown(self)

    @property
    def recover_store(self) -> RecoverStore | None:
        """The local recover store (None under ``reject_policy="drop"`` or before joining)."""
        return self._recover_store

    def _reject_handler(self, listeners: dict[str, Any]) -> RejectHandler:
        """Open the recover store and its manager (policy ``recover``) or return a drop."""
        config = self.config
        if config.reject_policy == "drop":
            return _drop
        self._recover_store = RecoverStore(
            config.recover_path, config.group, config.recover_messages_max
        )
        self._recover_manager = RecoverManager(
            self._recover_store, listeners, config.recover_interval_ms
        )
        return self._recover_store.append

    def _commit_loop(self) -> None:
        period_s = self.config.commit_offset_period_ms / 1000
        while not self._stop_commits.wait(period_s):
            try:
                self._group.commit()
            except Exception:  # The next period tries again; the thread must not die.
                log.exception("periodic offset commit of %s failed", self.consumer_id)

    def _fetch_settings(self) -> FetchSettings:
        config = self.config
        return FetchSettings(
            config.group,
            config.fetch_timeout_s,
            config.max_delay_fetch_ms,
            config.long_poll_ms,
            config.offset_reset,
            config.fetch_threads,
            config.max_fetch_retries,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"consumer {self.consumer_id} was shut down")


def _drop(message: Message) -> None:
    """The ``drop`` reject policy (Java's ``DropPolicy``), loud rather than silent."""
    log.error("rejected message %s of %s dropped (reject_policy=drop)", message.id, message.topic)
