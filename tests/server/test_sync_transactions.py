"""Transactions on a samsa master: refused with Java's texts (sync spec §1.9, §1.11).

Goal: no transaction is opened and no transactional put is stored by a broker that
replicates synchronously. Method: a ``Broker`` with in-memory transports whose ``sync`` is
a stand-in samsa role object (only its ``role`` is read here); both the one-by-one handler
and the put-run path of ``BrokerProtocol`` are fed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet.testing import StringTransport

from meta.protocol.codec import decode_all, encode
from meta.protocol.commands import Put, Transaction
from meta.server.protocol import BrokerProtocol
from tests.server.memory_broker import memory_broker

REFUSED = b"Transactions are not supported with synchronous replication"


@pytest.fixture(params=[True, False], ids=["put-runs", "one-by-one"])
def samsa(tmp_path, request):
    broker, _executor = memory_broker(str(tmp_path / "samsa"))
    broker.sync = SimpleNamespace(role="samsa", refuses_puts=False)
    broker.start(listen=False)
    protocol = BrokerProtocol(broker)
    protocol.put_runs = request.param
    transport = StringTransport()
    protocol.makeConnection(transport)
    return SimpleNamespace(broker=broker, protocol=protocol, transport=transport)


def test_puts_with_a_transaction_key_get_500_and_nothing_is_stored(samsa):
    puts = [Put("test", 0, b"a", 0, opaque, tx_key="TX:s:1") for opaque in (1, 2, 3)]
    samsa.protocol.dataReceived(b"".join(encode(put) for put in puts))
    got = [(reply.code, reply.body, reply.opaque) for reply in decode_all(samsa.transport.value())]
    assert got == [(500, REFUSED, 1), (500, REFUSED, 2), (500, REFUSED, 3)]
    assert samsa.broker.counters.put_failed == 3
    assert samsa.broker.store.get("test", 0) is None


def test_begin_gets_500_unsupported_begin_transaction(samsa):
    samsa.protocol.dataReceived(encode(Transaction("TX:s:1", "s", "BEGIN", 4)))
    (reply,) = decode_all(samsa.transport.value())
    assert (reply.code, reply.body, reply.opaque) == (500, b"Unsupported beginTransaction", 4)
    assert not list(samsa.broker.transactions.describe())
