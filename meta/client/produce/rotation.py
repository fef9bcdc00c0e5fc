"""Keeping unreachable brokers out of a producer's rotation (messages without an ordering key).

A message sent with the round-robin or random selector may go to any partition, so a broker
that refuses connections, drops them or lets a put time out is taken out of the producer's
rotation at once: the send is tried again on a partition of another broker, and later sends
choose among the partitions of the brokers still in rotation. A background thread probes
each broker out of rotation by connecting to it, after a backoff that doubles from
``SendRetryPolicy.broker_retry_first_ms`` up to ``broker_retry_max_ms``; a connection that
opens brings the broker back. Messages with a key (the hash selector, ordered producers)
keep going to the partition their key names: moving them would break their order.

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
from concurrent.futures import CancelledError, Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from meta.client.cluster import BrokerAddress
from meta.client.produce.selectors import (
    PartitionSelector,
    RandomPartitionSelector,
    RoundRobinPartitionSelector,
)
from meta.errors import ClientError, NoBrokerError, NoPartitionError

__all__ = ["BrokerRotation", "SendRetryPolicy", "avoids_unreachable_brokers", "send_with_retries"]

SendOnce = Callable[[], tuple[BrokerAddress | None, Future]]
"""Routes and sends one put: ``(broker, future)``; broker None when routing failed."""

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


def send_with_retries(
    send_once: SendOnce, rotation: BrokerRotation, attempts: int, is_open: Callable[[], bool]
) -> Future:
    """Send with ``send_once``; after a broker failure take that broker out of rotation and
    send again (to a broker still in rotation), ``attempts`` times at most.

    A broker failure is a ``ClientError`` of the connection: refused or lost, or no reply in
    time. A reply, even a refusal, is not one (the broker is alive), nor is a routing error.

    Returns:
        A future with the first success or the last failure.
    """
    outer: Future = Future()
    _send_attempt(outer, send_once, rotation, attempts, is_open)
    return outer


def _send_attempt(
    outer: Future,
    send_once: SendOnce,
    rotation: BrokerRotation,
    attempts_left: int,
    is_open: Callable[[], bool],
) -> None:
    address, inner = send_once()

    def done(finished: Future) -> None:
        error: BaseException | None
        error = CancelledError() if finished.cancelled() else finished.exception()
        if error is None:
            _settle(outer, finished.result(), None)
            return
        broken = isinstance(error, ClientError) and not isinstance(error, NoPartitionError)
        if address is not None and broken and is_open():
            rotation.take_out(address, error)
            if attempts_left > 1 and not outer.cancelled():
                _send_attempt(outer, send_once, rotation, attempts_left - 1, is_open)
                return
        _settle(outer, None, error)

    inner.add_done_callback(done)


def _settle(outer: Future, result: Any, error: BaseException | None) -> None:
    try:
        if error is None:
            outer.set_result(result)
        else:
            outer.set_exception(error)
    except InvalidStateError:
        pass  # The caller gave up (cancelled) meanwhile.
