"""Tests of meta.config.loading: server.ini and async_slave.properties parsing and validation."""

from __future__ import annotations

import logging
import os
import zlib
from pathlib import Path

import pytest

from meta.config import (
    FlushMode,
    TopicConfig,
    load_config,
    load_slave_config,
    validate_topic_name,
)
from meta.config.grammars import parse_delete_policy
from meta.errors import ConfigError, InvalidTopicError

CONF = Path(__file__).resolve().parents[2] / "conf"

REQUIRED_SYSTEM = {
    "brokerId": "0",
    "numPartitions": "1",
    "unflushThreshold": "0",
    "unflushInterval": "10000",
    "maxSegmentSize": "1073741824",
    "maxTransferSize": "1048576",
}

SPEC_EXAMPLE = """\
[system]
brokerId=0
numPartitions=1
serverPort=8123
dashboardHttpPort=8120
unflushThreshold=0
unflushInterval=10000
maxSegmentSize=1073741824
maxTransferSize=1048576
deletePolicy=delete,168
deleteWhen=0 0 6,18 * * ?
flushTxLogAtCommit=1
stat=true
updateConsumerOffsets=true

[zookeeper]
zk.zkConnect=localhost:2181
zk.zkSessionTimeoutMs=30000
zk.zkConnectionTimeoutMs=30000
zk.zkSyncTimeMs=5000

[topic=test]

[topic=meta-test]
"""


def write_ini(
    tmp_path: Path,
    *,
    system: tuple[str, ...] = (),
    zookeeper: tuple[str, ...] = (),
    topics: str = "[topic=test]\n",
    omit: tuple[str, ...] = (),
    zk_connect: str = "127.0.0.1:2181",
) -> str:
    """Write a server.ini with the required keys (minus ``omit``) plus the given lines."""
    system_lines = [f"{key}={value}" for key, value in REQUIRED_SYSTEM.items() if key not in omit]
    zookeeper_lines = [f"zk.zkConnect={zk_connect}", *zookeeper]
    text = "\n".join(
        ["[system]", *system_lines, *system, "", "[zookeeper]", *zookeeper_lines, "", topics]
    )
    path = tmp_path / "server.ini"
    path.write_text(text, encoding="utf-8")
    return str(path)


def load(tmp_path: Path, **kwargs: object):
    return load_config(write_ini(tmp_path, **kwargs))  # type: ignore[arg-type]


def error_of(tmp_path: Path, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, **kwargs)
    return str(info.value)


# --- Shipped files and the spec example -----------------------------------------------------


def test_shipped_server_ini_loads_with_spec_defaults():
    config = load_config(str(CONF / "server.ini"))
    assert config.broker_id == 0
    assert config.server_port == 8123
    assert config.dashboard_http_port == 8120
    assert config.host_name is None
    assert config.data_path == os.path.expanduser("~/meta")
    assert config.data_log_path == config.data_path
    assert config.num_partitions == 1
    assert config.unflush_threshold == 0
    assert config.unflush_interval_ms == 10000
    assert config.segment_bytes_max == 1073741824
    assert config.transfer_bytes_max == 1048576
    assert config.message_bytes_max == 1048576
    assert config.delete_policy == "delete,168"
    assert config.delete_when == "0 0 6,18 * * ?"
    assert config.quartz_thread_count == 5
    assert config.max_checkpoints == 3
    assert config.checkpoint_interval_ms == 3600000
    assert config.tx_timeout_timer_capacity == 30000
    assert config.flush_tx_log_at_commit == 1
    assert config.tx_timeout_max_s == 60
    assert (config.accept_publish, config.accept_subscribe) == (True, True)
    assert (config.stat, config.update_consumer_offsets) == (True, True)
    assert config.load_message_stores_in_parallel is False


def test_shipped_server_ini_uses_zookeeper_on_localhost():
    zookeeper = load_config(str(CONF / "server.ini")).zookeeper
    assert zookeeper.connect == "127.0.0.1:2181"
    assert zookeeper.enabled is True
    assert zookeeper.root == "/meta"
    assert (zookeeper.session_timeout_ms, zookeeper.connection_timeout_ms) == (30000, 30000)
    assert zookeeper.sync_time_ms == 5000


