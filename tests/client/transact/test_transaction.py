"""Local transactions of ``MessageProducer`` against scripted loopback brokers.

A ``ScriptedBroker`` is a real TCP server on 127.0.0.1, served by a thread: it decodes
requests with the shared codec, records the exact bytes of every request, and answers from
a script (by default as a broker would; ``END`` never gets an answer). The producer sees the
brokers through a ``StubView`` and a real ``ConnectionPool``, as the factory's ZooKeeper view
would give them, so no ZooKeeper is needed. Every wait polls with a deadline.
"""

from __future__ import annotations

import itertools
import re
import socket
import threading
import time
from collections.abc import Callable
from types import MappingProxyType

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.factory import ConnectionPool
from meta.client.message import Message
from meta.client.produce.producer import MessageProducer
from meta.client.produce.selectors import RoundRobinPartitionSelector
from meta.client.transact import transaction as transaction_module
from meta.client.transact.transaction import new_session_id, next_local_number
from meta.client.zk.cluster_view import EMPTY_SNAPSHOT, TopicSnapshot
from meta.errors import ClientError, NoPartitionError, TransactionError
from meta.protocol.codec import NEED_DATA, Decoder, encode
from meta.protocol.commands import Put, Result, Transaction
from meta.protocol.message import checksum
from meta.protocol.transaction_key import INT_MAX

WAIT_S = 5.0

Answer = Callable[[object], tuple[int, bytes] | None]


