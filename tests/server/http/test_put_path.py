"""An HTTP put takes the TCP path's single put (``put_run.handle_single_put``): its rules
hold over HTTP where that path decides differently from ``handle_put``.

Goal: the site's partition lookups are forgotten on a reload, a slave refuses the put with
403, and on a samsa master the put is forwarded and answered only once replicated. Method:
HTTP/1.1 bytes fed to a ``ProtocolSite`` channel on an in-memory transport (STYLE 21), a
``Clock`` broker, and for replication a stand-in samsa role that records what it is asked
to replicate.
"""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.task import Clock

from meta.protocol.message import iter_messages
from meta.server.broker import Broker
from meta.server.http.resource import ProtocolSite
from tests.server.http.test_resource import PEER, RecordingTransport, parse, post
from tests.server.memory_broker import memory_broker
from tests.server.test_reload import Setup
from tests.store.conftest import ManualExecutor


def put(site: ProtocolSite, partition: int, body: bytes = b"hello") -> RecordingTransport:
    """One put on a new connection of ``site``; returns its transport."""
    channel = site.buildProtocol(PEER)
    transport = RecordingTransport([])
    channel.makeConnection(transport)
    query = b"/put?topic=test&partition=%d&flag=7&length=%d" % (partition, len(body))
    channel.dataReceived(post(query, body))
    return transport


def test_a_reload_that_lowers_the_partition_count_refuses_the_next_http_put(tmp_path):
    """The site caches each partition's lookup for every connection; a reload must drop it,
    as it drops a TCP connection's (test_reload's test of the fast path)."""
    setup = Setup(tmp_path, topics={"test": {"numPartitions": 2}, "idle": {}})
    setup.broker.start(listen=False)
    site = ProtocolSite(setup.broker, Clock())
    first, cached = put(site, 1), put(site, 1)  # the first creates the partition
    setup.executor.run_all()
    assert [parse(transport.value())[0] for transport in (first, cached)] == [200, 200]

    setup.reload(topics={"test": {"numPartitions": 1}, "idle": {}})

    code, _, body = parse(put(site, 1).value())
    assert (code, body.endswith(b"Detail:wrong partition 1")) == (500, True)
    setup.reload(topics={"test": {"numPartitions": 2}, "idle": {}})
    again = put(site, 1)
    setup.executor.run_all()
    assert parse(again.value())[0] == 200


def _broker(tmp_path) -> tuple[Broker, ManualExecutor]:
    return memory_broker(str(tmp_path / "data"))


def test_a_slave_refuses_an_http_put_with_403_and_stores_nothing(tmp_path):
    broker, executor = _broker(tmp_path)
    broker.refuses_puts = True
    broker.start(listen=False)
    code, _, _ = parse(put(ProtocolSite(broker, Clock()), 0).value())
    executor.run_all()
    assert code == 403
    assert broker.counters.cmd_put == 1
    assert broker.store.get("test", 0) is None


def test_on_a_samsa_master_an_http_put_is_answered_once_replicated(tmp_path):
    broker, _ = _broker(tmp_path)
    forwarded = []
    broker.sync = SimpleNamespace(
        role="samsa",
        refuses_puts=False,
        takes_run=lambda topic, partition: True,
        refusal=lambda topic, partition: None,
        replicate=lambda *arguments: forwarded.append(arguments),
        # The single put's way: ``ready`` gives a state that ``forward`` gets back.
        ready=lambda topic, partition: (topic, partition),
        forward=lambda state, *arguments: forwarded.append((*state, *arguments)),
    )
    broker.start(listen=False)
    site = ProtocolSite(broker, Clock())
    put(site, 0)  # the partition's first put creates it (handle_put, replicated too)
    transport = put(site, 0, b"world")

    assert transport.value() == b""  # no answer before both copies are stored
    topic, partition, _log, record, done = forwarded[-1]
    (message,) = iter_messages(record)
    assert (topic, partition, message.payload, message.flag) == ("test", 0, b"world", 7)
    done(42, None, None)
    code, _, body = parse(transport.value())
    assert (code, body) == (200, b"%d 0 42" % message.msg_id)
    assert len(forwarded) == 2