def test_shipped_server_ini_declares_the_topics_of_the_examples_in_file_order():
    # Other topics may follow: an operator adding a section (and reloading) breaks nothing.
    config = load_config(str(CONF / "server.ini"))
    assert [topic.name for topic in config.topics][:3] == ["test", "meta-test", "orders"]
    assert config.topic_config("meta-test").flush_mode is FlushMode.GROUP_COMMIT


def test_shipped_async_slave_properties_loads():
    slave = load_slave_config(str(CONF / "async_slave.properties"))
    assert slave.slave_id == 0
    assert slave.slave_group == "meta-slave-group_0"
    assert slave.slave_max_delay_ms == 500
    assert slave.auto_sync_master_config is True


def test_spec_example_loads(tmp_path):
    path = tmp_path / "server.ini"
    path.write_text(SPEC_EXAMPLE, encoding="utf-8")
    config = load_config(str(path))
    assert config.zookeeper.connect == "localhost:2181"
    assert [topic.name for topic in config.topics] == ["test", "meta-test"]
    assert config.topic_config("test").stat is True


def test_path_is_absolute_and_checksum_is_crc32_of_file_bytes(tmp_path):
    path = write_ini(tmp_path)
    config = load_config(path)
    assert config.path == os.path.abspath(path)
    assert config.checksum == zlib.crc32(Path(path).read_bytes())


# --- Sections and keys ------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(REQUIRED_SYSTEM))
def test_missing_required_system_key_names_file_section_and_key(tmp_path, key):
    message = error_of(tmp_path, omit=(key,))
    assert str(tmp_path / "server.ini") in message
    assert f"[system] required key '{key}' is missing" in message


def test_blank_required_key_is_an_error(tmp_path):
    message = error_of(tmp_path, omit=("brokerId",), system=("brokerId=",))
    assert "[system] required key 'brokerId' is blank" in message


def test_blank_optional_key_takes_its_default(tmp_path):
    assert load(tmp_path, system=("serverPort=",)).server_port == 8123


@pytest.mark.parametrize("section", ["system", "zookeeper"])
def test_missing_system_or_zookeeper_section_is_an_error(tmp_path, section):
    path = tmp_path / "server.ini"
    text = SPEC_EXAMPLE.replace(f"[{section}]", "[topic=other]")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"missing section \[{section}\]"):
        load_config(str(path))


def test_a_file_without_topic_sections_is_an_error(tmp_path):
    assert "no [topic=NAME] section" in error_of(tmp_path, topics="")


def test_zk_connect_is_required_even_when_zookeeper_is_disabled(tmp_path):
    message = error_of(tmp_path, zookeeper=("zk.zkEnable=false",), zk_connect="")
    assert message.endswith(": [zookeeper] required key 'zk.zkConnect' is blank")


def test_unknown_key_suggests_the_closest_key(tmp_path):
    message = error_of(tmp_path, system=("serverport=9000",))
    assert message.endswith(": [system] unknown key 'serverport' (did you mean 'serverPort'?)")


def test_unknown_topic_key_names_the_topic_section(tmp_path):
    message = error_of(tmp_path, topics="[topic=test]\nnumPartition=2\n")
    assert "[topic=test] unknown key 'numPartition' (did you mean 'numPartitions'?)" in message


def test_unknown_section_is_an_error(tmp_path):
    assert "unknown section [topics]" in error_of(tmp_path, topics="[topics]\n[topic=a]\n")


def test_duplicate_key_is_an_error_naming_file_and_line(tmp_path):
    message = error_of(tmp_path, system=("brokerId=1",))
    assert str(tmp_path / "server.ini") in message
    assert "8]: option 'brokerId' in section 'system' already exists" in message


def test_duplicate_topic_section_is_an_error(tmp_path):
    assert "topic=test" in error_of(tmp_path, topics="[topic=test]\n[topic=test]\n")


def test_java_internal_key_in_system_is_ignored_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="meta.config"):
        load(tmp_path, system=("topics=whatever",))
    assert "'topics'" in caplog.text


