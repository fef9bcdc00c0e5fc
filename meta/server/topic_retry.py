"""Topic registrations that failed, retried until they succeed.

What lives here: ``TopicRetry``, which ``BrokerRegistry`` hands every topic whose
registration failed (a put that created a topic while ZooKeeper was unreachable, a burst of
new topics just after an outage, a reload). Reasons are logged with
``meta.errors.describe_error`` (kazoo's timeouts carry an empty message, so the type name is
always given).

Invariants:

* A topic stays pending until a registration of it succeeds or it is unregistered (or the
  registry stops); it is then forgotten.
* One retry is in flight at a time, oldest pending topic first; after a success the next
  topic follows at once, after a failure the delay doubles from ``RETRY_DELAY_FIRST_S`` up
  to ``RETRY_DELAY_MAX_S``. While the registry is not connected (suspended, or a lost
  session not yet registered again) nothing is sent; readiness is checked every
  ``CONNECTED_POLL_S``, so pending topics go out within seconds of ZooKeeper's return.
* Retries use ``register_topic(topic, force=True)``: a topic never registered is written,
  and one whose rewrite after a reload failed is rewritten.

Thread affinity: reactor thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from twisted.python.failure import Failure

from meta.errors import describe_error

__all__ = ["TopicRetry"]

log = logging.getLogger("meta.registry")

RETRY_DELAY_FIRST_S = 0.5
RETRY_DELAY_MAX_S = 5.0
CONNECTED_POLL_S = 0.5


class TopicRetry:
    """Retries the registration of topics until it succeeds.

    Args:
        registry: the ``BrokerRegistry``; provides ``connected`` and ``register_topic``.
        reactor: provides ``callLater``.
    """

    def __init__(self, registry: Any, reactor: Any) -> None:
        self._registry = registry
        self._reactor = reactor
        self._pending: dict[str, int] = {}  # topic -> failed attempts, oldest first
        self._delay_s = RETRY_DELAY_FIRST_S
        self._call: Any = None
        self._in_flight: str | None = None
        self._stopped = False

    @property
    def pending_topics(self) -> list[str]:
        """The topics waiting for a successful registration, oldest first."""
        return list(self._pending)

    def done(self, topic: str, result: Any) -> None:
        """Record the outcome of a registration of ``topic``: a ``Failure`` or a success."""
        if isinstance(result, Failure):
            self.failed(topic, result)
        else:
            self.succeeded(topic)

    def failed(self, topic: str, failure: Failure) -> None:
        """Record that registering ``topic`` failed; it is retried until it succeeds."""
        if self._stopped:
            return
        if topic not in self._pending:
            # The caller logs this first failure (with ``describe_error``); retries log here.
            self._pending[topic] = 1
            log.debug("topic %s waits for registration: %s", topic, describe_error(failure))
        self._schedule(self._delay_s)

    def succeeded(self, topic: str) -> None:
        """Stop retrying ``topic``: a registration of it succeeded (a retry or another call)."""
        attempts = self._pending.pop(topic, None)
        if attempts is not None:
            log.info("registered topic %s in ZooKeeper after %d failed attempts", topic, attempts)

    def forget(self, topic: str) -> None:
        """Stop retrying ``topic``: it was unregistered."""
        self._pending.pop(topic, None)

    def stop(self) -> None:
        """Stop retrying (the registry is stopping)."""
        self._stopped = True
        self._pending.clear()
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self, delay_s: float) -> None:
        if self._call is None and self._in_flight is None and self._pending:
            self._call = self._reactor.callLater(delay_s, self._retry)

    def _retry(self) -> None:
        self._call = None
        if self._stopped or not self._pending:
            return
        if not self._registry.connected:
            self._schedule(CONNECTED_POLL_S)
            return
        topic = next(iter(self._pending))
        self._in_flight = topic
        attempt = self._registry.register_topic(topic, force=True)
        attempt.addCallbacks(self._retried, self._retry_failed, (topic,), None, (topic,))

    def _retried(self, _result: Any, topic: str) -> None:
        self._in_flight = None
        self.succeeded(topic)  # already done by the registry; a no-op then
        self._delay_s = RETRY_DELAY_FIRST_S
        self._schedule(0)

    def _retry_failed(self, failure: Failure, topic: str) -> None:
        self._in_flight = None
        if topic in self._pending:
            self._pending[topic] += 1
            # Move it to the back, so one topic that keeps failing does not hold the others.
            self._pending[topic] = self._pending.pop(topic)
        self._delay_s = min(self._delay_s * 2, RETRY_DELAY_MAX_S)
        log.warning(
            "registering topic %s in ZooKeeper failed again (%s); %d topic(s) wait, next try "
            "in %.1f s",
            topic,
            describe_error(failure),
            len(self._pending),
            self._delay_s,
        )
        self._schedule(self._delay_s)
