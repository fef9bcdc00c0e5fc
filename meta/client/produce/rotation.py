"""Keeping unreachable brokers out of a producer's rotation (messages without an ordering key).

A message sent with the round-robin or random selector may go to any partition, so a broker
that refuses connections, drops them or lets a put time out is taken out of the producer's
rotation at once, and later sends choose among the partitions of the brokers still in
rotation. The producer (``MessageProducer``) sends the put again to another broker: always
when the connection cannot be had; for ``send_message`` also when the written put fails
(connection lost, no reply in time). A put written by ``send_message_async`` whose broker
fails afterwards fails its future (its caller decides; nothing waits to resend it), and its
broker leaves the rotation at the next send (``check_timeouts`` sees a timeout there). A
background thread probes each broker out of rotation by connecting to it, after a backoff
that doubles from ``SendRetryPolicy.broker_retry_first_ms`` up to ``broker_retry_max_ms``;
a connection that opens brings the broker back. Messages with a key (the hash selector,
ordered producers) keep going to the partition their key names: moving them would break
their order.

Invariants:

* A broker is out of rotation from its first failure until a probe connects to it or it
  leaves the producer's brokers (``NoBrokerError`` from the pool); ``out_uris`` lists them.
* The probe thread exists only while a broker is out, and ends with ``close``.

Thread-safety: ``BrokerRotation`` is thread-safe (one lock); ``probe`` runs on its thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meta.client.cluster import BrokerAddress
from meta.client.produce.selectors import (
    PartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import (
    ClientClosedError,
    ClientError,
    NoBrokerError,
    NoPartitionError,
    OperationTimeoutError,
)

__all__ = [
    "BrokerRotation",
    "SendRetryPolicy",
    "avoids_unreachable_brokers",
    "is_broker_failure",
]

log = logging.getLogger("meta.client")

KEYLESS_SELECTORS = (RoundRobinPartitionSelector, RandomPartitionSelector)
"""The selectors whose messages may go to any partition, so may avoid a broker."""


@dataclass(frozen=True)
class SendRetryPolicy:
    """How a producer with a keyless selector retries sends and unreachable brokers.

    Attributes:
        attempts: partitions one send tries at most, each on another broker once the
            first fails to connect or answer (1: no retry). Each attempt waits at most the
            send's ``timeout_s``.
        broker_retry_first_ms: the first pause before a broker out of rotation is probed.
        broker_retry_max_ms: the largest pause between two probes of one broker.

    Raises:
        ClientError: a value out of range.
    """

    attempts: int = 3
    broker_retry_first_ms: int = 500
    broker_retry_max_ms: int = 5000

    def __post_init__(self) -> None:
        for name in ("attempts", "broker_retry_first_ms", "broker_retry_max_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClientError(f"SendRetryPolicy.{name} must be a positive int: {value!r}")
        if self.broker_retry_max_ms < self.broker_retry_first_ms:
            raise ClientError(
                "SendRetryPolicy.broker_retry_max_ms must not be below broker_retry_first_ms"
            )


def avoids_unreachable_brokers(selector: PartitionSelector) -> bool:
    """Whether messages routed by ``selector`` may be moved to another broker's partition."""
    return isinstance(selector, KEYLESS_SELECTORS)


def is_broker_failure(error: ClientError, pool_closed: bool) -> bool:
    """Whether ``error`` says a broker failed: a connection refused, lost or closed, or no
    reply in time. A routing error is not one, nor a closed pool (the factory shut down);
    a broker's reply, even a refusal, is no error at all (the broker is alive)."""
    if isinstance(error, NoPartitionError):
        return False
    return not (isinstance(error, ClientClosedError) and pool_closed)


@dataclass
class _Out:
    address: BrokerAddress
    error: str
    delay_s: float
    due: float


class BrokerRotation:
    """The brokers a producer keeps out of rotation, and the thread that probes them.

    Args:
        policy: the backoff of the probes.
        probe: connects to a broker; raises ``ClientError`` while it is unreachable,
            ``NoBrokerError`` once the producer no longer uses it.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        policy: SendRetryPolicy,
        probe: Callable[[BrokerAddress], object],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policy = policy
        self._probe = probe
        self._clock = clock
        self._cond = threading.Condition()
        self._out: dict[str, _Out] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        # broker URI -> (its connection, that connection's timeouts_total at the last look)
        self._timeouts_seen: dict[str, tuple[Any, int]] = {}

    @property
    def any_out(self) -> bool:
        """True while at least one broker is out of rotation (a lock-free snapshot)."""
        return bool(self._out)

    def out_uris(self) -> set[str]:
        """The URIs of the brokers out of rotation now."""
        with self._cond:
            return set(self._out)

    def describe(self) -> str:
        """``"meta://h:p (last error; next probe in 0.4 s)"`` for each broker out."""
        now = self._clock()
        with self._cond:
            return ", ".join(
                f"{uri} ({out.error}; next probe in {max(0.0, out.due - now):.1f} s)"
                for uri, out in sorted(self._out.items())
            )

    def check_timeouts(self, address: BrokerAddress, connection: Any) -> None:
        """Raise ``OperationTimeoutError`` if a put on ``connection`` (to ``address``) got no
        reply in time since the last look: an asynchronous send's timeout is seen here, at
        the next send to that broker. Called by the sending threads; a race between two of
        them at most reports one timeout twice."""
        count = connection.timeouts_total
        seen = self._timeouts_seen.get(address.uri)
        if seen is not None and seen[0] is connection and seen[1] == count:
            return
        self._timeouts_seen[address.uri] = (connection, count)
        if seen is not None and seen[0] is connection:
            raise OperationTimeoutError(f"a put to broker {address.uri} got no reply in time")

    def take_out(self, address: BrokerAddress, error: BaseException) -> None:
        """Take ``address`` out of rotation after ``error`` (no-op if it is out already)."""
        first_s = self._policy.broker_retry_first_ms / 1000
        with self._cond:
            if self._closed or address.uri in self._out:
                return
            self._out[address.uri] = _Out(address, str(error), first_s, self._clock() + first_s)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="meta-broker-probe", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        log.warning("broker %s is out of the producer's rotation: %s", address.uri, error)

    def close(self) -> None:
        """Stop probing; the thread ends. Idempotent."""
        with self._cond:
            self._closed = True
            self._out.clear()
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _run(self) -> None:
        while (address := self._next_due()) is not None:
            try:
                self._probe(address)
            except NoBrokerError:
                self._bring_back(address, "no longer a broker of the producer's topics")
            except ClientError as error:
                self._still_out(address, error)
            else:
                self._bring_back(address, "reachable again")

    def _next_due(self) -> BrokerAddress | None:
        """Wait for the next probe that is due; None once closed or nothing is out."""
        with self._cond:
            while not self._closed and self._out:
                now = self._clock()
                out = min(self._out.values(), key=lambda entry: entry.due)
                if out.due <= now:
                    return out.address
                self._cond.wait(out.due - now)
            self._thread = None
            return None

    def _still_out(self, address: BrokerAddress, error: ClientError) -> None:
        with self._cond:
            out = self._out.get(address.uri)
            if out is not None:
                out.delay_s = min(out.delay_s * 2, self._policy.broker_retry_max_ms / 1000)
                out.due = self._clock() + out.delay_s
                out.error = str(error)

    def _bring_back(self, address: BrokerAddress, why: str) -> None:
        with self._cond:
            if self._out.pop(address.uri, None) is None:
                return
        log.info("broker %s is back in the producer's rotation: %s", address.uri, why)