def test_system_key_in_zookeeper_section_is_ignored(tmp_path):
    assert load(tmp_path, zookeeper=("brokerId=7",)).broker_id == 0


def test_topic_and_filter_class_names_keys_are_ignored_in_topic_sections(tmp_path):
    config = load(tmp_path, topics="[topic=test]\ntopic=test\nfilterClassNames=a.B\n")
    assert config.topic_config("test").filters == ()


def test_indented_line_is_a_key_not_a_continuation(tmp_path):
    assert load(tmp_path, system=("   serverPort=9000",)).server_port == 9000


def test_unreadable_file_names_the_file(tmp_path):
    missing = str(tmp_path / "absent.ini")
    with pytest.raises(ConfigError, match="absent.ini: cannot read"):
        load_config(missing)


# --- Values ---------------------------------------------------------------------------------


def test_bad_integer_names_file_section_key_and_value(tmp_path):
    message = error_of(tmp_path, omit=("maxSegmentSize",), system=("maxSegmentSize=abc",))
    path = tmp_path / "server.ini"
    assert message == f"{path}: [system] maxSegmentSize='abc': not an integer"


def test_bad_boolean_names_the_value(tmp_path):
    message = error_of(tmp_path, system=("acceptPublish=yes",))
    assert "[system] acceptPublish='yes': not a boolean" in message


def test_system_booleans_ignore_case(tmp_path):
    assert load(
        tmp_path, system=("loadMessageStoresInParallel=TRUE",)
    ).load_message_stores_in_parallel


@pytest.mark.parametrize(
    ("expression", "value"),
    [("1024*1024*1024", 1073741824), ("(1+1)*512", 1024), ("8/2", 4), ("7//2", 3), ("10-3", 7)],
)
def test_integer_values_may_be_arithmetic(tmp_path, expression, value):
    config = load(tmp_path, omit=("maxSegmentSize",), system=(f"maxSegmentSize={expression}",))
    assert config.segment_bytes_max == value


def test_negative_integer_is_accepted_where_allowed(tmp_path):
    assert (
        load(
            tmp_path, omit=("unflushThreshold",), system=("unflushThreshold=-1",)
        ).unflush_threshold
        == -1
    )


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "2**10", "1.5", "True", "7/2", "1/0", "open('x')", "a"],
)
def test_integer_values_refuse_anything_but_integer_arithmetic(tmp_path, expression):
    message = error_of(tmp_path, omit=("maxSegmentSize",), system=(f"maxSegmentSize={expression}",))
    assert "not an integer" in message


def test_integer_outside_java_int_range_is_an_error(tmp_path):
    message = error_of(tmp_path, omit=("maxSegmentSize",), system=("maxSegmentSize=2147483648",))
    assert "out of range" in message


@pytest.mark.parametrize("broker_id", ["-1", "1024"])
def test_broker_id_outside_0_to_1023_is_an_error(tmp_path, broker_id):
    message = error_of(tmp_path, omit=("brokerId",), system=(f"brokerId={broker_id}",))
    assert f"brokerId='{broker_id}': out of range" in message


def test_broker_id_1023_is_accepted(tmp_path):
    assert load(tmp_path, omit=("brokerId",), system=("brokerId=1023",)).broker_id == 1023


def test_server_port_0_means_any_free_port_and_is_accepted(tmp_path):
    assert load(tmp_path, system=("serverPort=0",)).server_port == 0


def test_server_port_above_65535_is_an_error(tmp_path):
    assert "serverPort='65536': out of range" in error_of(tmp_path, system=("serverPort=65536",))


def test_zero_partitions_is_an_error(tmp_path):
    message = error_of(tmp_path, omit=("numPartitions",), system=("numPartitions=0",))
    assert "numPartitions='0'" in message


def test_flush_tx_log_at_commit_must_be_0_1_or_2(tmp_path):
    assert "flushTxLogAtCommit='3'" in error_of(tmp_path, system=("flushTxLogAtCommit=3",))


