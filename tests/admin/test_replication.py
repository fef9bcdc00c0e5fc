"""``stats sync`` parsing of ``meta-admin replication`` (both roles' shapes, S4). Pure."""

from __future__ import annotations

import pytest

from meta.admin.client import BrokerRefusedError
from meta.admin.output import table
from meta.admin.replication import parse_sync_stats, replication_rows

SAMSA_BODY = (
    b"role samsa\r\nslave 127.0.0.1:8124\r\nconnected true\r\nconsecutive_failures 0\r\n"
    b"probing false\r\nadvertised true\r\npartition test-0 ok 120 120\r\n"
    b"partition test-1 diverged 40 -1\r\n"
)


def test_a_samsa_body_gives_the_link_fields_and_one_row_per_partition():
    stats = parse_sync_stats(SAMSA_BODY)
    assert stats.role == "samsa"
    assert stats.fields == {
        "slave": "127.0.0.1:8124",
        "connected": "true",
        "consecutive_failures": "0",
        "probing": "false",
        "advertised": "true",
    }
    assert stats.partitions == [
        {"topic": "test", "partition": 0, "state": "ok", "master_end": 120, "slave_end": 120},
        {"topic": "test", "partition": 1, "state": "diverged", "master_end": 40, "slave_end": -1},
    ]


def test_a_gregor_body_with_newline_endings_and_a_dashed_topic():
    stats = parse_sync_stats(b"role gregor\nmaster -\npartition my-topic-3 20 1700000000000\n")
    assert (stats.role, stats.fields) == ("gregor", {"master": "-"})
    assert stats.partitions == [
        {"topic": "my-topic", "partition": 3, "end": 20, "last_sync_ms": 1700000000000}
    ]


def test_a_plain_brokers_answer_is_no_sync_role():
    assert parse_sync_stats(b"STATS\r\npid 12\r\nEND\r\n") is None
    assert parse_sync_stats(b"") is None


@pytest.mark.parametrize(
    "line", [b"partition test-0 ok 1", b"partition test-x 1 2", b"connected true yes"]
)
def test_a_malformed_line_is_refused_naming_it(line):
    with pytest.raises(BrokerRefusedError, match="unexpected 'stats sync' line"):
        parse_sync_stats(b"role gregor\r\n" + line + b"\r\n")


def test_an_async_slaves_unknown_lag_prints_dashes_not_none():
    """A slave that has not checked its master yet knows neither the master's end nor the
    lag: every such value prints as ``-``, as in meta-admin's other tables."""
    document = {
        "broker_id": 0,
        "mode": "async",
        "slaves": [
            {
                "slave_id": 0,
                "error": None,
                "partitions": [
                    {
                        "topic": "meta-test",
                        "partition": 0,
                        "master_end": None,
                        "slave_end": 0,
                        "state": "copying",
                        "lag_bytes": None,
                        "lag_seconds": None,
                    }
                ],
            }
        ],
    }
    (row,) = replication_rows(document)
    assert row[-1] == "lag - bytes, - s"
    assert "None" not in table([str(index) for index in range(len(row))], [row])


def test_a_gregor_partition_without_an_end_prints_a_dash():
    document = {
        "broker_id": 0,
        "mode": "sync",
        "samsa": {
            "slave": "127.0.0.1:8124",
            "partitions": [
                {"topic": "t", "partition": 0, "state": "ok", "master_end": 5, "slave_end": 5}
            ],
        },
        "gregor": {"partitions": [{"topic": "t", "partition": 0, "end": None, "last_sync_ms": 0}]},
    }
    (row,) = replication_rows(document)
    assert "slave end -, last sync never" in row[-1]
