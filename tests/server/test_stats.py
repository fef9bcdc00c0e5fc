"""The stats command's text (spec section 6), realtime counters and DecimalFormat numbers."""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass

import pytest

from meta.config import load_config
from meta.server.stats import (
    AUTO_RESET_INTERVAL_S,
    HELP_LINES,
    KINDS,
    BrokerCounters,
    BrokerView,
    PartitionView,
    RealtimeStats,
    format_decimal,
    render_stats,
    stat_enabled,
)

# --- Fixtures ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeSection:
    name: str
    stat: bool = False
    accept_publish: bool = True
    accept_subscribe: bool = True


@dataclass(frozen=True)
class FakeConfig:
    """The part of ``meta.config.BrokerConfig`` that stats reads."""

    path: str = "/nonexistent/server.ini"
    checksum: int = 3735928559
    broker_id: int = 7
    topics: tuple[FakeSection, ...] = (
        FakeSection("alpha", stat=True, accept_publish=False),
        FakeSection("beta*", stat=True),
        FakeSection("delta"),
    )

    def topic_config(self, topic: str) -> FakeSection:
        for section in self.topics:
            if section.name == topic:
                return section
        return FakeSection(topic)


class FakeClock:
    def __init__(self, now_s: float = 1000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


PARTITIONS = (
    PartitionView("gamma", 0, 0, 100, 1, 100),
    PartitionView("alpha", 1, 1024, 2048, 5, 500),
    PartitionView("alpha", 0, 0, 200, 2, 200),
)


def make_view(config: object = None, partitions: tuple[PartitionView, ...] = PARTITIONS):
    counters = BrokerCounters(
        cmd_put=1,
        cmd_get=2,
        cmd_offset=3,
        tx_begin=4,
        tx_xa_begin=5,
        tx_commit=6,
        tx_rollback=7,
        get_miss=8,
        get_failed=9,
        put_failed=10,
    )
    return BrokerView(
        pid=4242,
        broker_id=7,
        port=8123,
        started_at=1000.0,
        now=1100.9,
        version="1.4.6.3",
        slave=False,
        curr_connections=3,
        threads=12,
        counters=counters,
        config=config or FakeConfig(),
        partitions=partitions,
    )


def lines_of(body: bytes) -> list[str]:
    text = body.decode()
    assert text.startswith("STATS\r\n")
    assert text.endswith("END\r\n")
    return text.split("\r\n")[1:-2]


# --- General stats -----------------------------------------------------------------------------

GENERAL_BODY = (
    b"STATS\r\n"
    b"pid 4242\r\n"
    b"broker_id 7\r\n"
    b"port 8123\r\n"
    b"uptime 100\r\n"
    b"version 1.4.6.3\r\n"
    b"slave false\r\n"
    b"curr_connections 3\r\n"
    b"threads 12\r\n"
    b"cmd_put 1\r\n"
    b"cmd_get 2\r\n"
    b"cmd_offset 3\r\n"
    b"tx_begin 4\r\n"
    b"tx_xa_begin 5\r\n"
    b"tx_commit 6\r\n"
    b"tx_rollback 7\r\n"
    b"get_miss 8\r\n"
    b"put_failed 10\r\n"
    b"total_messages 8\r\n"
    b"topics 3\r\n"
    b"config_checksum 3735928559\r\n"
    b"END\r\n"
)


def test_general_stats_body_matches_golden_bytes():
    assert render_stats("", make_view(), RealtimeStats(FakeClock())) == (200, GENERAL_BODY)


def test_general_stats_lines_follow_spec_order():
    _, body = render_stats("", make_view(), RealtimeStats(FakeClock()))
    names = [line.split(" ")[0] for line in lines_of(body)]
    assert names == [
        "pid",
        "broker_id",
        "port",
        "uptime",
        "version",
        "slave",
        "curr_connections",
        "threads",
        "cmd_put",
        "cmd_get",
        "cmd_offset",
        "tx_begin",
        "tx_xa_begin",
        "tx_commit",
        "tx_rollback",
        "get_miss",
        "put_failed",
        "total_messages",
        "topics",
        "config_checksum",
    ]


@pytest.mark.parametrize("item", ["   ", "\t"])
def test_whitespace_item_means_general_stats(item):
    assert render_stats(item, make_view(), RealtimeStats(FakeClock())) == (200, GENERAL_BODY)


def test_slave_prints_as_java_boolean():
    view = dataclasses.replace(make_view(), slave=True)
    _, body = render_stats("", view, RealtimeStats(FakeClock()))
    assert "slave true" in lines_of(body)


def test_topics_count_ignores_wildcard_sections():
    # alpha and gamma have stores, delta is configured without stores, beta* is a pattern.
    _, body = render_stats("", make_view(), RealtimeStats(FakeClock()))
    assert "topics 3" in lines_of(body)


# --- help, topics, offsets, realtime, reset ----------------------------------------------------


def test_help_item_lists_six_lines_verbatim():
    _, body = render_stats("help", make_view(), RealtimeStats(FakeClock()))
    assert body == (
        b"STATS\r\n"
        b"*EMPTY* Returns broker info.\r\n"
        b"help Returns help menu.\r\n"
        b"topics Returns topics statistics detail info.\r\n"
        b"offsets Returns partitions detail info.\r\n"
        b"realtime Returns realtime statistics detail info.\r\n"
        b"config Returns broker's config file content.\r\n"
        b"END\r\n"
    )
    assert lines_of(body) == list(HELP_LINES)


def test_topics_item_lists_stores_sorted_then_empty_exact_topics():
    assert render_stats("topics", make_view(), RealtimeStats(FakeClock())) == (
        200,
        b"STATS\r\n"
        b"alpha partitions 2 message_count 7 message_bytes 700"
        b" accept_publish false accept_subscribe true\r\n"
        b"gamma partitions 1 message_count 1 message_bytes 100"
        b" accept_publish true accept_subscribe true\r\n"
        b"delta *Empty*\r\n"
        b"END\r\n",
    )


def test_offsets_item_lists_one_line_per_store_sorted_by_topic_and_partition():
    assert render_stats("offsets", make_view(), RealtimeStats(FakeClock())) == (
        200,
        b"STATS\r\n"
        b"alpha part 0 min_offset 0 max_offset 200\r\n"
        b"alpha part 1 min_offset 1024 max_offset 2048\r\n"
        b"gamma part 0 min_offset 0 max_offset 100\r\n"
        b"END\r\n",
    )


def test_realtime_item_prints_every_kind_summed_over_topics():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("put", "alpha", "7-0")
    realtime.record("put", "beta1", "7-1")
    clock.now_s += 4
    _, body = render_stats("realtime", make_view(), realtime)
    assert lines_of(body) == [
        "realtime_put Count=2,Value=2,Value/Count=1,Count/Duration=0.5,Duration=4",
        "realtime_get null",
        "realtime_offset null",
        "realtime_get_miss null",
        "realtime_put_failed null",
        "realtime_message_size null",
    ]


def test_reset_item_answers_reset_ok_and_zeroes_realtime_counters():
    realtime = RealtimeStats(FakeClock())
    realtime.record("get", "alpha", "group")
    assert render_stats("reset", make_view(), realtime) == (
        200,
        b"STATS\r\nreset ok\r\nEND\r\n",
    )
    assert realtime.format_total("get").startswith("Count=0,Value=0,")


# --- Per-topic item ----------------------------------------------------------------------------


def test_topic_item_with_stores_matches_golden_bytes():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("put", "alpha", "7-0")
    realtime.record("put", "alpha", "7-1")
    realtime.record("message_size", "alpha", "*", 10)
    realtime.record("message_size", "alpha", "*", 5)
    realtime.record("get", "gamma", "group")
    clock.now_s += 3
    assert render_stats("alpha", make_view(), realtime) == (
        200,
        b"STATS\r\n"
        b"alpha\r\n"
        b"resultCode 0\r\n"
        b"partitions 2\r\n"
        b"message_count 7\r\n"
        b"bytes 700\r\n"
        b"topic_realtime_put Count=2,Value=2,Value/Count=1,Count/Duration=0.67,Duration=3\r\n"
        b"topic_realtime_get Invalid keyTwo:alpha\r\n"
        b"topic_realtime_offset null\r\n"
        b"topic_realtime_get_miss null\r\n"
        b"topic_realtime_put_failed null\r\n"
        b"topic_realtime_message_size"
        b" Count=2,Value=15,Value/Count=7.5,Count/Duration=0.67,Duration=3\r\n"
        b"END\r\n",
    )


def topic_header(item: str) -> list[str]:
    _, body = render_stats(item, make_view(), RealtimeStats(FakeClock()))
    return lines_of(body)[:5]


def test_unknown_topic_item_has_result_code_1():
    assert topic_header("nosuch") == [
        "nosuch",
        "resultCode 1",
        "partitions 0",
        "message_count 0",
        "bytes 0",
    ]


def test_configured_topic_without_stores_has_result_code_2():
    assert topic_header("delta")[:2] == ["delta", "resultCode 2"]


def test_wildcard_section_name_is_not_a_configured_topic():
    assert topic_header("beta*")[:2] == ["beta*", "resultCode 1"]


# --- DecimalFormat("#.##") ---------------------------------------------------------------------

# Expected texts were produced by java.text.DecimalFormat("#.##") on OpenJDK 17 and Temurin 25.
DECIMAL_FORMAT_CASES = [
    (0.0, "0"),
    (3.0, "3"),
    (0.5, "0.5"),
    (10 / 3, "3.33"),
    (2 / 3, "0.67"),
    (0.125, "0.12"),  # an exact binary tie: half-even keeps the even digit
    (0.375, "0.38"),  # an exact binary tie rounding up to the even digit
    (2.345, "2.35"),  # the double is 2.34500000000000019..., above the tie
    (2.355, "2.35"),  # the double is 2.35499999999999998..., below the tie
    (1.005, "1"),
    (0.005, "0.01"),
    (2.675, "2.67"),
    (0.001, "0"),
    (1e-5, "0"),
    (123456789.125, "123456789.12"),
    (12345678901.0, "12345678901"),
    (1e20, "100000000000000000000"),
    (float(2**63 - 1), "9223372036854776000"),  # Double.toString digits, then zeros
]


@pytest.mark.parametrize(("number", "text"), DECIMAL_FORMAT_CASES)
def test_format_decimal_matches_java_decimal_format(number, text):
    assert format_decimal(number) == text


# --- Realtime counters -------------------------------------------------------------------------


def test_value_per_count_is_invalid_when_count_is_zero():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("get", "alpha", "group")
    clock.now_s += 5
    realtime.reset()
    clock.now_s += 2
    assert realtime.format_total("get") == (
        "Count=0,Value=0,Value/Count=invalid,Count/Duration=0,Duration=2"
    )


def test_count_per_duration_is_invalid_when_duration_is_zero():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("offset", "alpha", "group")
    clock.now_s += 0.999
    assert realtime.format_total("offset") == (
        "Count=1,Value=1,Value/Count=1,Count/Duration=invalid,Duration=0"
    )


def test_format_total_is_null_when_kind_was_never_recorded():
    realtime = RealtimeStats(FakeClock())
    realtime.record("put", "alpha", "7-0")
    assert realtime.format_total("get") == "null"


def test_format_topic_is_null_when_kind_was_never_recorded_for_any_topic():
    assert RealtimeStats(FakeClock()).format_topic("put", "alpha") == "null"


def test_format_topic_is_invalid_key_two_when_recorded_only_for_other_topics():
    realtime = RealtimeStats(FakeClock())
    realtime.record("put", "gamma", "7-0")
    assert realtime.format_topic("put", "alpha") == "Invalid keyTwo:alpha"


def test_format_total_sums_over_topics_and_keys():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    for topic, key, size in [("alpha", "*", 100), ("gamma", "*", 50), ("alpha", "*", 1)]:
        realtime.record("message_size", topic, key, size)
    clock.now_s += 10
    assert realtime.format_total("message_size") == (
        "Count=3,Value=151,Value/Count=50.33,Count/Duration=0.3,Duration=10"
    )


def test_format_topic_sums_over_the_topics_keys_only():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("get", "alpha", "group-a")
    realtime.record("get", "alpha", "group-b")
    realtime.record("get", "gamma", "group-a")
    clock.now_s += 1
    assert realtime.format_topic("get", "alpha") == (
        "Count=2,Value=2,Value/Count=1,Count/Duration=2,Duration=1"
    )


def test_reset_restarts_duration_and_keeps_entries():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("put_failed", "alpha", "7-0")
    clock.now_s += 100
    realtime.reset()
    clock.now_s += 7
    assert realtime.format_topic("put_failed", "alpha") == (
        "Count=0,Value=0,Value/Count=invalid,Count/Duration=0,Duration=7"
    )


def test_counters_reset_automatically_every_30_minutes():
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("get_miss", "alpha", "group")
    clock.now_s += AUTO_RESET_INTERVAL_S - 1
    assert realtime.format_total("get_miss").startswith("Count=1,")
    clock.now_s += 1
    assert realtime.format_total("get_miss") == (
        "Count=0,Value=0,Value/Count=invalid,Count/Duration=invalid,Duration=0"
    )


def test_late_automatic_reset_counts_duration_from_when_it_fell_due():
    """Two and a half periods pass unobserved; Duration counts from the second due time."""
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    realtime.record("get", "alpha", "group")
    clock.now_s += 2.5 * AUTO_RESET_INTERVAL_S
    assert realtime.duration_s() == AUTO_RESET_INTERVAL_S // 2
    assert realtime.format_total("get").startswith("Count=0,")


def test_manual_reset_does_not_move_the_automatic_schedule():
    """Java's reset thread sleeps 30 minutes in a loop, whatever ``stats reset`` does."""
    clock = FakeClock()
    realtime = RealtimeStats(clock)
    clock.now_s += 600
    realtime.reset()
    clock.now_s += AUTO_RESET_INTERVAL_S - 600
    realtime.record("put", "alpha", "7-0")
    assert realtime.duration_s() == 0


def test_keys_are_folded_into_the_topic_total():
    realtime = RealtimeStats(FakeClock(), entries_max=1)
    for group in ["g1", "g2", "g3", "g4"]:
        realtime.record("get", "alpha", group)
    assert realtime.format_topic("get", "alpha").startswith("Count=4,")


def test_new_topics_past_the_bound_count_in_the_kind_total_only():
    realtime = RealtimeStats(FakeClock(), entries_max=1)
    realtime.record("get", "alpha", "group")
    realtime.record("get", "gamma", "group")
    assert realtime.format_topic("get", "gamma") == "Invalid keyTwo:gamma"
    assert realtime.format_total("get").startswith("Count=2,")


def test_every_kind_is_accepted():
    realtime = RealtimeStats(FakeClock())
    for kind in KINDS:
        realtime.record(kind, "alpha", "k")
    assert all(realtime.format_total(kind).startswith("Count=1,") for kind in KINDS)


# --- stat_enabled ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "enabled"),
    [("alpha", True), ("beta", True), ("beta7", True), ("delta", False), ("omega", False)],
)
def test_stat_enabled_matches_stat_sections_with_wildcards(topic, enabled):
    assert stat_enabled(FakeConfig(), topic) is enabled


