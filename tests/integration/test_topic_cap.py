"""``maxTopics`` against a real broker: a wildcard section cannot create topics without end.

Method: a broker with ``maxTopics=3``, a wildcard section and one exact section; puts
create three wildcard topics, the fourth is refused with a 500 that names the key, while
existing topics and the exact section keep taking puts.
"""

from __future__ import annotations

import pytest

from meta.protocol.commands import Put
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess

TOPICS_MAX = 3


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(
        tmp_path, system={"maxTopics": TOPICS_MAX}, topics={"wild-*": {}, "fixed": {}}
    ).start()
    yield process
    process.stop()


def put(connection, topic: str):
    data = topic.encode()
    return connection.request(Put(topic, 0, data, 0, connection.next_opaque(), checksum(data)))


def test_a_put_beyond_max_topics_gets_a_clear_500(broker):
    with broker.connect() as connection:
        for number in range(TOPICS_MAX):
            assert put(connection, f"wild-{number}").code == 200
        refused = put(connection, "wild-new")
        assert refused.code == 500
        assert b"cannot create topic wild-new" in refused.body
        assert b"(maxTopics=3)" in refused.body
        assert put(connection, "wild-0").code == 200
        assert put(connection, "fixed").code == 200
        assert put(connection, "wild-new").code == 500
