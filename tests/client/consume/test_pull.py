"""Pull API, topic browser, offset resets and broadcast offsets with stub brokers (no network)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from meta.client.cluster import BrokerAddress, Partition
from meta.client.consume.broadcast import local_group_class
from meta.client.consume.consumer import ConsumerConfig
from meta.client.consume.local_offsets import LocalOffsetStorage
from meta.client.consume.pull import MessageIterator, TopicBrowser, fetch, get, offset_of
from meta.client.fetch.manager import FetchManager, FetchRequest, FetchSettings
from meta.client.zk.cluster_view import TopicSnapshot
from meta.errors import ClientError, InvalidRecordError, NoBrokerError
from meta.protocol.commands import LONG_MAX, Data, Get, Offset, Result
from meta.protocol.message import pack_message

P0 = Partition(1, 0)


class StubBroker:
    """Answers get and offset commands from in-memory logs: partition -> (start, bytes)."""

    def __init__(self, logs: dict[int, tuple[int, bytes]], fixed=None) -> None:
        self.logs = logs
        self.fixed = fixed
        self.commands: list = []

    def request(self, command, timeout_s: float = 3.0) -> Future:
        self.commands.append(command)
        future: Future = Future()
        future.set_result(self.fixed if self.fixed is not None else self.answer(command))
        return future

    def answer(self, command) -> Result | Data:
        start, data = self.logs[command.partition]
        end = start + len(data)
        if isinstance(command, Offset):
            return Result(200, b"%d" % min(max(command.offset, start), end), 0)
        if command.offset < start:
            return Result(301, b"%d" % start, 0)
        if command.offset >= end:
            code, body = (301, b"%d" % end) if command.offset == LONG_MAX else (404, b"no")
            return Result(code, body, 0)
        position = command.offset - start
        return Data(data[position : position + command.max_size], 0)


class StubView:
    def __init__(self, broker_ids) -> None:
        self.published: list[str] = []
        self.brokers = {b: BrokerAddress(f"h{b}", 8123) for b in broker_ids}

    def publish(self, topic: str) -> None:
        self.published.append(topic)

    def snapshot(self, topic: str) -> TopicSnapshot:
        return TopicSnapshot(brokers=self.brokers)


class StubPool:
    def __init__(self, connections) -> None:
        self.connections = connections

    def get(self, address):
        return self.connections[int(address.host[1:]) if address is not None else None]


class StubFactory:
    def __init__(self, brokers: dict[int, StubBroker]) -> None:
        self.direct_broker = None
        self.cluster_view = StubView(brokers)
        self.pool = StubPool(brokers)

    def get_partitions_for_topic(self, topic: str) -> list[Partition]:
        return sorted(Partition(b, p) for b, broker in self.pool.connections.items()
                      for p in broker.logs)  # fmt: skip


def records(*bodies: bytes, first_id: int = 1) -> bytes:
    return b"".join(pack_message(first_id + n, 0, body) for n, body in enumerate(bodies))


def test_the_iterator_yields_complete_records_and_counts_consumed_bytes():
    data = records(b"one", b"two")
    iterator = MessageIterator("t", P0, 100, data + data[:10])
    assert iterator.offset == 0 and iterator.has_next()
    assert iterator.offset == 0  # has_next does not consume
    messages = list(iterator)
    assert [(m.data, m.offset, m.partition) for m in messages] == [
        (b"one", 100, P0),
        (b"two", 123, P0),
    ]
    assert iterator.offset == len(data) and not iterator.has_next()


def test_the_iterator_raises_on_a_bad_checksum():
    bad = bytearray(records(b"one"))
    bad[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError):
        list(MessageIterator("t", P0, 0, bytes(bad)))


def test_get_returns_messages_and_none_on_301_403_404():
    broker = StubBroker({0: (50, records(b"a", b"b"))})
    factory = StubFactory({1: broker})
    assert [m.data for m in get(factory, "t", P0, 50)] == [b"a", b"b"]
    assert get(factory, "t", P0, 0) is None  # 301 below the start: the offset is lost
    assert get(factory, "t", P0, 50 + 42) is None  # 404 at the end
    factory.pool.connections[1] = StubBroker({}, fixed=Result(403, b"closed", 0))
    assert get(factory, "t", P0, 0) is None
    factory.pool.connections[1] = StubBroker({}, fixed=Result(500, b"boom", 0))
    with pytest.raises(ClientError, match="500 boom"):
        get(factory, "t", P0, 0)
    assert factory.cluster_view.published == ["t"]  # published once per factory and topic
    assert isinstance(broker.commands[0], Get) and broker.commands[0].group == "Just_for_Browser"


def test_fetch_reports_the_301_offset_and_a_truncated_reply():
    factory = StubFactory({1: StubBroker({0: (50, records(b"a", b"b"))})})
    assert fetch(factory, "t", P0, 0).moved_to == 50
    assert fetch(factory, "t", P0, 0).next_offset == 50
    result = fetch(factory, "t", P0, 50)
    assert [m.data for m in result.messages] == [b"a", b"b"] and result.next_offset == 92
    assert result.moved_to is None and not result.truncated
    assert fetch(factory, "t", P0, 50, max_size=10).truncated
    assert fetch(factory, "t", P0, 92) == fetch(factory, "t", P0, 92)  # 404: nothing
    assert fetch(factory, "t", P0, 92).next_offset == 92
    assert offset_of(factory, "t", P0, 0) == 50 and offset_of(factory, "t", P0, LONG_MAX) == 92


def test_an_unknown_broker_or_bad_arguments_are_refused():
    factory = StubFactory({1: StubBroker({0: (0, b"")})})
    with pytest.raises(NoBrokerError):
        get(factory, "t", Partition(7, 0), 0)
    with pytest.raises(ClientError):
        get(factory, "t", P0, 0, max_size=0)
    with pytest.raises(ClientError):
        fetch(factory, "t", P0, -1)


def test_the_browser_reads_every_partition_in_order_following_301s_and_big_messages():
    big = b"x" * 3000
    one = StubBroker({0: (40, records(b"a", b"b")), 1: (0, records(big, b"c", first_id=5))})
    two = StubBroker({0: (0, b"")})
    factory = StubFactory({1: one, 2: two})
    browsed = list(TopicBrowser(factory, "t", max_size=64))
    assert [(str(m.partition), m.data) for m in browsed] == [
        ("1-0", b"a"),
        ("1-0", b"b"),
        ("1-1", big),
        ("1-1", b"c"),
    ]


def settings(policy: str) -> FetchSettings:
    return FetchSettings("g", 1.0, 5000, 0, policy, 1)


@pytest.mark.parametrize(("policy", "expected"), [("earliest", 40), ("latest", 82)])
def test_earliest_and_latest_ask_the_broker_where_to_go(policy, expected):
    broker = StubBroker({1: (40, records(b"a", b"b"))})
    manager = FetchManager(StubPool({None: broker}), "<t>", settings(policy), {"t": print})
    request = FetchRequest("t", Partition(0, 1), None, 1000)
    assert manager.handle_moved(request, 82) is True
    assert (request.offset, request.modified) == (expected, True)
    assert isinstance(broker.commands[0], Offset)
    start = FetchRequest("t", Partition(0, 1), None, LONG_MAX)
    assert manager.handle_moved(start, 82) and start.offset == 82  # from-max start is adopted


def test_a_failed_offset_request_keeps_the_offset_and_backs_off():
    broker = StubBroker({}, fixed=Result(500, b"no", 0))
    manager = FetchManager(StubPool({None: broker}), "<t>", settings("earliest"), {"t": print})
    request = FetchRequest("t", Partition(0, 1), None, 1000)
    assert manager.handle_moved(request, 82) is True
    assert request.offset == 1000 and request.delay_ms > 0


def test_the_config_accepts_the_new_policies_and_always_options():
    assert ConsumerConfig("g", offset_reset="earliest").offset_reset == "earliest"
    assert ConsumerConfig("g", offset_reset="latest").offset_reset == "latest"
    assert not ConsumerConfig("g").always_from_max
    assert not ConsumerConfig("g", consume_from_max_offset=True).always_from_max
    assert ConsumerConfig("g", consume_from_max_offset="always").always_from_max
    assert ConsumerConfig("g", always_consume_from_max_offset=True).always_from_max
    with pytest.raises(ClientError):
        ConsumerConfig("g", consume_from_max_offset="sometimes")
    with pytest.raises(ClientError):
        ConsumerConfig("g", offset_reset="newest")


class StubFetcher:
    def __init__(self, modified) -> None:
        self.modified = modified
        self.marked: list = []

    def take_modified(self):
        modified, self.modified = self.modified, []
        return modified

    def mark_modified(self, keys) -> None:
        self.marked.extend(keys)


def test_the_broadcast_group_commits_and_loads_offsets_locally(tmp_path):
    storage = LocalOffsetStorage(str(tmp_path / "offsets"))
    group_class = local_group_class(storage, "g-host")
    fetcher = StubFetcher([("t", "1-0", 9, 120)])
    group = group_class(None, "/meta", "g-host", "g-host_c", {"t": 1024}, "DEFAULT", fetcher, 7)
    group.commit()
    assert storage.load("t", "g-host", Partition(1, 0)) == (9, 120)
    assert group.load_offset("t", "1-0") == (9, 120)
    assert group.load_offset("t", "1-1") == (-1, 7)
    (tmp_path / "offsets").write_text("not json")
    group._fetcher = StubFetcher([("t", "1-0", 10, 140)])
    group.commit()  # a failed commit is logged and retried later
    assert group._fetcher.marked == [("t", "1-0")]


def test_always_from_max_starts_a_newly_owned_partition_at_the_tail_despite_a_commit(tmp_path):
    storage = LocalOffsetStorage(str(tmp_path / "offsets"))
    storage.commit("g-host", [("t", Partition(1, 0), 120, 9)])
    group_class = local_group_class(storage, "g-host")
    fetcher = StubFetcher([])
    args = (None, "/meta", "g-host", "g-host_c", {"t": 1024}, "DEFAULT", fetcher, 7)
    assert group_class(*args)._request(("t", "1-0"), None, {}).offset == 120
    tail = group_class(*args, always_from_max=True)._request(("t", "1-0"), None, {})
    assert (tail.msg_id, tail.offset) == (-1, LONG_MAX)