def test_stat_enabled_is_true_when_any_matching_section_has_stat():
    # Java StatsManager.isStatTopic: an exact section with stat=false does not hide a pattern.
    config = FakeConfig(topics=(FakeSection("alpha"), FakeSection("al*", stat=True)))
    assert stat_enabled(config, "alpha")


def test_stat_enabled_treats_dot_in_a_section_name_as_any_character():
    config = FakeConfig(topics=(FakeSection("a.c", stat=True),))
    assert stat_enabled(config, "abc")


# --- config item -------------------------------------------------------------------------------


def test_config_item_answers_the_raw_file_without_wrapper(tmp_path):
    path = tmp_path / "server.ini"
    path.write_bytes(b"[system]\r\nbrokerId=7\n\xe4\xb8\xad\n")
    view = make_view(FakeConfig(path=str(path)))
    assert render_stats("config", view, RealtimeStats(FakeClock())) == (
        200,
        b"[system]\r\nbrokerId=7\n\xe4\xb8\xad\n",
    )


def test_config_item_reports_a_missing_file(tmp_path):
    path = str(tmp_path / "missing.ini")
    view = make_view(FakeConfig(path=path))
    assert render_stats("config", view, RealtimeStats(FakeClock())) == (
        500,
        f"Config file not found:{path}".encode(),
    )