@pytest.mark.parametrize(
    ("policy", "name", "retention_ms", "compress"),
    [
        ("delete,168", "delete", 168 * 3600_000, False),
        ("delete,30s", "delete", 30_000, False),
        ("delete,10m", "delete", 600_000, False),
        ("delete,2h", "delete", 7200_000, False),
        ("archive,24", "archive", 24 * 3600_000, False),
        ("archive,1h,true", "archive", 3600_000, True),
        ("archive,1h,no", "archive", 3600_000, False),
    ],
)
def test_delete_policy_grammar_accepts(tmp_path, policy, name, retention_ms, compress):
    config = load(tmp_path, system=(f"deletePolicy={policy}",))
    spec = config.topic_config("test").delete_policy_spec
    assert spec == parse_delete_policy(policy)
    assert (spec.name, spec.retention_ms, spec.compress) == (name, retention_ms, compress)


@pytest.mark.parametrize(
    "policy",
    [
        "remove,1",
        "delete",
        "delete,",
        "delete,1d",
        "delete,abc",
        "delete,-1",
        "archive",
        "delete,1,2",
    ],
)
def test_delete_policy_grammar_refuses(tmp_path, policy):
    assert f"deletePolicy='{policy}'" in error_of(tmp_path, system=(f"deletePolicy={policy}",))


def test_delete_when_needs_6_or_7_fields(tmp_path):
    assert "6 or 7 fields" in error_of(tmp_path, system=("deleteWhen=0 6,18 * * ?",))


def test_delete_when_with_a_year_field_is_accepted(tmp_path):
    assert load(tmp_path, system=("deleteWhen=0 0 6 * * ? 2030",)).delete_when == "0 0 6 * * ? 2030"


def test_max_message_size_defaults_to_max_transfer_size(tmp_path):
    assert load(tmp_path).message_bytes_max == 1048576


def test_max_message_size_can_be_set_lower(tmp_path):
    assert load(tmp_path, system=("maxMessageSize=1024",)).message_bytes_max == 1024


def test_max_message_size_above_max_transfer_size_is_an_error(tmp_path):
    assert "larger than maxTransferSize" in error_of(tmp_path, system=("maxMessageSize=2097152",))


def test_host_name_is_none_when_absent_and_kept_when_set(tmp_path):
    assert load(tmp_path).host_name is None
    assert load(tmp_path, system=("hostName=10.0.0.5",)).host_name == "10.0.0.5"


def test_data_path_defaults_to_meta_in_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load(tmp_path).data_path == str(tmp_path / "meta")


def test_relative_data_path_resolves_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load(tmp_path, system=("dataPath=data",))
    assert config.data_path == str(tmp_path / "data")
    assert config.data_log_path == str(tmp_path / "data")


def test_data_log_path_can_differ_from_data_path(tmp_path):
    config = load(tmp_path, system=(f"dataPath={tmp_path}/d", f"dataLogPath={tmp_path}/l"))
    assert (config.data_path, config.data_log_path) == (f"{tmp_path}/d", f"{tmp_path}/l")


@pytest.mark.parametrize(
    ("root", "normalised"), [("meta", "/meta"), ("/meta/", "/meta"), ("/a/b", "/a/b"), ("/", "")]
)
def test_zk_root_is_normalised(tmp_path, root, normalised):
    assert load(tmp_path, zookeeper=(f"zk.zkRoot={root}",)).zookeeper.root == normalised


@pytest.mark.parametrize(
    ("threshold", "mode"),
    [(-1, FlushMode.GROUP_COMMIT), (0, FlushMode.GROUP_COMMIT), (1, FlushMode.THRESHOLD)],
)
def test_flush_mode_follows_unflush_threshold(threshold, mode):
    topic = TopicConfig("t", 1, threshold, 1000, "/d", "delete,1", "0 0 6 * * ?", True, True, False)
    assert topic.flush_mode is mode


# --- Topics ---------------------------------------------------------------------------------


def test_topic_section_values_override_system_values(tmp_path):
    config = load(tmp_path, topics="[topic=test]\nnumPartitions=4\nunflushThreshold=10\n")
    topic = config.topic_config("test")
    assert (topic.num_partitions, topic.unflush_threshold) == (4, 10)
    assert topic.unflush_interval_ms == 10000
    assert topic.flush_mode is FlushMode.THRESHOLD


