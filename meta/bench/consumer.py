"""Consumer scenarios of ``tools/bench``: the client's fetch loop, for throughput and latency.

* ``run_consumer``: one consumer fetch loop (``meta.client.fetch.manager.FetchManager``: get,
  decode, ``ReceivedMessage``, listener call, offset bookkeeping: everything a group member does per
  message except ZooKeeper) reads a backlog of ``count`` messages from offset 0 of one
  partition. Target: 150k msg/s.
* ``run_end_to_end``: a producer puts timestamped messages at a fixed rate on one connection
  while the fetch loop long-polls the same partition from its current end; each
  message's latency is receive time minus send time. Target at 1k msg/s: p50 below 5 ms,
  p99 below 50 ms.

No ZooKeeper is needed: the fetch loop is given the broker's address directly. Every wait is
bounded (``timeout_s``); the fetch threads are stopped and the connections closed on return.
Thread affinity: the caller's thread drives; listeners run on the fetch thread.
"""

from __future__ import annotations

import struct
import threading
import time

from meta.bench.load import BenchError
from meta.client.cluster import BrokerAddress, Partition
from meta.client.factory import ConnectionPool
from meta.client.fetch.manager import FetchManager, FetchRequest, FetchSettings
from meta.client.net.connection import BrokerConnection
from meta.protocol.commands import LONG_MAX, Get, Put, Result
from meta.protocol.message import checksum

CONSUMER_TARGET_MSG_PER_S = 150_000.0
E2E_RATE_PER_S = 1000.0
E2E_P50_TARGET_MS = 5.0
E2E_P99_TARGET_MS = 50.0
MAX_SIZE_BYTES = 1 << 20
_STAMP = struct.Struct(">q")


def _fetch_manager(pool: ConnectionPool, long_poll_ms: int, topic: str, listener) -> FetchManager:
    settings = FetchSettings(
        group="bench",
        fetch_timeout_s=10.0,
        max_delay_fetch_ms=100,
        long_poll_ms=long_poll_ms,
        offset_reset="earliest",
        fetch_threads=1,
    )
    return FetchManager(pool, "bench", settings, {topic: listener})


def _request(topic: str, address: tuple[str, int], offset: int) -> FetchRequest:
    broker = BrokerAddress(address[0], address[1])
    return FetchRequest(topic, Partition(0, 0), broker, offset, max_size=MAX_SIZE_BYTES)


class _Counter:
    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = 0
        self.last_s = 0.0
        self.done = threading.Event()

    def __call__(self, message) -> None:
        self.seen += 1
        if self.seen >= self.count:
            self.last_s = time.monotonic()
            self.done.set()


def run_consumer(address: tuple[str, int], topic: str, count: int, timeout_s: float) -> dict:
    """Read ``count`` messages from offset 0 of partition 0 with the client's fetch loop."""
    counter = _Counter(count)
    pool = ConnectionPool()
    manager = _fetch_manager(pool, 0, topic, counter)
    cpu_start = time.process_time()
    start = time.monotonic()
    manager.start([_request(topic, address, 0)])
    try:
        if not counter.done.wait(timeout_s):
            raise BenchError(f"the consumer got {counter.seen} of {count} in {timeout_s} s")
    finally:
        manager.stop()
        pool.close()
    seconds = max(counter.last_s - start, 1e-9)
    return {
        "messages": count,
        "seconds": seconds,
        "msg_per_s": count / seconds,
        "client_cpu_s": time.process_time() - cpu_start,
    }


def run_end_to_end(
    address: tuple[str, int], topic: str, message_bytes: int, rate_per_s: float, duration_s: float
) -> dict:
    """Put at ``rate_per_s`` for ``duration_s`` while the fetch loop long-polls; latencies."""
    latencies: list[float] = []
    lock = threading.Lock()

    def received(message) -> None:
        (sent_ns,) = _STAMP.unpack_from(message.data)
        with lock:
            latencies.append((time.monotonic_ns() - sent_ns) / 1e6)

    with BrokerConnection(address[0], address[1]) as connection:
        end = _end_offset(connection, topic)
        pool = ConnectionPool()
        manager = _fetch_manager(pool, 1000, topic, received)
        manager.start([_request(topic, address, end)])
        try:
            sent = _put_at_rate(connection, topic, message_bytes, rate_per_s, duration_s)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and len(latencies) < sent:
                time.sleep(0.01)
        finally:
            manager.stop()
            pool.close()
    if len(latencies) < sent:
        raise BenchError(f"only {len(latencies)} of {sent} messages arrived")
    return {"messages": sent, "latencies_ms": latencies, "rate_per_s": rate_per_s}


def _end_offset(connection: BrokerConnection, topic: str) -> int:
    reply = connection.request(Get(topic, "bench", 0, LONG_MAX, 1024, connection.next_opaque()))
    if isinstance(reply, Result) and reply.code in (301, 404):
        return int(reply.body) if reply.code == 301 else 0
    raise BenchError(f"cannot find the end of {topic}-0: {reply!r}")


def _put_at_rate(
    connection: BrokerConnection, topic: str, message_bytes: int, rate_per_s: float, seconds: float
) -> int:
    """Synchronous puts on a fixed schedule; the first 8 bytes carry the send time."""
    padding = b"x" * max(0, message_bytes - _STAMP.size)
    interval_s = 1.0 / rate_per_s
    start = time.monotonic()
    sent = 0
    while (due := start + sent * interval_s) < start + seconds:
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        data = _STAMP.pack(time.monotonic_ns()) + padding
        put = Put(topic, 0, data, 0, connection.next_opaque(), checksum(data))
        reply = connection.request(put)
        if not isinstance(reply, Result) or reply.code != 200:
            raise BenchError(f"put failed: {reply!r}")
        sent += 1
    return sent
