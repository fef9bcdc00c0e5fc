"""Offset recovery against a real ZooKeeper: ``meta-admin recover-offsets`` and a samsa
master's start-up with ``recoverOffset=true``.

Goal: every committed entry of the broker's partitions is rewritten by the rules of
``meta.sync.recover_offsets`` (exact id, last id before, unmatched, kept), other brokers'
entries and unparsable nodes are left alone, a dry run writes nothing, and a samsa master
with ``recoverOffset=true`` has rewritten them before it registers. Method: real segment
files in the broker's layout, offsets nodes under a fresh ZooKeeper root, the command run
in-process and the broker as a real process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meta.admin.main import main as admin_main
from meta.protocol.message import pack_message
from tests.integration.broker_process import BrokerProcess, free_port, server_ini

BROKER_ID = 3


def write_partition(directory: Path, ids: list[int]) -> list[int]:
    """One segment of records with ``ids``; return each record's end offset."""
    directory.mkdir(parents=True)
    data, ends = b"", []
    for msg_id in ids:
        data += pack_message(msg_id, 0, b"payload-%d" % msg_id)
        ends.append(len(data))
    (directory / f"{0:020d}.meta").write_bytes(data)
    return ends


@pytest.fixture
def cluster(tmp_path, zookeeper, zk_root, admin):
    """A broker config with data in ``t-0`` and committed offsets of four groups."""
    data = tmp_path / "data"
    ends = write_partition(data / "t-0", [-900, -800, 100, 200, 300])
    ini = tmp_path / "server.ini"
    ini.write_text(
        server_ini(
            free_port(),
            data,
            system={"brokerId": BROKER_ID},
            topics={"t": {}},
            zk_connect=zookeeper.connect_string,
            zk={"zk.zkRoot": zk_root},
        )
    )
    nodes = {
        "exact": (f"{BROKER_ID}-0", "-800-4096"),
        "before": (f"{BROKER_ID}-0", "250-9999"),
        "old": (f"{BROKER_ID}-0", "50-7"),
        "java": (f"{BROKER_ID}-0", "-5-40"),
        "broken": (f"{BROKER_ID}-0", "not-an-offset"),
        "other": (f"{BROKER_ID + 1}-0", "-800-1"),
    }
    for group, (partition, text) in nodes.items():
        admin.create(
            f"{zk_root}/consumers/{group}/offsets/t/{partition}", text.encode(), makepath=True
        )
    return {"ini": ini, "ends": ends, "root": zk_root, "zookeeper": zookeeper, "data": data}


def read_node(admin, cluster, group: str, partition: str = f"{BROKER_ID}-0") -> str:
    return admin.get(f"{cluster['root']}/consumers/{group}/offsets/t/{partition}")[0].decode()


def expected_texts(cluster) -> dict[str, str]:
    ends = cluster["ends"]
    return {"exact": f"-800-{ends[1]}", "before": f"200-{ends[3]}", "old": "-1-0", "java": "-5-40"}


def test_a_dry_run_prints_the_plan_and_writes_nothing(cluster, admin, capsys):
    status = admin_main(
        ["recover-offsets", "-f", str(cluster["ini"]), "--zk-from-config", "--json"]
    )
    assert status == 0
    document = json.loads(capsys.readouterr().out)
    assert document["dry_run"] is True
    got = {entry["group"]: (entry["recovered"], entry["rule"]) for entry in document["entries"]}
    texts = expected_texts(cluster)
    assert got == {
        "exact": (texts["exact"], "exact"),
        "before": (texts["before"], "last-before"),
        "old": ("-1-0", "unmatched"),
        "java": ("-5-40", "kept"),
    }
    assert "not-an-offset" in document["problems"][0]
    assert read_node(admin, cluster, "exact") == "-800-4096"


def test_execute_writes_the_changed_entries_only(cluster, admin, capsys):
    status = admin_main(
        [
            "recover-offsets",
            "-f",
            str(cluster["ini"]),
            "--zk-connect",
            cluster["zookeeper"].connect_string,
            "--zk-root",
            cluster["root"],
            "--execute",
        ]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "3 offsets written" in out
    for group, text in expected_texts(cluster).items():
        assert read_node(admin, cluster, group) == text
    assert read_node(admin, cluster, "broken") == "not-an-offset"
    assert read_node(admin, cluster, "other", f"{BROKER_ID + 1}-0") == "-800-1"


def test_a_missing_root_is_named(cluster, capsys):
    status = admin_main(
        [
            "recover-offsets",
            "-f",
            str(cluster["ini"]),
            "--zk-connect",
            cluster["zookeeper"].connect_string,
            "--zk-root",
            "/no-such-root",
        ]
    )
    assert status == 1
    assert "/no-such-root does not exist" in capsys.readouterr().err


def test_a_samsa_master_with_recover_offset_rewrites_them_before_it_registers(
    cluster, admin, tmp_path
):
    samsa = tmp_path / "samsa.properties"
    samsa.write_text(f"slave=127.0.0.1:{free_port()}\nrecoverOffset=true\n")
    broker = BrokerProcess(tmp_path / "broker")
    broker.config_path = cluster["ini"]
    broker.port = int(
        next(
            line.split("=")[1]
            for line in cluster["ini"].read_text().splitlines()
            if line.startswith("serverPort=")
        )
    )
    broker.arguments = ["--samsa", str(samsa)]
    broker.start()
    try:
        for group, text in expected_texts(cluster).items():
            assert read_node(admin, cluster, group) == text
        log = broker.log()
        assert log.index("recover offsets: broker 3: 4 entries, 3 changed") < log.index(
            "serving meta://"
        )
    finally:
        broker.stop()
