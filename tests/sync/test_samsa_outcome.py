"""A samsa master's single put: ``SamsaMaster.ready`` and ``forward`` (the put's sync leaves
at the batch end, its record is staged), and ``PutOutcome``, which answers the put once both
halves are in and compares the slave's offset with the master's on every reply. No real
network or time (STYLE 21): a ``MemoryReactorClock``, a ``StringTransport`` and fakes of the
broker and the partition log."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.testing import MemoryReactorClock, StringTransport

from meta.config.settings import SamsaConfig
from meta.protocol.encoding import encode_result
from meta.protocol.message import checksum
from meta.protocol.sync_frame import encode_sync
from meta.server.puts import pack_record
from meta.sync.link_states import DIVERGED, OK
from meta.sync.samsa import SamsaMaster
from meta.sync.samsa_outcome import PutOutcome


class Harness:
    """A ``SamsaMaster`` over a ``MemoryReactorClock`` whose link is connected to a
    ``StringTransport``; the broker's batch end flushes the link, as ``Broker`` does."""

    def __init__(self) -> None:
        self.reactor = MemoryReactorClock()
        self.pending: list = []
        broker = SimpleNamespace(
            end_of_batch=self.end_of_batch, output_pending=self.pending.append, registry=None
        )
        self.master = SamsaMaster(broker, SamsaConfig("127.0.0.1:8124"), self.reactor)
        self.master._detecting = False  # the slave's kind is known (no catch-up here)
        self.master.link.start()
        factory = self.reactor.tcpClients[-1][2]
        self.protocol = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.master.link._protocol = self.protocol  # connected, without the detection
        self.protocol.transport = self.transport

    def end_of_batch(self) -> None:
        for link in self.pending:
            link.flush_output()
        self.pending.clear()


def outcome_of(size: int = 25):
    """A put's outcome on a real master (the compiled build takes no other), its partition's
    state and the put's answers."""
    master, done = Harness().master, []
    state = master._partition("test", 0)
    outcome = PutOutcome(master, state, size, lambda *result: done.append(result), 0.0)
    return outcome, master, state, done


def test_a_reply_at_the_masters_offset_is_answered_200_and_moves_the_acknowledged_end():
    outcome, master, state, done = outcome_of(size=25)
    outcome.master_done(100, None)
    assert done == []  # the slave has not answered yet
    outcome.slave_done(200, b"7 0 100")
    assert done == [(100, None, None)]
    assert sum(master.latency_counts) == 1
    assert (state.acked_end, state.slave_end, state.state) == (125, 125, OK)


def test_a_reply_ending_in_the_masters_offset_digits_at_another_offset_diverges():
    """``1 0 15`` ends with the digits of 5 but not with the field `` 5``: compared as 15."""
    outcome, _master, state, done = outcome_of()
    outcome.master_done(5, None)
    outcome.slave_done(200, b"1 0 15")
    assert (state.state, state.diverged_at) == (DIVERGED, 5)
    assert done == [(5, None, None)]  # still answered 200 (§1.11)
    assert state.acked_end == -1


def test_a_reply_spelling_the_same_offset_otherwise_is_the_same_offset():
    outcome, _master, state, _done = outcome_of(size=10)
    outcome.master_done(5, None)
    outcome.slave_done(200, b"1 0 05")
    assert state.state == OK
    assert state.acked_end == 15


def test_a_body_that_is_no_put_reply_compares_nothing():
    outcome, _master, state, done = outcome_of()
    outcome.master_done(5, None)
    outcome.slave_done(200, b"ok")
    assert state.state == OK and state.acked_end == -1
    assert done == [(5, None, None)]


def test_a_slave_reply_before_the_masters_write_waits_for_it():
    outcome, master, state, done = outcome_of(size=25)
    outcome.slave_done(200, b"7 0 0")
    assert done == [] and sum(master.latency_counts) == 0
    outcome.master_done(0, None)
    assert done == [(0, None, None)]
    assert state.acked_end == 25


def test_a_slave_failure_is_answered_with_its_reason_and_counted():
    outcome, master, _state, done = outcome_of()
    outcome.master_done(5, None)
    outcome.slave_done(500, b"no")
    assert master.consecutive_failures == 1
    assert done == [(5, None, "slave answered 500: no")]


class Log:
    """A partition log that records what was staged."""

    def __init__(self) -> None:
        self.staged: list = []

    def stage(self, record: bytes, done) -> None:
        self.staged.append((record, done))


def test_ready_gives_the_partition_state_only_when_a_put_may_be_forwarded_at_once():
    harness = Harness()
    master = harness.master
    state = master.ready("test", 0)
    assert state is master.partitions[("test", 0)]
    state.gated = True
    assert master.ready("test", 0) is None and not master.takes_run("test", 0)
    state.gated, state.refusing = False, True
    assert master.ready("test", 0) is None
    state.refusing = False
    master._detecting = True
    assert master.ready("test", 0) is None
    master._detecting = False
    master.link._protocol = None  # the link is down
    assert master.ready("test", 0) is None


def test_a_forwarded_put_sends_javas_sync_at_the_batch_end_and_is_answered_once_both_are_in():
    harness = Harness()
    master, partition_log, answers = harness.master, Log(), []
    body = b"hello"
    record = pack_record(body, checksum(body), 2061191510652616704, 0)
    state = master.ready("test", 0)
    master.forward(state, partition_log, record, lambda *result: answers.append(result))
    assert harness.transport.value() == b""  # gathered: the batch end writes it
    assert [staged for staged, _done in partition_log.staged] == [record]
    harness.end_of_batch()
    assert harness.transport.value() == encode_sync(
        b"test", 0, 0, 2061191510652616704, checksum(body), 1, body
    )
    partition_log.staged[0][1](0, None)  # the master's write
    harness.protocol.dataReceived(encode_result(200, b"2061191510652616704 0 0", 1))
    assert answers == [(0, None, None)]
    assert master.link.in_flight == 0
    assert state.acked_end == len(record)
