"""``autoSyncMasterConfig``: merging the master's server.ini into the slave's."""

from __future__ import annotations

import pytest

from meta.config import load_config
from meta.errors import ConfigError
from meta.slave.config_sync import merge_master_config, write_merged_config

MASTER = """; master
[system]
brokerId=3
hostName=10.0.0.1
serverPort=8123
dataPath=/master/data
numPartitions=4
maxSegmentSize=65536
unflushThreshold=0
unflushInterval=1000
maxTransferSize=1048576

[zookeeper]
zk.zkConnect=master-zk:2181
zk.zkRoot=/meta

[topic=alpha]
numPartitions=2
dataPath=/master/alpha

[topic=gamma]
stat=true
"""

SLAVE = """[system]
brokerId=3
hostName=10.0.0.2
serverPort=8124
dataPath=/slave/data
numPartitions=1
maxSegmentSize=1048576
unflushThreshold=0
unflushInterval=1000
maxTransferSize=1048576

[zookeeper]
zk.zkConnect=slave-zk:2181
zk.zkRoot=/meta

[topic=alpha]
dataPath=/slave/alpha
"""


def sections(text: str) -> dict[str, dict[str, str]]:
    from meta.config.sections import parse_ini_text

    return parse_ini_text("x", text)


def test_the_masters_file_with_the_slaves_own_machine_settings():
    merged = sections(merge_master_config(MASTER, SLAVE))
    assert merged["system"] == {
        "brokerId": "3",
        "hostName": "10.0.0.2",
        "serverPort": "8124",
        "dataPath": "/slave/data",
        "numPartitions": "4",
        "maxSegmentSize": "65536",
        "unflushThreshold": "0",
        "unflushInterval": "1000",
        "maxTransferSize": "1048576",
    }
    assert merged["zookeeper"]["zk.zkConnect"] == "slave-zk:2181"
    assert merged["topic=alpha"] == {"numPartitions": "2", "dataPath": "/slave/alpha"}
    assert merged["topic=gamma"] == {"stat": "true"}  # no dataPath of the master's


def test_a_topic_path_of_the_master_is_dropped_when_the_slave_has_none():
    slave = SLAVE.replace("[topic=alpha]\ndataPath=/slave/alpha\n", "")
    assert "dataPath" not in sections(merge_master_config(MASTER, slave))["topic=alpha"]


def test_the_slaves_own_settings_stand_where_the_masters_did_under_their_comments():
    """Goal: a synced slave.ini still reads as the master's file does, each setting under the
    comment that explains it. Method: a master whose port and data path have comments, a
    slave with its own values and a key of its own the master lacks (``dashboardHttpPort``)."""
    master = MASTER.replace(
        "serverPort=8123\ndataPath=/master/data\n",
        "# the port producers and consumers connect to\nserverPort=8123\n"
        "# where the partitions live\ndataPath=/master/data\n",
    )
    slave = SLAVE.replace("[system]\n", "[system]\ndashboardHttpPort=8121\n")
    lines = merge_master_config(master, slave).splitlines()
    assert (
        lines[lines.index("# the port producers and consumers connect to") + 1] == "serverPort=8124"
    )
    assert lines[lines.index("# where the partitions live") + 1] == "dataPath=/slave/data"
    assert lines[lines.index("[system]") + 1] == "dashboardHttpPort=8121"
    assert lines.index("brokerId=3") < lines.index("hostName=10.0.0.2")  # the master's order


def test_merging_twice_changes_nothing():
    once = merge_master_config(MASTER, SLAVE)
    assert merge_master_config(MASTER, once) == once


def write(tmp_path, text: str):
    path = tmp_path / "server.ini"
    path.write_text(text)
    return load_config(str(path))


def test_write_replaces_the_file_and_reports_the_topic_changes(tmp_path):
    slave = SLAVE.replace("/slave", str(tmp_path)).replace("slave-zk", "127.0.0.1")
    running = write(tmp_path, slave)
    result = write_merged_config(MASTER.encode(), running)
    assert result.outcome.added == ("gamma",) and result.outcome.changed == ("alpha",)
    assert [t.name for t in result.reread.topics] == ["alpha", "gamma"]
    assert result.reread.server_port == 8124
    assert "[topic=gamma]" in (tmp_path / "server.ini").read_text()
    again = write_merged_config(MASTER.encode(), load_config(running.path))
    assert again.reread is None  # already the merged file
    assert [p.name for p in tmp_path.iterdir()] == ["server.ini"]  # no temporary left


def test_a_merged_file_that_does_not_load_is_never_written(tmp_path):
    running = write(tmp_path, SLAVE.replace("/slave", str(tmp_path)))
    before = (tmp_path / "server.ini").read_text()
    with pytest.raises(ConfigError, match="nosuchkey"):
        write_merged_config((MASTER + "nosuchkey=1\n").encode(), running)
    assert (tmp_path / "server.ini").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["server.ini"]


def test_the_dashboard_token_file_stays_the_slaves_own_path_or_none():
    """The operator token file is a path on each machine: the master's never replaces it."""
    master = MASTER.replace("[system]\n", "[system]\ndashboardAdminTokenFile=/master/token\n")
    slave = SLAVE.replace("[system]\n", "[system]\ndashboardAdminTokenFile=/slave/token\n")
    merged = merge_master_config(master, slave)
    assert "dashboardAdminTokenFile=/slave/token" in merged
    assert "/master/token" not in merged
    assert "dashboardAdminTokenFile" not in merge_master_config(master, SLAVE)