def test_config_item_reports_a_read_error(tmp_path):
    view = make_view(FakeConfig(path=str(tmp_path)))
    code, body = render_stats("config", view, RealtimeStats(FakeClock()))
    assert (code, body) == (500, f"Read config file error:{tmp_path} (Is a directory)".encode())


# --- With the real meta.config -----------------------------------------------------------------

SERVER_INI = """\
[system]
brokerId=7
numPartitions=2
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1024*1024
maxTransferSize=1048576
dataPath={data}

[zookeeper]
zk.zkConnect=localhost:2181
zk.zkEnable=false

[topic=alpha]
acceptPublish=false
stat=true

[topic=beta*]
stat=true

[topic=delta]
"""


@pytest.fixture
def real_config(tmp_path):
    path = tmp_path / "server.ini"
    path.write_text(SERVER_INI.format(data=tmp_path / "data"))
    return load_config(str(path))


def test_general_stats_read_the_real_config(real_config):
    _, body = render_stats("", make_view(real_config), RealtimeStats(FakeClock()))
    assert lines_of(body)[-2:] == ["topics 3", f"config_checksum {real_config.checksum}"]


def test_topics_item_reads_the_real_config(real_config):
    _, body = render_stats("topics", make_view(real_config), RealtimeStats(FakeClock()))
    assert lines_of(body) == [
        "alpha partitions 2 message_count 7 message_bytes 700"
        " accept_publish false accept_subscribe true",
        "gamma partitions 1 message_count 1 message_bytes 100"
        " accept_publish true accept_subscribe true",
        "delta *Empty*",
    ]


def test_stat_enabled_reads_the_real_config(real_config):
    enabled = [stat_enabled(real_config, t) for t in ["alpha", "beta1", "delta", "omega"]]
    assert enabled == [True, True, False, False]


def test_config_item_reads_the_real_config_path(real_config):
    code, body = render_stats("config", make_view(real_config), RealtimeStats(FakeClock()))
    assert (code, body) == (200, pathlib.Path(real_config.path).read_bytes())