def test_topic_data_path_defaults_to_system_data_path(tmp_path):
    config = load(tmp_path, system=(f"dataPath={tmp_path}",))
    assert config.data_path_for("test") == str(tmp_path)


def test_topic_stat_follows_java_boolean_value_of(tmp_path):
    config = load(tmp_path, topics="[topic=a]\nstat=TRUE\n[topic=b]\nstat=yes\n")
    assert config.topic_config("a").stat is True
    assert config.topic_config("b").stat is False


def test_topic_accept_publish_must_be_a_boolean(tmp_path):
    message = error_of(tmp_path, topics="[topic=test]\nacceptPublish=maybe\n")
    assert "[topic=test] acceptPublish='maybe': not a boolean" in message


def test_topic_filters_are_collected_by_group(tmp_path):
    config = load(tmp_path, topics="[topic=test]\ngroup.g1=pkg.filters:accept_even\n")
    assert config.topic_config("test").filters == (("g1", "pkg.filters:accept_even"),)


def test_topic_filter_must_name_module_and_callable(tmp_path):
    message = error_of(tmp_path, topics="[topic=test]\ngroup.g1=pkg.Filter\n")
    assert "group.g1='pkg.Filter'" in message


def test_wildcard_section_makes_matching_topics_legal(tmp_path):
    config = load(tmp_path, topics="[topic=log-*]\n")
    assert config.is_legal_topic("log-app")
    assert not config.is_legal_topic("app-log")


def test_dot_in_a_section_name_matches_any_character(tmp_path):
    config = load(tmp_path, topics="[topic=meta.test]\n[topic=a.b*]\n")
    assert config.is_legal_topic("meta-test")
    assert config.is_legal_topic("aXb1")


def test_topic_matching_a_wildcard_must_still_be_a_valid_name(tmp_path):
    assert not load(tmp_path, topics="[topic=*]\n").is_legal_topic("../x")


def test_wildcard_topic_uses_system_values_not_the_wildcard_section(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="meta.config"):
        config = load(tmp_path, topics="[topic=log-*]\nnumPartitions=8\nstat=true\n")
    assert config.topic_config("log-app").num_partitions == 1
    assert len([r for r in caplog.records if "apply to no topic" in r.getMessage()]) == 1


def test_exact_topic_lookup_wins_over_a_matching_wildcard(tmp_path):
    config = load(tmp_path, topics="[topic=log-*]\n[topic=log-app]\nnumPartitions=3\n")
    assert config.topic_config("log-app").num_partitions == 3
    assert config.topic_config("log-web").num_partitions == 1


def test_invalid_exact_topic_section_name_is_an_error(tmp_path):
    assert "invalid topic name '../x'" in error_of(tmp_path, topics="[topic=../x]\n")


def test_wildcard_section_that_does_not_compile_is_an_error(tmp_path):
    assert "does not compile" in error_of(tmp_path, topics="[topic=(*]\n")


@pytest.mark.parametrize("topic", ["", ".", "..", "../x", "a/b", "a b", "a" * 256, "tëst"])
def test_validate_topic_name_refuses(topic):
    with pytest.raises(InvalidTopicError, match="invalid topic name"):
        validate_topic_name(topic)


@pytest.mark.parametrize("topic", ["test", "meta-test", "a.b_c-1", "...", "a" * 255])
def test_validate_topic_name_accepts(topic):
    validate_topic_name(topic)


def test_validate_topic_name_error_names_the_topic():
    with pytest.raises(InvalidTopicError, match="'../x'"):
        validate_topic_name("../x")


# --- Overrides ------------------------------------------------------------------------------


def test_overrides_apply_as_if_written_in_the_file(tmp_path):
    overrides = {
        "system.hostName": "127.0.0.1",
        "zookeeper.zk.zkConnect": "zk1:2181",
        "topic=test.numPartitions": "5",
    }
    config = load_config(write_ini(tmp_path), overrides)
    assert config.host_name == "127.0.0.1"
    assert config.zookeeper.connect == "zk1:2181"
    assert config.topic_config("test").num_partitions == 5


