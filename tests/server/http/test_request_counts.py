"""``metaq_requests_total``'s split by transport, over any mix of TCP and HTTP requests.

Goal: each ``{cmd, transport}`` counter equals the requests of that command and transport
received so far, and so never goes down, whatever is accepted, refused or rejected.
Method: hypothesis draws sequences of puts (stored, refused by the put rules, over
``maxMessageSize``, and on HTTP refused for a bad parameter or a body that does not match
``length``), gets (found, missed, answered 301) and offsets on both transports; after each
request ``/metrics`` is scraped and compared with a model that counts what the request is:
a put, get or offset command of its transport that reached the broker's handler (an HTTP
request refused for its parameters is a request of the HTTP layer only). No network, no
real time: in-memory transports, a ``Clock``, the flushes run by hand.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meta.config import ZkConfig
from meta.dashboard.metrics import BrokerMetrics
from meta.protocol.codec import encode
from meta.protocol.commands import LONG_MAX, Get, Offset, Put
from meta.server.broker import Broker
from meta.server.http.resource import ProtocolSite
from meta.server.protocol import BrokerProtocol
from meta.store.manager import StoreManager
from tests.server.http.test_resource import PEER, get, post
from tests.server.memory_broker import stop_broker
from tests.store.conftest import ManualExecutor, RecordingFiles, broker_config, topic_config

BODY_BYTES_MAX = 100
TOO_LARGE = b"x" * (BODY_BYTES_MAX + 1)

# (transport, command, how): what a request is, and the command it counts as (None: it
# never reaches a handler). Partition 7 does not exist: the put rules refuse it (500).
REQUESTS = {
    ("tcp", "put-stored"): "put",
    ("tcp", "put-refused"): "put",
    ("tcp", "put-too-large"): "put",
    ("http", "put-stored"): "put",
    ("http", "put-refused"): "put",
    ("http", "put-too-large"): "put",
    ("http", "put-short-body"): None,
    ("http", "put-bad-parameter"): None,
    ("tcp", "get-found"): "get",
    ("tcp", "get-missed"): "get",
    ("tcp", "get-moved"): "get",
    ("http", "get-found"): "get",
    ("http", "get-missed"): "get",
    ("http", "get-moved"): "get",
    ("http", "get-bad-parameter"): None,
    ("tcp", "offset"): "offset",
    ("http", "offset"): "offset",
}

TCP_COMMANDS = {
    "put-stored": Put("test", 0, b"hello", 0, 1),
    "put-refused": Put("test", 7, b"hello", 0, 1),
    "put-too-large": Put("test", 0, TOO_LARGE, 0, 1),
    "get-found": Get("test", "g", 0, 0, 1000, 1),
    "get-missed": Get("test", "g", 1, 0, 1000, 1),
    "get-moved": Get("test", "g", 0, LONG_MAX, 1000, 1),
    "offset": Offset("test", "g", 0, 0, 1),
}

PUT = b"/put/0?topic=test&flag=0&partition="
HTTP_REQUESTS = {
    "put-stored": post(PUT + b"0&length=5", b"hello"),
    "put-refused": post(PUT + b"7&length=5", b"hello"),
    "put-too-large": post(PUT + b"0&length=%d" % len(TOO_LARGE), TOO_LARGE),
    "put-short-body": post(PUT + b"0&length=6", b"hello"),
    "put-bad-parameter": post(PUT + b"x&length=5", b"hello"),
    "get-found": get(b"/get/0?topic=test&partition=0&offset=0&maxsize=1000"),
    "get-missed": get(b"/get/0?topic=test&partition=1&offset=0&maxsize=1000"),
    "get-moved": get(b"/get/0?topic=test&partition=0&offset=%d&maxsize=1000" % LONG_MAX),
    "get-bad-parameter": get(b"/get/0?topic=test&partition=0&offset=x&maxsize=1000"),
    "offset": get(b"/offset/0?topic=test&partition=0&offset=0"),
}


def requests_total(broker: Broker) -> dict[tuple[str, str], float]:
    """``(cmd, transport) -> value`` of ``metaq_requests_total`` for put, get and offset."""
    text = BrokerMetrics(broker, lambda: 1.0, 0.0).render().decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "metaq_requests"]
    return {
        (sample.labels["cmd"], sample.labels["transport"]): sample.value
        for sample in family.samples
        if sample.labels["cmd"] in ("put", "get", "offset")
    }


def send(broker: Broker, tcp: BrokerProtocol, executor, transport: str, how: str) -> None:
    if transport == "tcp":
        tcp.dataReceived(encode(TCP_COMMANDS[how]))
    else:
        channel = ProtocolSite(broker, Clock()).buildProtocol(PEER)
        channel.makeConnection(StringTransport())
        channel.dataReceived(HTTP_REQUESTS[how])
        channel.connectionLost(None)
    executor.run_all()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(st.sampled_from(sorted(REQUESTS)), min_size=1, max_size=25))
def test_requests_by_transport_count_what_each_transport_received(tmp_path_factory, steps):
    directory = str(tmp_path_factory.mktemp("broker"))
    clock = Clock()
    executor = ManualExecutor()
    config = broker_config(
        directory,
        topics=(topic_config("test", directory, num_partitions=2),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
        message_bytes_max=BODY_BYTES_MAX,
    )
    store = StoreManager(config, clock, files=RecordingFiles(), executor=executor)
    broker = Broker(config, clock, store=store)
    broker.start(listen=False)
    tcp = BrokerProtocol(broker)
    tcp.makeConnection(StringTransport())
    expected: Counter[tuple[str, str]] = Counter()
    seen = requests_total(broker)
    try:
        for transport, how in steps:
            send(broker, tcp, executor, transport, how)
            command = REQUESTS[(transport, how)]
            if command is not None:
                expected[(command, transport)] += 1
            found = requests_total(broker)
            assert all(found[key] >= seen[key] for key in seen), (transport, how, found)
            assert found == {key: expected[key] for key in found}, (transport, how)
            seen = found
    finally:
        stop_broker(broker, clock, executor)
