"""``SamsaMaster``: the master role of synchronous replication.

A samsa master answers a put with 200 only once the record is stored here (after the fsync
this broker's flush mode requires) and its gregor slave answered the record's ``sync`` with
200. What a put accepts and how it is answered is ``meta.server.puts.replicated_put``; this
module forwards a taken put and stages it locally, in one order per partition (both happen
in the same reactor turn, the ``sync`` first), and reports both outcomes once both are known.

Failure handling, the rules of §1.11:

* The link down: every put is refused at once (``Slave is disconnected ``); nothing is ever
  acknowledged from one copy, and the master never degrades to unreplicated writes.
* Advertising: when the slave has been disconnected for longer than
  ``sendToSlaveTimeoutInMills``, or ``slaveContinuousFailureThreshold`` replies in a row
  failed (a timeout, an error, a connection loss), this broker's ``topics-pub`` and legacy
  ``topics/T/B-m`` nodes are withdrawn (``ids/B/master`` and ``topics-sub`` stay: consumers
  keep reading), and the slave is probed with Java's status-topic ``sync`` every
  ``checkSlaveIntervalInMills``; the first 200 republishes them.
* Offsets: every 200 of the slave carries the slave's offset of the record; when it differs
  from the master's the partition is marked ``diverged`` (one ERROR log, stats), the put is
  still answered 200. A metaq-py slave (it answers ``stats sync``) is compared and caught up
  at each connection by ``meta.sync.samsa_catchup``; while that runs (and while the slave's
  kind is being found out) puts to a partition wait, up to the timeout. A partition the
  catch-up finds diverged refuses puts with ``slave diverged at <offset>``.

``stats sync`` (``stats_body``) reports the link and every partition. Reactor thread only.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from typing import Any

from meta.config import SamsaConfig
from meta.protocol.commands import Stats
from meta.protocol.encoding import encode
from meta.protocol.message import HEADER, HEADER_SIZE
from meta.protocol.sync_frame import encode_status_probe
from meta.sync.link_states import CATCHING_UP, COMPARE, DIVERGED, OK, UNKNOWN
from meta.sync.peers import sync_hello
from meta.sync.samsa_catchup import CatchUp, PartitionSync, detect_slave
from meta.sync.samsa_outcome import SLAVE_DISCONNECTED, Done, PutOutcome, RunDone, RunOutcome
from meta.sync.slave_link import DISCONNECTED, TIMED_OUT, SendNow, SlaveLink, send_later

log = logging.getLogger("meta.sync")

# A variadic tuple: the compiled build keeps it one object (a fixed-length tuple type would
# be boxed into a new one for every ``bisect_left``).
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Upper bounds of the ``metaq_sync_latency_seconds`` buckets (a last one is +Inf)."""


