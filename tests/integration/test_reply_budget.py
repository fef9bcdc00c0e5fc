"""Clients that never read their replies cannot take the broker's memory or its latency.

A real broker process with the default ``maxQueuedReplyBytes`` and a partition of about
1 MiB: twenty connections send ``get ... 1048576`` in a loop and never read
(``meta.bench.abuse.NonReadingGets``), while a victim connection times ``version`` round
trips. The broker must stop reading from the abusers (their sends stall: each connection
as soon as its transport's buffer is full, so the budget need not act), its RSS must stay
within ``RSS_GROWTH_MAX_BYTES`` of what it was before (``docs/security.md``: the bound
plus 32 MiB), and, while the abusers stay connected and keep trying to send, the victim's
round trips must stay short (p99 under ``VICTIM_P99_S``, checked loosely: the machine
running the tests may be busy). From the moment the abusers start, too, the victim's p99
must stay within ``ABUSED_P99_FACTOR`` times its quiet p99 (or ``ABUSED_P99_FLOOR_S``).
"""

from __future__ import annotations

import threading
import time

from meta.bench.abuse import NonReadingGets
from meta.protocol.commands import Put, Stats, Version
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for

TOPIC = "abuse"
ABUSERS = 20
QUEUED_REPLY_BYTES_MAX = 32 * 1024 * 1024  # the default
RSS_GROWTH_MAX_BYTES = QUEUED_REPLY_BYTES_MAX + 32 * 1024 * 1024
VICTIM_P99_S = 0.25
ABUSED_P99_FACTOR = 10
ABUSED_P99_FLOOR_S = 0.025
VICTIM_SAMPLES = 200
STALL_QUIET_S = 2.0
STALL_WAIT_S = 120.0


class Victim(threading.Thread):
    """Times ``version`` round trips on its own connection until ``stop`` is set."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.connection = broker.connect(timeout_s=30)
        self.stop = threading.Event()
        self.seconds: list[float] = []  # every round trip, in order
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.01):
                began = time.monotonic()
                reply = self.connection.request(Version(self.connection.next_opaque()))
                assert reply.code == 200, reply
                self.seconds.append(time.monotonic() - began)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            self.connection.close()


class GetCount:
    """Whether the broker's ``cmd_get`` (``stats``) stayed the same since the last look."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.last = -1

    def settled(self) -> bool:
        with self.broker.connect(timeout_s=60) as connection:
            reply = connection.request(Stats("", connection.next_opaque()))
        line = next(x for x in reply.body.decode().splitlines() if x.startswith("cmd_get "))
        count, self.last = self.last, int(line.split()[1])
        return count == self.last


def fill(broker: BrokerProcess) -> None:
    data = b"x" * (256 * 1024)
    with broker.connect() as connection:
        for opaque in range(4):
            put = Put(TOPIC, 0, data, 0, opaque, checksum(data))
            assert connection.request(put).code == 200


def test_clients_that_never_read_replies_are_bounded_and_others_are_served(tmp_path):
    """Goal: the bytes of replies queued across connections are bounded. Method: see the
    module docstring; the abusers run until none of them could send for 2 s and the broker
    handled no get between two looks at its ``stats``."""
    broker = BrokerProcess(tmp_path, topics={TOPIC: {}}).start()
    try:
        fill(broker)
        rss_before = broker.rss_bytes()
        victim = Victim(broker)
        victim.start()
        abusers = NonReadingGets(("127.0.0.1", broker.port), TOPIC, ABUSERS).start()
        try:
            gets = GetCount(broker)
            wait_for(
                lambda: abusers.stalled(STALL_QUIET_S) and gets.settled(),
                timeout_s=STALL_WAIT_S,
                what="the broker to stop reading from the abusers",
            )
            growth = broker.rss_bytes() - rss_before
            first = len(victim.seconds)
            wait_for(
                lambda: len(victim.seconds) >= first + VICTIM_SAMPLES or victim.error,
                timeout_s=60,
                what="the victim's round trips",
            )
            steady = sorted(victim.seconds[first : first + VICTIM_SAMPLES])
        finally:
            abusers.close()
            victim.stop.set()
            victim.join(30)
        assert victim.error is None, victim.error
        assert growth < RSS_GROWTH_MAX_BYTES, f"RSS grew by {growth >> 20} MiB"
        p99 = steady[int(len(steady) * 0.99) - 1]
        assert p99 < VICTIM_P99_S, f"the victim's p99 round trip was {p99 * 1000:.0f} ms"
        with broker.connect() as connection:
            assert connection.request(Version(connection.next_opaque())).code == 200
    finally:
        broker.stop()


def p99(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)]


def test_clients_that_never_read_slow_others_by_a_bounded_factor_from_the_start(tmp_path):
    """Goal: the broker stops reading from a connection whose replies are not read as soon
    as its transport's buffer is full, not once its queue of replies is over the budget, so
    that other clients are not slowed while the abusers ramp up. Method: a victim's
    ``version`` p99 over ``VICTIM_SAMPLES`` round trips quiet, then over as many taken from
    the moment twenty non-reading get connections start: the abused p99 must stay within
    ``ABUSED_P99_FACTOR`` times the quiet one, or ``ABUSED_P99_FLOOR_S`` when that is
    larger (docs/security.md; loosely: the broker measures about 1-3 ms there, against
    about 50 ms when it read on until the reply budget held the abusers)."""
    broker = BrokerProcess(tmp_path, topics={TOPIC: {}}).start()
    try:
        fill(broker)
        victim = Victim(broker)
        victim.start()
        try:
            wait_for(lambda: len(victim.seconds) >= VICTIM_SAMPLES or victim.error, 60, "quiet")
            quiet = p99(victim.seconds[:VICTIM_SAMPLES])
            first = len(victim.seconds)
            with NonReadingGets(("127.0.0.1", broker.port), TOPIC, ABUSERS):
                wait_for(
                    lambda: len(victim.seconds) >= first + VICTIM_SAMPLES or victim.error,
                    timeout_s=120,
                    what="the victim's round trips under abuse",
                )
            abused = p99(victim.seconds[first : first + VICTIM_SAMPLES])
        finally:
            victim.stop.set()
            victim.join(30)
        assert victim.error is None, victim.error
        bound = max(ABUSED_P99_FACTOR * quiet, ABUSED_P99_FLOOR_S)
        assert abused < bound, (
            f"the victim's p99 was {abused * 1000:.1f} ms under abuse, "
            f"{quiet * 1000:.1f} ms quiet (bound {bound * 1000:.0f} ms)"
        )
    finally:
        broker.stop()
