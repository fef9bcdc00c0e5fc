"""``BrokerRegistry``: the broker's ZooKeeper registration.

What lives here: the reactor-side half of the registration: the lifecycle (start, stop), the
hand-off of kazoo's state changes to the reactor, re-registration after a lost session with
retries, and the bookkeeping of registered topics. The nodes themselves, their payloads and
every kazoo call are in ``meta.server.broker_nodes`` (``BrokerNodes``); ``RegistryError``,
``broker_suffix`` and ``topic_payload`` are re-exported from there.

Invariants:

* A ``master``/``slave<N>`` node owned by another live session is never taken over: it is
  waited out for at most the session timeout plus a margin (compatibility.md), then start fails.
* ``registered_topics`` holds, per topic, the ``TopicConfig`` its nodes were written from; a
  new session re-creates the broker node, the checksum node and exactly those topics.
* At most one ZooKeeper operation per topic is in flight (``_in_flight``); a later call for
  the same topic waits for it, then decides again from the recorded state.
* After a reload (``set_config``), ``register_topic(topic, force=True)`` updates in place the
  nodes of a topic whose settings changed and ``unregister_topic`` deletes one the broker no
  longer serves; which topics those are is the broker's decision (``Broker.reload``).
* With ``zk.zkEnable=false`` every method is a no-op that returns a fired Deferred.

Thread affinity: ``BrokerRegistry`` belongs to the reactor thread. Every ZooKeeper operation
is a ``BrokerNodes`` method run on one dedicated worker thread (a one-thread ``ThreadPool``),
so they are serialised. kazoo's state listener (``_state_listener``) and node watches run on
kazoo's own thread: they only record the state and hand over to the reactor with
``callFromThread``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from kazoo.client import KazooClient, KazooState
from twisted.internet import defer, threads
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from meta.config import BrokerConfig, TopicConfig
from meta.server.broker_nodes import BrokerNodes, RegistryError, broker_suffix, topic_payload
from meta.server.topic_retry import TopicRetry

__all__ = ["BrokerRegistry", "RegistryError", "broker_suffix", "topic_payload"]

log = logging.getLogger("meta.registry")

# Extra time, beyond our session timeout, that a stale master/slave node is waited out: the
# server expires sessions on tick boundaries, so an expiry can come a few ticks late.
STALE_NODE_MARGIN_S = 5.0
# Re-check a stale node this often even without a watch event (watches die on disconnects).
STALE_NODE_POLL_S = 1.0
# Delay before retrying a failed re-registration while the connection stays up.
REREGISTER_RETRY_S = 2.0


class BrokerRegistry:
    """Registers one master or slave broker in ZooKeeper and keeps it registered.

    Args:
        config: the broker configuration; ``config.zookeeper`` gives the connection.
        reactor: the Twisted reactor every Deferred fires on.
        broker_uri: ``meta://host:port`` as clients must connect to it.
        slave_id: ``-1`` for a master, ``N >= 0`` for async slave ``N``.
        kazoo_factory: builds the client from ``KazooClient`` keyword arguments (tests).
        stale_wait_s: how long ``start`` waits out a master/slave node held by another
            session; default the session timeout plus ``STALE_NODE_MARGIN_S``.
    """

    def __init__(
        self,
        config: BrokerConfig,
        reactor: Any,
        broker_uri: str,
        slave_id: int = -1,
        kazoo_factory: Callable[..., KazooClient] | None = None,
        stale_wait_s: float | None = None,
    ) -> None:
        zk = config.zookeeper
        self._config = config
        self._reactor = reactor
        self._uri = broker_uri
        self._slave_id = slave_id
        self._suffix = broker_suffix(config.broker_id, slave_id)
        if stale_wait_s is None:
            stale_wait_s = zk.session_timeout_ms / 1000 + STALE_NODE_MARGIN_S
        self._stale_wait_s = stale_wait_s
        self._checksum = config.checksum
        self._nodes = BrokerNodes(zk, config.broker_id, broker_uri, slave_id, kazoo_factory)
        self._pool = ThreadPool(1, 1, name=f"meta-registry-{self._suffix}")
        self._shutdown_trigger: Any = None
        self._registered: dict[str, TopicConfig] = {}
        self._in_flight: dict[str, defer.Deferred] = {}
        self._started = False
        self._broker_registered = False
        self._registered_session: int | None = None
        self._reregistering = False
        self._retry_call: Any = None
        self._stopping = False
        self._stopped = False
        self._stop_waiters: list[defer.Deferred] = []
        self._connected = False
        self._last_state: str | None = None  # Written by _state_listener on kazoo's thread.
        self.topic_retry = TopicRetry(self, reactor)  # failed topic registrations, retried

    # --- public API (reactor thread) -------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether ZooKeeper is used at all (``zk.zkEnable``)."""
        return self._config.zookeeper.enabled

    @property
    def is_master(self) -> bool:
        """True for a master broker, False for an async slave."""
        return self._slave_id < 0

    @property
    def connected(self) -> bool:
        """True while the session is connected and our nodes are known to be in place.

        False while SUSPENDED, after LOST until re-registration finishes, and when disabled:
        then the broker must not act on facts read from ZooKeeper.
        """
        return self._connected

    @property
    def registered_topics(self) -> dict[str, TopicConfig]:
        """A copy of the registered topics and the settings their nodes were written from."""
        return dict(self._registered)

    def start(self, topics_with_stores: Iterable[str]) -> defer.Deferred:
        """Connect, register the broker node, the checksum and every topic.

        Args:
            topics_with_stores: topics that have a store directory on disk; they are registered
                after the configured topics.

        Returns:
            A Deferred that fires with None once everything is registered, or fails with
            ``RegistryError`` (cannot connect; another broker holds our node) or a kazoo error.
        """
        if not self.enabled:
            return defer.succeed(None)
        assert not self._started, "start() may be called once"
        self._started = True
        self._pool.start()
        self._shutdown_trigger = self._reactor.addSystemEventTrigger(
            "during", "shutdown", self._stop_pool
        )
        started = defer.ensureDeferred(self._start(list(topics_with_stores)))
        started.addErrback(self._start_failed)
        return started

    def register_topic(self, topic: str, force: bool = False) -> defer.Deferred:
        """Write ``topic``'s three nodes unless they are already registered.

        Args:
            topic: the topic name (a wildcard section name is registered literally).
            force: re-register after a config reload: when the topic's settings differ from
                those of its last registration, bring its nodes to the new settings in place
                (``BrokerNodes.write_topic``: unchanged nodes are left alone, changed ones
                replaced in one transaction).

        Returns:
            A Deferred that fires with None when the nodes are written (or nothing had to be
            done), or fails with ``RegistryError`` or a kazoo error; then the topic is not
            recorded as registered, so a later call tries again.
        """
        if not self.enabled:
            return defer.succeed(None)
        if not self._started or self._stopping:
            error = RegistryError(f"cannot register topic {topic}: the registry is not running")
            return defer.fail(error)
        pending = self._in_flight.get(topic)
        if pending is not None:
            # Whatever the pending call's outcome, decide again from the updated state.
            return _fork(pending).addBoth(lambda _: self.register_topic(topic, force))
        topic_config = self._topic_config(topic)
        previous = self._registered.get(topic)
        if previous is not None and (not force or previous == topic_config):
            return defer.succeed(None)
        in_place = previous is not None
        registered = self._run(self._nodes.write_topic, topic, topic_config, in_place)
        self._in_flight[topic] = registered
        registered.addBoth(self._register_topic_done, topic, topic_config)
        return _fork(registered)

    def unregister_topic(self, topic: str) -> defer.Deferred:
        """Delete ``topic``'s three nodes and forget it (a reload left it without a section
        and without data, so a restart would not register it either).

        Returns:
            A Deferred that fires with None once the nodes are gone (at once when the topic
            is not registered), or fails with ``RegistryError`` or a kazoo error; then the
            topic stays recorded, so ``stop`` and a new session still cover it.
        """
        if not self.enabled:
            return defer.succeed(None)
        if not self._started or self._stopping:
            error = RegistryError(f"cannot unregister topic {topic}: the registry is not running")
            return defer.fail(error)
        pending = self._in_flight.get(topic)
        if pending is not None:
            return _fork(pending).addBoth(lambda _: self.unregister_topic(topic))
        # Forget it before the delete runs, so a re-registration after a new session that
        # starts meanwhile does not write the nodes back.
        topic_config = self._registered.pop(topic, None)
        self.topic_retry.forget(topic)
        if topic_config is None:
            return defer.succeed(None)
        deleted = self._run(self._nodes.delete_topic, topic)
        self._in_flight[topic] = deleted
        deleted.addBoth(self._unregister_topic_done, topic, topic_config)
        return _fork(deleted)

    def set_publishing(self, publishing: bool) -> defer.Deferred:
        """Withdraw (False) or restore (True) the nodes producers find this broker by: every
        registered topic's ``topics-pub`` and legacy ``topics`` node. ``ids/B/master`` and
        ``topics-sub`` stay, so consumers keep reading. The choice holds for topics
        registered later and across new sessions (a samsa master without its slave).

        Returns:
            A Deferred that fires with None once the nodes are written or deleted.
        """
        if not self.enabled:
            return defer.succeed(None)
        if not self._started or self._stopping:
            self._nodes.publishing = publishing  # the worker is not running: start applies it
            return defer.succeed(None)
        return self._run(self._nodes.set_publishing, publishing, dict(self._registered))

    def set_config(self, config: BrokerConfig) -> None:
        """Use ``config`` for later registrations (after a reload); writes nothing by itself.

        Call ``register_topic(topic, force=True)`` for each topic and
        ``update_config_checksum(config.checksum)`` afterwards.
        The ``[zookeeper]`` settings (connection, root) keep their values from construction.
        """
        assert config.broker_id == self._config.broker_id, "the broker id cannot change"
        self._config = config

    def update_config_checksum(self, checksum: int) -> defer.Deferred:
        """Rewrite ``master_config_checksum`` with ``checksum`` (master only).

        Returns:
            A Deferred that fires with None when written (at once for a slave, when disabled,
            or before the broker is registered: then ``start`` writes the new value).
        """
        self._checksum = checksum
        if not self.enabled or not self.is_master or not self._broker_registered:
            return defer.succeed(None)
        if self._stopping:
            return defer.succeed(None)
        return self._run(self._nodes.write_checksum, checksum)

    def read(self, reader: Callable[[Any], Any]) -> defer.Deferred:
        """Run ``reader(kazoo_client)`` on the ZooKeeper thread; fires with its result.

        The registration waits behind it: reads that clients can ask for (the dashboard's)
        use ``read_on_this_thread`` on a worker of their own instead."""
        return self._run(self._nodes.call, reader)

    def read_on_this_thread(self, reader: Callable[[Any], Any]) -> Any:
        """Run ``reader(kazoo_client)`` on the calling thread and return its result, for a
        reader with a worker of its own (the dashboard's): it never waits behind, nor
        delays, the registration's worker. kazoo's client is thread-safe; the session is
        the registry's.

        Raises:
            RegistryError: no client (not started, or stopped).
        """
        return self._nodes.call(reader)

    def read_master(self) -> defer.Deferred:
        """Read the master of our broker id and its topics (``BrokerNodes.read_master``).

        Returns:
            A Deferred firing with ``(master data or None, {topic: topics-sub B-m data})``.
        """
        if not self.enabled or not self._started or self._stopping:
            return defer.fail(RegistryError("the ZooKeeper registry is not running"))
        return self._run(self._nodes.read_master)

    def read_master_checksum(self) -> defer.Deferred:
        """A Deferred firing with the data of ``ids/B/master_config_checksum`` or None."""
        if not self.enabled or not self._started or self._stopping:
            return defer.fail(RegistryError("the ZooKeeper registry is not running"))
        return self._run(self._nodes.read_master_checksum)

    def stop(self) -> defer.Deferred:
        """Unregister, close the session and stop the worker. Idempotent.

        Deletes the broker node; for a master also the checksum node, then ``ids/B`` (or writes
        ``""`` into it when slaves are still below it); then every registered topic's nodes.
        Errors are logged, never raised: the ephemeral nodes go away with the session anyway.
        Does not sleep ``zkSyncTimeMs``; the broker does that on the reactor.

        Returns:
            A Deferred that fires with None once the client is closed and the worker stopped.
        """
        if not self.enabled or self._stopped:
            return defer.succeed(None)
        waiter: defer.Deferred = defer.Deferred()
        self._stop_waiters.append(waiter)
        if not self._stopping:
            self._stopping = True
            self._connected = False
            self._cancel_retry()
            self.topic_retry.stop()
            if self._started:
                # In-flight topics too: their nodes may exist before their Deferred fires.
                topics = sorted(set(self._registered) | set(self._in_flight))
                unregister = self._run(self._nodes.unregister_and_close, topics)
                unregister.addErrback(self._log_failure, "ZooKeeper unregistration failed")
                unregister.addBoth(self._stop_done)
            else:
                self._stop_done(None)
        return waiter

    # --- reactor-side orchestration --------------------------------------------------------------

    async def _start(self, topics_with_stores: list[str]) -> None:
        session = await self._run(self._nodes.connect, self._state_listener)
        await self._register_broker()
        configured = sorted(topic.name for topic in self._config.topics)
        for topic in configured + sorted(set(topics_with_stores) - set(configured)):
            await self.register_topic(topic)
        self._registered_session = session
        self._connected = True
        log.info(
            "registered broker %s at %s in ZooKeeper %s%s (%d topics)",
            self._suffix,
            self._uri,
            self._config.zookeeper.connect,
            self._config.zookeeper.root,
            len(self._registered),
        )
        self._check_session()

    def _start_failed(self, failure: Failure) -> defer.Deferred:
        # Close the session and stop the worker, so a failed start leaves no thread behind
        # and nothing of ours in ZooKeeper; stop() is then a no-op.
        log.error("ZooKeeper registration failed: %s", failure.getErrorMessage())
        stopped = self.stop()
        stopped.addCallback(lambda _: failure)
        return stopped

    async def _register_broker(self) -> None:
        """Create our master/slave node, waiting out a stale holder; then the checksum node."""
        deadline = self._reactor.seconds() + self._stale_wait_s
        warned = False
        while True:
            gone: defer.Deferred = defer.Deferred()
            on_change = partial(self._reactor.callFromThread, _fire, gone)
            holder = await self._run(self._nodes.claim_broker_node, on_change)
            if holder is None:
                break
            remaining = deadline - self._reactor.seconds()
            if remaining <= 0 or self._stopping:
                raise RegistryError(
                    f"another broker with id {self._config.broker_id} seems to be running at "
                    f"{holder}: {self._nodes.broker_path} is still held by another ZooKeeper "
                    f"session after {self._stale_wait_s:.0f} s"
                )
            if not warned:
                warned = True
                log.warning(
                    "%s exists and belongs to another session (data %r), perhaps a crashed "
                    "earlier run; waiting up to %.0f s for ZooKeeper to expire it",
                    self._nodes.broker_path,
                    holder,
                    remaining,
                )
            timer = self._reactor.callLater(min(remaining, STALE_NODE_POLL_S), _fire, gone)
            await gone
            if timer.active():
                timer.cancel()
        self._broker_registered = True
        if self.is_master:
            await self._run(self._nodes.write_checksum, self._checksum)

    def _register_topic_done(self, result: Any, topic: str, topic_config: TopicConfig) -> Any:
        del self._in_flight[topic]
        self.topic_retry.done(topic, result)
        if not isinstance(result, Failure):
            self._registered[topic] = topic_config
            log.info(
                "registered topic %s as %s (%d partitions, publish %s, subscribe %s)",
                topic,
                self._suffix,
                topic_config.num_partitions,
                topic_config.accept_publish,
                topic_config.accept_subscribe,
            )
        return result

    def _unregister_topic_done(self, result: Any, topic: str, topic_config: TopicConfig) -> Any:
        del self._in_flight[topic]
        if isinstance(result, Failure):
            self._registered.setdefault(topic, topic_config)
        else:
            log.info("unregistered topic %s as %s", topic, self._suffix)
        return result

    def _topic_config(self, topic: str) -> TopicConfig:
        # A wildcard section registers under its literal name with its own settings (Java's
        # topic map is keyed by section name); topic_config() does not look patterns up.
        for section in self._config.topics:
            if section.name == topic:
                return section
        return self._config.topic_config(topic)

    def _state_listener(self, state: str) -> None:
        # Runs on kazoo's thread, where ZooKeeper must not be called: record and hand over.
        self._last_state = state
        self._reactor.callFromThread(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        """React on the reactor thread to a kazoo state change (see ``_state_listener``)."""
        if self._stopping or self._registered_session is None:
            return
        if state == KazooState.SUSPENDED:
            self._connected = False
            log.warning(
                "ZooKeeper connection to %s suspended; not acting on ZooKeeper state until "
                "it is back",
                self._config.zookeeper.connect,
            )
        elif state == KazooState.LOST:
            self._connected = False
            log.warning(
                "ZooKeeper session lost; the broker and topic nodes will be registered "
                "again when a new session is established"
            )
        elif state == KazooState.CONNECTED:
            self._check_session()

    def _check_session(self) -> None:
        """Re-register when the live session is not the one our nodes were written in."""
        if self._stopping or self._reregistering:
            return
        self._cancel_retry()
        checked = self._run(self._nodes.session_id)
        checked.addCallback(self._session_checked)
        checked.addErrback(self._log_failure, "cannot read the ZooKeeper session id")

    def _session_checked(self, session: int | None) -> None:
        if self._stopping or self._reregistering or session is None:
            return
        if session == self._registered_session:
            if not self._connected:
                log.info("ZooKeeper connection restored (same session)")
            self._connected = True
            return
        self._reregistering = True
        done = defer.ensureDeferred(self._reregister(session))
        done.addErrback(self._reregister_failed)

    async def _reregister(self, session: int) -> None:
        log.info("new ZooKeeper session 0x%x: registering broker %s again", session, self._suffix)
        await self._register_broker()
        for topic in sorted(set(self._registered) | set(self._in_flight)):
            # A (re-)registration or unregistration in flight decides what is written: wait
            # for it, then write what is recorded now, if anything.
            pending = self._in_flight.get(topic)
            if pending is not None:
                await _fork(pending).addErrback(lambda _: None)
            topic_config = self._registered.get(topic)
            if topic_config is not None:
                await self._run(self._nodes.write_topic, topic, topic_config, False)
        self._registered_session = session
        self._reregistering = False
        self._connected = True
        log.info("registered again broker %s and %d topics", self._suffix, len(self._registered))
        self._check_session()

    def _reregister_failed(self, failure: Failure) -> None:
        self._reregistering = False
        if self._stopping:
            return
        log.warning(
            "registering again in ZooKeeper failed (%s); retrying in %.0f s",
            failure.getErrorMessage(),
            REREGISTER_RETRY_S,
        )
        self._retry_call = self._reactor.callLater(REREGISTER_RETRY_S, self._check_session)

    def _cancel_retry(self) -> None:
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None

    def _stop_done(self, _: Any) -> None:
        self._stop_pool()
        self._stopped = True
        waiters, self._stop_waiters = self._stop_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        log.info("ZooKeeper registry of broker %s stopped", self._suffix)

    def _stop_pool(self) -> None:
        if self._shutdown_trigger is not None:
            self._reactor.removeSystemEventTrigger(self._shutdown_trigger)
            self._shutdown_trigger = None
        if self._pool.started:
            self._pool.stop()

    def _run(self, function: Callable[..., Any], *args: Any) -> defer.Deferred:
        """Run ``function(*args)`` on the worker thread; the Deferred fires on the reactor."""
        if self._stopped:
            return defer.fail(RegistryError("the ZooKeeper registry is stopped"))
        return threads.deferToThreadPool(self._reactor, self._pool, function, *args)

    def _log_failure(self, failure: Failure, what: str) -> None:
        log.warning("%s: %s", what, failure.getErrorMessage())


def _fire(deferred: defer.Deferred) -> None:
    """Fire ``deferred`` with None unless it already fired (reactor thread)."""
    if not deferred.called:
        deferred.callback(None)


def _fork(deferred: defer.Deferred) -> defer.Deferred:
    """Return a new Deferred with ``deferred``'s result, leaving ``deferred`` unchanged."""
    child: defer.Deferred = defer.Deferred()

    def relay(result: Any) -> Any:
        if isinstance(result, Failure):
            child.errback(result)
            return None  # The child carries the failure to its own caller.
        child.callback(result)
        return result

    deferred.addBoth(relay)
    return child