class SamsaMaster:
    """The samsa role of a broker (``Broker.sync``).

    Args:
        broker: the broker (``meta.server.broker.Broker``).
        config: the validated ``samsa_master.properties``.
        reactor: the reactor.
        send_now: the link's direct write (``SlaveLink``'s ``send_now``).
    """

    role = "samsa"
    latency_buckets_s = LATENCY_BUCKETS_S

    def __init__(
        self, broker: Any, config: SamsaConfig, reactor: Any, send_now: SendNow = send_later
    ) -> None:
        self.broker = broker
        self.config = config
        self._reactor = reactor
        host, port = config.slave_address
        self.slave_uri = f"meta://{config.slave}"
        self._timeout_s = config.send_to_slave_timeout_ms / 1000
        self.link = SlaveLink(
            host,
            port,
            config.send_to_slave_timeout_ms,
            reactor,
            self._link_up,
            self._link_down,
            broker.end_of_batch,
            send_now,
            broker.output_pending,
        )
        self._in_flight_max = config.syncs_in_flight_max
        self._too_many_in_flight = (
            f"Too many puts in flight to slave '{self.slave_uri}' "
            f"(maxSyncsInFlight={config.syncs_in_flight_max})"
        )
        self.consecutive_failures = 0
        self.probing = False
        self.advertised = True
        self.partitions: dict[tuple[str, int], PartitionSync] = {}
        # True from a connection until the slave's kind is known: puts wait meanwhile.
        self._detecting = False
        self._catch_ups: dict[tuple[str, int], CatchUp] = {}
        self._disconnected_timer: Any = None
        # Time from sending a put's sync to the slave's 200: counts per bucket, sum, count.
        self.latency_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.latency_sum_s = 0.0

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Connect to the slave (and keep reconnecting)."""
        log.info("samsa master: replicating every put to gregor slave %s", self.config.slave)
        self._arm_disconnected_timer()
        self.link.start()

    def stop(self) -> None:
        """Close the link; puts waiting or in flight fail."""
        self._cancel_disconnected_timer()
        self.link.stop()

    @property
    def connected(self) -> bool:
        return self.link.connected

    # --- the put -------------------------------------------------------------------------

    def refusal(self, topic: str, partition: int) -> str | None:
        """Why a put to ``topic-partition`` is refused before anything is sent, or None."""
        if not self.link.connected:
            return SLAVE_DISCONNECTED
        if self.link.in_flight >= self._in_flight_max:
            return self._too_many_in_flight
        state = self.partitions.get((topic, partition))
        if state is not None and state.refusing:
            return f"slave diverged at {state.diverged_at}"
        return None

    def replicate(
        self, topic: str, partition: int, partition_log: Any, record: bytes, done: Done
    ) -> None:
        """Forward ``record`` to the slave and stage it here; ``done`` once both are known.

        A put to a partition that is being caught up (or before the slave's kind is known)
        waits, up to ``sendToSlaveTimeoutInMills``, and is then forwarded in arrival order.
        The caller ends its batch (``broker.end_of_batch``) before the reactor waits again:
        that writes the staged record, then the gathered ``sync``.
        """
        state = self.partitions.get((topic, partition))
        if state is None:
            state = self._partition(topic, partition)
        if self._detecting or state.gated:
            entry = (partition_log, record, done)
            state.wait(self._reactor, self._timeout_s, entry, self.broker.end_of_batch)
            return
        self.forward(state, partition_log, record, done)

    def forward(self, state: PartitionSync, partition_log: Any, record: bytes, done: Done) -> None:
        """Forward ``record`` (a put's, taken) to the slave and stage it here, at once:
        ``replicate`` without its wait, for a caller that ``ready`` gave ``state``."""
        length, crc, msg_id, flag = HEADER.unpack_from(record)
        now_s = self._reactor.seconds()
        outcome = PutOutcome(self, state, length + HEADER_SIZE, done, now_s)
        link = self.link
        # The link's ``send`` without its ``build`` closure: the frame needs the opaque only.
        opaque = link.open_request(outcome.slave_done, now_s)
        if opaque:
            head = state.sync_format % (length, flag, msg_id, crc, opaque)
            link.gather_batched(head + record[HEADER_SIZE:])
        else:
            outcome.slave_done(DISCONNECTED, b"")
        partition_log.stage(record, outcome.master_done)

    def ready(self, topic: str, partition: int) -> PartitionSync | None:
        """The partition's state when a put to it may be forwarded at once (``forward``):
        the link is up and below ``maxSyncsInFlight``, the slave's kind is known, the
        partition is neither being caught up nor refusing puts; else None (the put takes
        ``refusal`` and ``replicate``'s way)."""
        if self._detecting or not self.link.has_room(self._in_flight_max):
            return None
        state = self.partitions.get((topic, partition))
        if state is None:
            return self._partition(topic, partition)
        if state.gated or state.refusing:
            return None
        return state

    def takes_run(self, topic: str, partition: int) -> bool:
        """Whether puts to the partition may be replicated as a run (``replicate_run``) now
        (``ready`` says so). Otherwise each put takes ``replicate``'s way. A run may take
        the link past the bound by its own length (at most one read's puts)."""
        return self.ready(topic, partition) is not None

    def replicate_run(
        self, topic: str, partition: int, partition_log: Any, parts: list, done: RunDone
    ) -> None:
        """``replicate`` for a run of records of one partition (put runs): ``parts`` is record
        header, body, header, body...; the syncs leave in one write, the records are staged as
        one entry, and ``done(offset, error, codes)`` gets every put's slave result code.
        Call only when ``takes_run`` says so."""
        state = self._partition(topic, partition)
        headers, bodies = parts[0::2], parts[1::2]
        outcome = RunOutcome(self, state, bodies, done, self._reactor.seconds())
        unpack, sync_format = HEADER.unpack, state.sync_format

        def build(opaques: list[int]) -> bytes:
            frames: list[bytes] = []
            append = frames.append
            for header, body, opaque in zip(headers, bodies, opaques, strict=True):
                length, crc, msg_id, flag = unpack(header)
                append(sync_format % (length, flag, msg_id, crc, opaque))
                append(body)
            return b"".join(frames)

        if not self.link.send_many(build, outcome.slave_dones(), batched=True):
            outcome.all_failed(DISCONNECTED)
        partition_log.stage(b"".join(parts), outcome.master_done, len(bodies))

    def _partition(self, topic: str, partition: int) -> PartitionSync:
        key = (topic, partition)
        state = self.partitions.get(key)
        if state is None:
            state = self.partitions[key] = PartitionSync(topic, partition)
        return state

    def release(self, state: PartitionSync) -> None:
        """Forward the puts that waited for ``state``'s partition, in arrival order."""
        released = state.release()
        for partition_log, record, done in released:
            if state.refusing:
                done(None, None, f"slave diverged at {state.diverged_at}")
            else:
                self.forward(state, partition_log, record, done)
        if released:
            # Also from timers and store callbacks, which commit and flush nothing themselves.
            self.broker.end_of_batch()

    # --- slave replies, failures and advertising ---------------------------------------

    def slave_answered(self, ok: bool, sent_at_s: float, count: int = 1) -> None:
        """Count ``count`` replies of the slave to puts sent together (the failure threshold),
        and the time they took (``sent_at_s``: when their syncs were sent)."""
        if ok:
            self.consecutive_failures = 0
            latency_s = self._reactor.seconds() - sent_at_s
            self.latency_counts[bisect_left(LATENCY_BUCKETS_S, latency_s)] += count
            self.latency_sum_s += latency_s * count
            return
        assert count == 1
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.config.slave_failure_threshold:
            self.consecutive_failures = 0
            self._withdraw(f"{self.config.slave_failure_threshold} failed replies in a row")

    def offsets_differ(self, state: PartitionSync, master: int, slave: int) -> None:
        """The slave stored a record at another offset than the master: report it once."""
        if state.state != DIVERGED:
            state.diverge(min(master, slave), refuse=False)
            log.error(
                "gregor slave %s stored a record of %s-%d at offset %d, the master at %d: "
                "the copies have diverged",
                self.config.slave,
                state.topic,
                state.partition,
                slave,
                master,
            )

    def _link_up(self) -> None:
        self._cancel_disconnected_timer()
        if self.config.sync_secret is not None:
            self._send_hello(self.config.sync_secret)
        self._detecting = True
        for state in self.partitions.values():
            if state.state == OK:
                state.move(COMPARE)  # until the comparison: puts wait meanwhile
        detect_slave(self.link, self._detected)

    def _send_hello(self, secret: str) -> None:
        """Prove ``syncSecret`` first on the new connection (``meta.sync.peers``): the slave
        reads it before any sync sent after it."""

        def done(code: int, body: bytes) -> None:
            if code != 200:
                log.error(
                    "gregor slave %s refused this master's sync-hello (%s): check syncSecret "
                    "on both sides",
                    self.config.slave,
                    body.decode("utf-8", "replace") or code,
                )

        hello = sync_hello(secret)
        self.link.send(lambda opaque: encode(Stats(hello, opaque)), done)

    def _detected(self, slave_ends: dict[tuple[str, int], int] | None) -> None:
        """The slave's kind is known: catch a metaq-py slave up, then release the puts."""
        if slave_ends is None:
            log.info("gregor slave %s is not a metaq-py broker: no catch-up", self.config.slave)
            for state in self.partitions.values():
                if state.state == CATCHING_UP:
                    state.move(UNKNOWN)
        else:
            for partition_log in self.broker.store.partitions():
                key = (partition_log.topic, partition_log.partition)
                state = self._partition(*key)
                catch_up = CatchUp(self, state, partition_log, slave_ends.get(key, 0))
                self._catch_ups[key] = catch_up
                catch_up.start()
        self._detecting = False
        for state in self.partitions.values():
            if state.waiting and not state.gated:
                self.release(state)
        self._probe()

    def caught_up(self, state: PartitionSync) -> None:
        """A catch-up ended (``state.state`` is ``ok`` or ``diverged``)."""
        self._catch_ups.pop(state.key, None)
        self.release(state)
        self._probe()

    def _link_down(self) -> None:
        self._detecting = False
        for catch_up in list(self._catch_ups.values()):
            catch_up.cancel()
        self._catch_ups.clear()
        for state in self.partitions.values():
            if state.state == CATCHING_UP:
                state.move(UNKNOWN)  # not known: the next connection compares again
            for _log, _record, done in state.release():
                done(None, None, SLAVE_DISCONNECTED)
        self._arm_disconnected_timer()

    def _arm_disconnected_timer(self) -> None:
        self._cancel_disconnected_timer()
        self._disconnected_timer = self._reactor.callLater(
            self._timeout_s, self._disconnected_too_long
        )

    def _cancel_disconnected_timer(self) -> None:
        if self._disconnected_timer is not None and self._disconnected_timer.active():
            self._disconnected_timer.cancel()
        self._disconnected_timer = None

    def _disconnected_too_long(self) -> None:
        self._disconnected_timer = None
        if not self.link.connected:
            self._withdraw(f"disconnected for more than {self.config.send_to_slave_timeout_ms} ms")

    def _withdraw(self, reason: str) -> None:
        """Stop advertising this broker to producers, and probe the slave until it answers."""
        if self.advertised:
            log.warning(
                "gregor slave %s: %s; withdrawing this broker from producers (topics-pub and "
                "topics/T/B-m); consumers keep reading",
                self.config.slave,
                reason,
            )
            self._set_publishing(False)
        if not self.probing:
            self.probing = True
            self._probe()

    def _probe(self) -> None:
        """Send the status probe when it can be answered: connected and nothing catching up."""
        if not self.probing or self._detecting or self._catch_ups or not self.link.connected:
            return
        msg_id = self.broker.ids.next_id()
        # Not sent when the link is down: a new connection probes again (``_detected``).
        self.link.send(lambda opaque: encode_status_probe(msg_id, opaque), self._probed)

    def _probed(self, code: int, body: bytes) -> None:
        if not self.probing:
            return
        if code == 200:
            self.probing = False
            self.consecutive_failures = 0
            if not self.advertised:
                log.info("gregor slave %s answers again: republishing", self.config.slave)
                self._set_publishing(True)
        elif code == TIMED_OUT:
            self._probe()  # the timeout was the wait (Java retries at once)
        elif code != DISCONNECTED:  # a connection comes back through _link_up
            self._reactor.callLater(self.config.check_slave_interval_ms / 1000, self._probe)

    def _set_publishing(self, publishing: bool) -> None:
        self.advertised = publishing
        registry = self.broker.registry
        if registry is None:
            return
        changed = registry.set_publishing(publishing)
        changed.addErrback(
            lambda failure: log.error(
                "could not %s the producer nodes: %s",
                "republish" if publishing else "withdraw",
                failure.getErrorMessage(),
            )
        )

    # --- stats ---------------------------------------------------------------------------

    def partition_states(self) -> list[tuple[str, int, str]]:
        """(topic, partition, ``ok|catching-up|diverged``) of every partition of the master,
        sorted by topic then partition (``stats sync`` and ``/metrics``)."""
        rows = []
        logs = sorted(self.broker.store.partitions(), key=lambda p: (p.topic, p.partition))
        for partition_log in logs:
            state = self.partitions.get((partition_log.topic, partition_log.partition))
            rows.append((partition_log.topic, partition_log.partition, _state_name(state)))
        return rows

    def stats_body(self) -> bytes:
        """The ``stats sync`` body of a master (one ``<key> <value>`` per line)."""
        lines = [
            "role samsa",
            f"slave {self.config.slave}",
            f"connected {_bool(self.link.connected)}",
            f"consecutive_failures {self.consecutive_failures}",
            f"probing {_bool(self.probing)}",
            f"advertised {_bool(self.advertised)}",
        ]
        logs = sorted(self.broker.store.partitions(), key=lambda p: (p.topic, p.partition))
        for partition_log in logs:
            state = self.partitions.get((partition_log.topic, partition_log.partition))
            name, slave_end = (OK, -1) if state is None else (state.state, state.slave_end)
            lines.append(
                f"partition {partition_log.topic}-{partition_log.partition} {name} "
                f"{partition_log.max_offset} {slave_end}"
            )
        return ("\r\n".join(lines) + "\r\n").encode()


def _state_name(state: PartitionSync | None) -> str:
    return OK if state is None else state.state


def _bool(value: bool) -> str:
    return "true" if value else "false"