def wait_until(condition, timeout_s: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def reply(code: int, body: bytes = b"") -> Answer:
    return lambda command: (code, body)


def no_reply(command) -> None:
    return None


class ScriptedBroker:
    """A loopback broker that records each request's exact bytes and answers from a script.

    ``script`` maps a transaction type (``"BEGIN"``, ...) or ``"put"`` to an answer function
    returning ``(code, body)`` or None (no reply). Unscripted requests get a broker's usual
    answer: puts ``200 "<msgId> <partition> <offset>"`` (offset -1 with a transaction key),
    ``PREPARE`` ``"0"``, ``RECOVER`` an empty list, ``END`` nothing, the rest an empty 200.
    """

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.address = BrokerAddress("127.0.0.1", self.port)
        self.script: dict[str, Answer] = {}
        self._lock = threading.Lock()
        self._requests: list[tuple[object, bytes]] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._next_msg_id = itertools.count(1000)
        self._spawn(self._accept_loop)

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(connection)
            self._spawn(self._serve, connection)

    def _serve(self, connection: socket.socket) -> None:
        decoder, raw, consumed = Decoder(), bytearray(), 0
        while True:
            try:
                data = connection.recv(65536)
            except OSError:
                return
            if not data:
                return
            raw += data
            decoder.receive_data(data)
            while (command := decoder.next_command()) is not NEED_DATA:
                end = len(raw) - decoder.buffered_bytes
                with self._lock:
                    self._requests.append((command, bytes(raw[consumed:end])))
                consumed = end
                answer = self._answer(command)
                if answer is not None:
                    code, body = answer
                    connection.sendall(encode(Result(code, body, command.opaque)))

    def _answer(self, command) -> tuple[int, bytes] | None:
        kind = command.type if isinstance(command, Transaction) else "put"
        scripted = self.script.get(kind)
        if scripted is not None:
            return scripted(command)
        if isinstance(command, Put):
            offset = -1 if command.tx_key is not None else 0
            return 200, b"%d %d %d" % (next(self._next_msg_id), command.partition, offset)
        return {"END": None, "PREPARE": (200, b"0")}.get(command.type, (200, b""))

    @property
    def requests(self) -> list[tuple[object, bytes]]:
        with self._lock:
            return list(self._requests)

    def frames(self) -> list[bytes]:
        return [frame for _command, frame in self.requests]

    def wait_for_requests(self, count: int) -> list[tuple[object, bytes]]:
        return wait_until(lambda: len(self.requests) >= count and self.requests, what="requests")

    def close(self) -> None:
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        except OSError:
            pass
        self._server.close()
        with self._lock:
            sockets = list(self._sockets)
        for connection in sockets:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()
        for thread in self._threads:
            thread.join(WAIT_S)


class StubView:
    """What ``ZkClusterView`` would show: fixed snapshots per topic."""

    def __init__(self, snapshots: dict[str, TopicSnapshot]) -> None:
        self.snapshots = snapshots

    def publish(self, topic: str) -> None:
        pass

    def unpublish(self, topic: str) -> None:
        pass

    def snapshot(self, topic: str) -> TopicSnapshot:
        return self.snapshots.get(topic, EMPTY_SNAPSHOT)


def snapshot_of(brokers: dict[int, ScriptedBroker], partitions: int = 2) -> TopicSnapshot:
    return TopicSnapshot(
        tuple(Partition(b, p) for b in sorted(brokers) for p in range(partitions)),
        MappingProxyType({b: broker.address for b, broker in brokers.items()}),
    )


def stub_cluster(topics: dict[str, dict[int, ScriptedBroker]]) -> tuple[StubView, ConnectionPool]:
    """A view and a pool holding the brokers of each topic (as the factory keeps them)."""
    view = StubView({topic: snapshot_of(brokers) for topic, brokers in topics.items()})
    pool = ConnectionPool(connect_timeout_s=WAIT_S)
    for topic, snapshot in view.snapshots.items():
        pool.set_brokers(topic, snapshot.brokers.values())
    return view, pool


@pytest.fixture
def brokers():
    started = {1: ScriptedBroker(), 2: ScriptedBroker()}
    yield started
    for broker in started.values():
        broker.close()


@pytest.fixture
def producer(brokers):
    view, pool = stub_cluster({"t": brokers, "u": {2: brokers[2]}})
    made = MessageProducer(pool, RoundRobinPartitionSelector(), 1 << 20, view=view)
    made.publish("t")
    made.publish("u")
    yield made
    made.shutdown()
    pool.close()


def put_frame(topic: str, partition: int, data: bytes, key: str, opaque: int) -> bytes:
    header = f"put {topic} {partition} {len(data)} 0 {checksum(data)} {key} {opaque}\r\n"
    return header.encode() + data


def test_session_ids_have_the_java_shape_and_never_contain_a_colon():
    first, second = new_session_id(), new_session_id()
    assert re.fullmatch(r"[^:\s]+-[0-9]+-[0-9]+", first)
    assert first.rsplit("-", 1)[0] == second.rsplit("-", 1)[0]
    assert int(second.rsplit("-", 1)[1]) == int(first.rsplit("-", 1)[1]) + 1


def test_local_numbers_count_up_and_wrap_within_32_bits(monkeypatch):
    first = next_local_number()
    assert next_local_number() == first + 1
    monkeypatch.setattr(transaction_module, "_local_numbers", itertools.count(INT_MAX))
    assert [next_local_number(), next_local_number()] == [INT_MAX, 1]


def test_the_first_send_begins_on_the_selected_broker_then_puts_with_the_key(producer, brokers):
    producer.begin_transaction(timeout=10)
    result = producer.send_message(Message("t", b"hello"))
    key = producer.current_transaction().key
    sid = producer.session_id
    assert re.fullmatch(rf"TX:{re.escape(sid)}:[0-9]+", key)
    # Round robin starts at index 1 of [1-0, 1-1, 2-0, 2-1]: broker 1, partition 1.
    assert brokers[1].frames() == [
        f"transaction {key} {sid} BEGIN 10 1\r\n".encode(),
        put_frame("t", 1, b"hello", key, 2),
    ]
    assert result.success and result.partition == Partition(1, 1) and result.offset == -1
    assert brokers[2].frames() == []


def test_commit_sends_commit_one_phase_and_frees_the_thread(producer, brokers):
    producer.begin_transaction()
    producer.send_message(Message("t", b"a"))
    key, sid = producer.current_transaction().key, producer.session_id
    producer.commit()
    assert brokers[1].frames()[0] == f"transaction {key} {sid} BEGIN 1\r\n".encode()
    assert brokers[1].frames()[2] == f"transaction {key} {sid} COMMIT_ONE_PHASE 3\r\n".encode()
    assert producer.current_transaction() is None
    producer.begin_transaction()  # The thread is free for the next one.


def test_rollback_sends_rollback(producer, brokers):
    producer.begin_transaction()
    producer.send_message(Message("t", b"a"))
    key, sid = producer.current_transaction().key, producer.session_id
    producer.rollback()
    assert brokers[1].frames()[-1] == f"transaction {key} {sid} ROLLBACK 3\r\n".encode()
    assert producer.current_transaction() is None


def test_every_put_of_a_transaction_goes_to_the_broker_that_began_it(producer, brokers):
    producer.begin_transaction()
    results = [producer.send_message(Message("t", b"m%d" % n)) for n in range(6)]
    producer.commit()
    assert {result.partition.broker_id for result in results} == {1}
    assert {result.partition for result in results} == {Partition(1, 0), Partition(1, 1)}
    commands = [command for command, _frame in brokers[1].requests]
    assert [type(command).__name__ for command in commands].count("Put") == 6
    assert brokers[2].frames() == []


def test_a_topic_the_pinned_broker_does_not_serve_is_refused(producer, brokers):
    producer.begin_transaction()
    producer.send_message(Message("t", b"a"))  # pinned to broker 1; "u" lives on broker 2
    with pytest.raises(NoPartitionError, match="in a transaction"):
        producer.send_message(Message("u", b"b"))


def test_beginning_twice_on_one_thread_raises_transaction_in_progress(producer):
    producer.begin_transaction()
    with pytest.raises(TransactionError, match="transaction in progress"):
        producer.begin_transaction()


def test_commit_or_rollback_before_any_send_only_unbind_the_transaction(producer, brokers):
    producer.begin_transaction()
    producer.commit()
    producer.begin_transaction()
    producer.rollback()
    producer.send_message(Message("t", b"plain"))
    assert [frame[:4] for frame in brokers[1].frames()] == [b"put "]


def test_commit_or_rollback_without_a_transaction_raises(producer):
    with pytest.raises(TransactionError, match="no transaction is started"):
        producer.commit()
    with pytest.raises(TransactionError, match="no transaction is started"):
        producer.rollback()


def test_the_context_manager_commits_when_the_block_succeeds(producer, brokers):
    with producer.begin_transaction(timeout=3) as transaction:
        producer.send_message(Message("t", b"a"))
    assert transaction.finished and producer.current_transaction() is None
    assert brokers[1].frames()[-1].split()[3] == b"COMMIT_ONE_PHASE"


def test_the_context_manager_rolls_back_and_reraises_on_an_exception(producer, brokers):
    with pytest.raises(ValueError, match="boom"):
        with producer.begin_transaction():
            producer.send_message(Message("t", b"a"))
            raise ValueError("boom")
    assert producer.current_transaction() is None
    assert brokers[1].frames()[-1].split()[3] == b"ROLLBACK"


def test_the_context_manager_keeps_the_block_error_when_the_rollback_fails(producer, brokers):
    brokers[1].script["ROLLBACK"] = reply(500, b"rollback failed")
    with pytest.raises(ValueError, match="boom"):
        with producer.begin_transaction():
            producer.send_message(Message("t", b"a"))
            raise ValueError("boom")
    assert producer.current_transaction() is None


def test_the_context_manager_does_nothing_more_after_an_explicit_commit(producer, brokers):
    with producer.begin_transaction() as transaction:
        producer.send_message(Message("t", b"a"))
        transaction.commit()
    kinds = [frame.split()[3] for frame in brokers[1].frames() if frame.startswith(b"trans")]
    assert kinds == [b"BEGIN", b"COMMIT_ONE_PHASE"]


def test_two_threads_get_independent_transactions(producer, brokers):
    """Goal: transactions are bound per thread. Method: two threads each begin, send while
    the other's transaction is open (a barrier makes them overlap) and commit; each commit
    names only its own key, and each put carries its own thread's key."""
    barrier = threading.Barrier(2, timeout=WAIT_S)
    keys: dict[str, str] = {}
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            producer.begin_transaction()
            barrier.wait()
            producer.send_message(Message("t", name.encode()))
            keys[name] = producer.current_transaction().key
            barrier.wait()
            producer.commit()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not errors and keys["a"] != keys["b"]
    requests = brokers[1].requests + brokers[2].requests
    for name, key in keys.items():
        (put,) = [c for c, _ in requests if isinstance(c, Put) and c.data == name.encode()]
        assert put.tx_key == key
        commits = [c for c, _ in requests if getattr(c, "type", None) == "COMMIT_ONE_PHASE"]
        assert [c.tx_key for c in commits].count(key) == 1
    assert producer.current_transaction() is None


def test_a_500_reply_raises_the_broker_text_and_still_frees_the_thread(producer, brokers):
    text = b"Local transaction 'TX:x:1' has not been started."
    brokers[1].script["COMMIT_ONE_PHASE"] = reply(500, text)
    producer.begin_transaction()
    producer.send_message(Message("t", b"a"))
    with pytest.raises(TransactionError) as caught:
        producer.commit()
    assert str(caught.value) == text.decode()
    assert producer.current_transaction() is None


def test_a_failed_begin_raises_and_the_next_send_begins_again(producer, brokers):
    brokers[1].script["BEGIN"] = reply(503, b"busy")
    producer.begin_transaction()
    with pytest.raises(TransactionError, match="503"):
        producer.send_message(Message("t", b"a"))
    del brokers[1].script["BEGIN"]
    result = producer.send_message(Message("t", b"b"))
    assert result.success and result.offset == -1
    begins = [frame for frame in brokers[1].frames() + brokers[2].frames() if b" BEGIN " in frame]
    assert len(begins) == 2


def test_a_commit_without_reply_says_the_transaction_state_is_unknown(producer, brokers):
    brokers[1].script["COMMIT_ONE_PHASE"] = no_reply
    producer.set_transaction_request_timeout(0.3)
    producer.begin_transaction()
    producer.send_message(Message("t", b"a"))
    started = time.monotonic()
    with pytest.raises(TransactionError, match="the transaction state is unknown"):
        producer.commit()
    assert time.monotonic() - started < WAIT_S
    assert producer.current_transaction() is None


def test_the_transaction_request_timeout_defaults_to_5_s_and_must_be_positive(producer):
    assert producer.transaction_request_timeout_s == 5.0
    for bad in (0, -1, "1", True):
        with pytest.raises(ClientError):
            producer.set_transaction_request_timeout(bad)


def test_a_bad_transaction_timeout_is_refused(producer):
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(ClientError):
            producer.begin_transaction(timeout=bad)
    assert producer.current_transaction() is None


def test_send_message_async_is_refused_inside_a_transaction(producer, brokers):
    producer.begin_transaction()
    with pytest.raises(TransactionError, match="send_message_async"):
        producer.send_message_async(Message("t", b"a"))
    producer.rollback()
    assert producer.send_message_async(Message("t", b"b")).result(WAIT_S).success


def test_commit_from_another_thread_is_refused(producer):
    transaction = producer.begin_transaction()
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(errors, transaction.commit))
    thread.start()
    thread.join(WAIT_S)
    assert len(errors) == 1 and isinstance(errors[0], TransactionError)
    assert producer.current_transaction() is transaction


def _capture(errors: list[BaseException], call) -> None:
    try:
        call()
    except BaseException as error:
        errors.append(error)


def test_direct_mode_has_no_transactions(brokers):
    pool = ConnectionPool(connect_timeout_s=WAIT_S)
    pool.set_brokers("<direct>", [brokers[1].address])
    direct = MessageProducer(
        pool, RoundRobinPartitionSelector(), 1 << 20, direct_broker=brokers[1].address
    )
    try:
        with pytest.raises(TransactionError, match="direct mode"):
            direct.begin_transaction()
    finally:
        direct.shutdown()
        pool.close()