def test_overrides_do_not_change_the_checksum(tmp_path):
    path = write_ini(tmp_path)
    config = load_config(path, {"system.serverPort": "0"})
    assert config.checksum == zlib.crc32(Path(path).read_bytes())


def test_unknown_override_key_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'hostname'.*did you mean 'hostName'"):
        load_config(write_ini(tmp_path), {"system.hostname": "x"})


def test_override_naming_no_section_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="override 'nosuch.key' names no section"):
        load_config(write_ini(tmp_path), {"nosuch.key": "x"})


def test_with_overrides_returns_a_changed_copy(tmp_path):
    config = load(tmp_path)
    changed = config.with_overrides(server_port=0)
    assert (changed.server_port, config.server_port) == (0, 8123)
    assert changed.topic_config("test") == config.topic_config("test")


# --- Slave config ---------------------------------------------------------------------------


def write_properties(tmp_path: Path, text: str) -> str:
    path = tmp_path / "async_slave.properties"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_slave_config_takes_defaults_for_optional_keys(tmp_path):
    slave = load_slave_config(write_properties(tmp_path, "slaveId=3\n"))
    assert slave.slave_group == "meta-slave-group_3"
    assert slave.slave_max_delay_ms == 500
    assert slave.auto_sync_master_config is False


def test_slave_config_reads_colon_separators_comments_and_continuations(tmp_path):
    text = "# comment\n! also a comment\n\nslaveId: 1\nslaveGroup = my\\\n   group\n"
    slave = load_slave_config(write_properties(tmp_path, text))
    assert (slave.slave_id, slave.slave_group) == (1, "mygroup")


def test_slave_blank_group_gets_the_default_name(tmp_path):
    slave = load_slave_config(write_properties(tmp_path, "slaveId=2\nslaveGroup=\n"))
    assert slave.slave_group == "meta-slave-group_2"


def test_slave_auto_sync_follows_java_boolean_value_of(tmp_path):
    text = "slaveId=0\nautoSyncMasterConfig=yes\n"
    assert load_slave_config(write_properties(tmp_path, text)).auto_sync_master_config is False


def test_slave_id_is_required(tmp_path):
    with pytest.raises(ConfigError, match="required key 'slaveId' is missing"):
        load_slave_config(write_properties(tmp_path, "slaveGroup=g\n"))


def test_negative_slave_id_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="slaveId='-1': out of range"):
        load_slave_config(write_properties(tmp_path, "slaveId=-1\n"))


def test_negative_slave_max_delay_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="slaveMaxDelayInMills='-5'"):
        load_slave_config(write_properties(tmp_path, "slaveId=0\nslaveMaxDelayInMills=-5\n"))


def test_unknown_slave_key_names_file_and_key(tmp_path):
    path = write_properties(tmp_path, "slaveId=0\nslaveMaxDelayInMillis=5\n")
    with pytest.raises(ConfigError) as info:
        load_slave_config(path)
    assert str(info.value).startswith(f"{path}: unknown key 'slaveMaxDelayInMillis'")


def test_transaction_caps_per_address_default_to_a_share_of_the_broker_wide_caps(tmp_path):
    config = load(tmp_path)
    assert config.tx_per_address_max * 2 <= config.tx_open_max
    assert config.tx_bytes_per_address_max * 2 <= config.tx_open_bytes_max
    assert config.tx_active_timeout_s == 300


def test_a_per_address_transaction_cap_above_half_the_broker_wide_one_is_an_error(tmp_path):
    text = error_of(tmp_path, system=("maxOpenTx=1000", "maxTxPerAddress=501"))
    assert "maxTxPerAddress=501 is more than half of maxOpenTx=1000" in text
    text = error_of(tmp_path, system=("maxTxBytesPerAddress=200000000",))
    assert "maxTxBytesPerAddress=200000000 is more than half of maxOpenTxBytes" in text


def test_raising_the_broker_wide_transaction_cap_makes_room_for_a_larger_address_share(tmp_path):
    config = load(tmp_path, system=("maxOpenTx=1000000", "maxTxPerAddress=500000"))
    assert (config.tx_open_max, config.tx_per_address_max) == (1000000, 500000)
