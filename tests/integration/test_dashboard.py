"""The dashboard of a real broker process: port settings, health checks and ``/metrics``.

Each test starts its own broker (``BrokerProcess``) and talks HTTP to it with the stdlib;
the dashboard's port is read from the broker's log (``dashboardHttpPort=0`` picks one).
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from meta.protocol.commands import Get, Put, Stats
from meta.protocol.message import checksum
from tests.integration.broker_process import BrokerProcess, free_port

WAIT_S = 30.0
SERVING = re.compile(r"dashboard serving http://[^:]+:(\d+)/")

# Spec §3.4: every metric family and its labels (counters without their _total suffix;
# a histogram's buckets add "le").
METRICS = {
    "metaq_broker_info": {"broker_id", "version", "role"},
    "metaq_uptime_seconds": set(),
    "metaq_connections": set(),
    "metaq_requests": {"cmd", "transport"},
    "metaq_put_failed": {"topic"},
    "metaq_get_miss": {"topic"},
    "metaq_put_messages": {"topic", "partition"},
    "metaq_put_bytes": {"topic", "partition"},
    "metaq_partition_min_offset_bytes": {"topic", "partition"},
    "metaq_partition_max_offset_bytes": {"topic", "partition"},
    "metaq_partition_segments": {"topic", "partition"},
    "metaq_partition_closed": {"topic", "partition"},
    "metaq_partition_halted": {"topic", "partition"},
    "metaq_async_slave_lag_bytes": {"topic", "partition"},
    "metaq_async_slave_lag_seconds": {"topic", "partition"},
    "metaq_sync_partition_state": {"topic", "partition", "state"},
    "metaq_transactions_open": set(),
    "metaq_transactions_prepared": set(),
    "metaq_sync_slave_connected": set(),
    "metaq_sync_slave_consecutive_failures": set(),
    "metaq_sync_published": set(),
    "metaq_fsync_seconds": set(),
    "metaq_sync_latency_seconds": set(),
    # Ours: the integrity checks (docs/durability.md, Corrupt data).
    "metaq_partition_corrupt_ranges": {"topic", "partition"},
    "metaq_partition_corrupt_bytes": {"topic", "partition"},
    "metaq_scrub_bytes": {"topic", "partition"},
    "metaq_scrub_passes": {"topic", "partition"},
    "metaq_recovery_cut_bytes": {"topic", "partition"},
    "metaq_scrub_rate_bytes_per_second": set(),
    "metaq_scrub_store_passes": set(),
    "metaq_scrub_corrupt_found": set(),
    # Ours: the connection policy of every listening port (docs/security.md).
    "metaq_port_connections": {"port"},
    "metaq_port_connections_refused": {"port"},
    "metaq_port_connections_closed": {"port", "reason"},
}
# Families whose samples exist only with a feature this broker does not run here.
WITHOUT_SAMPLES = {
    "metaq_async_slave_lag_bytes",
    "metaq_async_slave_lag_seconds",
    "metaq_sync_partition_state",
    "metaq_sync_slave_connected",
    "metaq_sync_slave_consecutive_failures",
    "metaq_sync_published",
    "metaq_sync_latency_seconds",
}


def dashboard_port(broker: BrokerProcess) -> int:
    """The port from the broker's "dashboard serving" log line (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = SERVING.search(broker.log())
        if found:
            return int(found.group(1))
        assert broker.process.poll() is None, broker.log()
        time.sleep(0.05)
    raise AssertionError(f"no dashboard line in the log:\n{broker.log()}")


def get(port: int, path: str) -> tuple[int, str, str]:
    """``(status, content type, body)`` of ``GET http://127.0.0.1:<port><path>``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def metric_samples(port: int) -> dict[str, list]:
    """Family name -> samples, parsed with prometheus_client's own text parser."""
    status, content_type, body = get(port, "/metrics")
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def put_messages_total(port: int, topic: str, partition: int) -> float:
    labels = {"topic": topic, "partition": str(partition)}
    samples = metric_samples(port)["metaq_put_messages"]
    matching = [s.value for s in samples if s.name.endswith("_total") and s.labels == labels]
    return matching[0] if matching else 0.0


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "broker", system={"numPartitions": 2})
    process.start()
    yield process
    process.stop()


def test_metrics_count_a_thousand_puts_to_one_partition(broker):
    port = dashboard_port(broker)
    with broker.connect() as connection:
        connection.request(Put("test", 0, b"first", 0, 1, checksum=checksum(b"first")))
        before = put_messages_total(port, "test", 0)
        for index in range(1000):
            data = b"message %d" % index
            connection.send(Put("test", 0, data, 0, index, checksum=checksum(data)))
        replies = [connection.receive() for _ in range(1000)]
    assert {reply.code for reply in replies} == {200}
    assert put_messages_total(port, "test", 0) == before + 1000


def test_every_metric_of_the_list_is_present_with_its_labels(broker):
    port = dashboard_port(broker)
    with broker.connect() as connection:
        reply = connection.request(Put("test", 1, b"one", 0, 1, checksum=checksum(b"one")))
        assert reply.code == 200
        refused = connection.request(Put("test", 7, b"one", 0, 2, checksum=checksum(b"one")))
        assert refused.code == 500
        missed = connection.request(Get("test", "group", 1, 1 << 20, 1024, 3))
        assert missed.code != 200
    samples = metric_samples(port)
    missing = set(METRICS) - set(samples)
    assert not missing
    for name, labels in METRICS.items():
        if name in WITHOUT_SAMPLES:
            continue
        assert samples[name], name
        assert all(set(sample.labels) - {"le"} == labels for sample in samples[name]), name
    fsyncs = [s.value for s in samples["metaq_fsync_seconds"] if s.name.endswith("_count")]
    assert fsyncs[0] >= 1  # group commit: the put above waited for an fsync
    info = samples["metaq_broker_info"][0]
    assert info.labels["role"] == "master"
    assert info.labels["broker_id"] == "0"


def test_healthz_answers_ok_and_readyz_ready_without_zookeeper(broker):
    port = dashboard_port(broker)
    assert get(port, "/healthz")[::2] == (200, "ok\n")
    assert get(port, "/readyz")[::2] == (200, "ready\n")


def test_json_api_shows_topics_and_partitions(broker):
    port = dashboard_port(broker)
    with broker.connect() as connection:
        reply = connection.request(Put("test", 1, b"one", 0, 1, checksum=checksum(b"one")))
    assert reply.code == 200
    import json

    status, content_type, body = get(port, "/api/v1/topics/test")
    assert (status, content_type) == (200, "application/json")
    topic = json.loads(body)
    assert topic["messages"] == 1
    assert [(p["partition"], p["store"]) for p in topic["partitions"]] == [(0, False), (1, True)]
    assert json.loads(get(port, "/api/v1/broker")[2])["ready"] is True
    assert get(port, "/api/v1/topics/nothing")[0] == 404
    assert get(port, "/no-such-page")[0] == 404


def test_readyz_is_503_until_the_broker_is_registered_in_zookeeper(
    tmp_path, zookeeper, zk_root, admin
):
    """Goal: /readyz says 503 while the broker waits for ZooKeeper and 200 once registered.

    Method: a second ZooKeeper session holds the broker's ``master`` node, so the broker's
    start waits (DECISIONS 6) with its dashboard already up; closing that session frees the
    node and the broker registers.
    """
    holder = type(admin)(hosts=zookeeper.connect_string, timeout=10)
    holder.start(timeout=10)
    path = f"{zk_root}/brokers/ids/0/master"
    holder.create(path, b"meta://127.0.0.1:1", ephemeral=True, makepath=True)
    process = BrokerProcess(
        tmp_path / "broker",
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 60000},
    )
    process.wait_until_serving = lambda timeout_s: None  # serving comes after registration
    try:
        process.start()
        port = dashboard_port(process)
        status, _type, body = get(port, "/readyz")
        assert status == 503, body
        assert "not registered" in body
        assert get(port, "/healthz")[0] == 200
        holder.stop()
        holder.close()
        deadline = time.monotonic() + WAIT_S
        while get(port, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, process.log()
            time.sleep(0.05)
        assert admin.exists(path) is not None
    finally:
        holder.stop()
        holder.close()
        process.stop()


def test_dashboard_port_minus_one_turns_the_dashboard_off(tmp_path):
    process = BrokerProcess(tmp_path / "broker", system={"dashboardHttpPort": -1})
    process.start()
    try:
        assert "dashboard off (dashboardHttpPort=-1)" in process.log()
        assert SERVING.search(process.log()) is None
    finally:
        process.stop()


def test_a_taken_dashboard_port_is_a_startup_error_naming_port_and_key(tmp_path):
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        process = BrokerProcess(tmp_path / "broker", system={"dashboardHttpPort": port})
        with pytest.raises(RuntimeError, match="exited with 1"):
            process.start()
        assert f"127.0.0.1:{port}" in process.log()
        assert "dashboardHttpPort" in process.log()
    finally:
        taken.close()


def test_metaserver_sh_status_prints_the_readyz_answer(tmp_path, zookeeper, zk_root):
    from tests.integration.test_reload import TOPICS, ScriptBroker, ini

    scripted = ScriptBroker(tmp_path, ini(zookeeper, zk_root, TOPICS))
    try:
        started = scripted.run("start")
        assert started.returncode == 0, started.stdout + started.stderr
        status = scripted.run("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "readiness: 200 ready" in status.stdout
    finally:
        scripted.run("stop")
        scripted.kill_leftover()


def test_metrics_with_groups_expose_the_consumer_lag_of_those_groups(
    tmp_path, zookeeper, zk_root, admin
):
    process = BrokerProcess(
        tmp_path / "broker",
        system={"numPartitions": 2},
        zk_connect=zookeeper.connect_string,
        zk={"zk.zkRoot": zk_root, "zk.zkSessionTimeoutMs": 4000},
    )
    process.start()
    try:
        with process.connect() as connection:
            for index in range(10):
                data = b"message %d" % index
                reply = connection.request(Put("test", 0, data, 0, index, checksum=checksum(data)))
                assert reply.code == 200
        admin.create(f"{zk_root}/consumers/readers/offsets/test/0-0", b"-1-40", makepath=True)
        admin.create(f"{zk_root}/consumers/other/offsets/test/0-0", b"-1-0", makepath=True)
        port = dashboard_port(process)
        end = json.loads(get(port, "/api/v1/topics/test")[2])["partitions"][0]["max_offset"]
        status, _type, body = get(port, "/metrics?groups=readers,absent")
        assert status == 200
        families = {family.name: family for family in text_string_to_metric_families(body)}
        lag = families["metaq_consumer_lag_bytes"].samples
        assert [(s.labels, s.value) for s in lag] == [
            ({"group": "readers", "topic": "test", "partition": "0"}, end - 40)
        ]
        assert "metaq_put_messages" in families
        assert "metaq_consumer_lag_bytes" not in get(port, "/metrics")[2]
    finally:
        process.stop()


def test_configured_topics_never_written_are_listed_with_empty_partitions(tmp_path):
    """Goal: a topic of server.ini that no put reached yet (it has no partition store, as
    in Java) shows on the pages and in ``/metrics`` with its configured partitions, empty,
    while ``stats topics`` keeps Java's ``*Empty*`` line. Method: a broker with ``orders``
    (2 partitions) and ``test``; one put to ``test``; read every view."""
    topics = {"test": {}, "orders": {"numPartitions": 2}}
    process = BrokerProcess(tmp_path / "broker", topics=topics)
    process.start()
    try:
        port = dashboard_port(process)
        with process.connect() as connection:
            assert connection.request(Put("test", 0, b"one", 0, 1)).code == 200
            stats = connection.request(Stats("topics")).body.decode()
        listed = {t["topic"]: t for t in json.loads(get(port, "/api/v1/topics")[2])}
        topics_page = get(port, "/topics")
        orders_page = get(port, "/topics/orders")
        samples = metric_samples(port)
    finally:
        process.stop()
    assert "orders *Empty*" in stats
    assert (listed["orders"]["partitions"], listed["orders"]["messages"]) == (2, 0)
    assert listed["test"]["messages"] == 1
    assert topics_page[0] == 200
    assert 'href="/topics/orders"' in topics_page[2]
    assert orders_page[0] == 200
    assert "Topic orders" in orders_page[2]
    assert "no partition store" not in orders_page[2]
    messages = {
        (s.labels["topic"], s.labels["partition"]): s.value
        for s in samples["metaq_put_messages"]
        if s.name.endswith("_total")
    }
    assert messages == {("orders", "0"): 0, ("orders", "1"): 0, ("test", "0"): 1}


def test_unknown_topics_items_and_pages_answer_404_naming_them(broker):
    port = dashboard_port(broker)
    for path, named in (
        ("/nope", "No page /nope"),
        ("/topics/nope", "no topic nope"),
        ("/api/v1/topics/nope", "no topic nope"),
        ("/stats/bogus", "no stats item or topic bogus"),
        ("/api/v1/stats/bogus", "no stats item or topic bogus"),
    ):
        status, _content_type, body = get(port, path)
        assert (status, named in body) == (404, True), (path, body)
    for path in ("/stats/topics", "/stats/test", "/topics/test", "/api/v1/stats/test"):
        assert get(port, path)[0] == 200, path


def test_a_get_of_stats_reset_resets_nothing_and_names_the_command_that_does(broker):
    """Goal: no GET changes the broker (a prefetch or a crawler sends GETs). Method: a put
    counted in ``cmd_put``, then ``/stats/reset`` and its JSON twin, then the count again."""
    port = dashboard_port(broker)
    with broker.connect() as connection:
        reply = connection.request(Put("test", 0, b"counted", 0, 1, checksum=checksum(b"counted")))
    assert reply.code == 200
    assert "cmd_put 1\r\n" in get(port, "/stats?format=json")[2].replace("\\r\\n", "\r\n")
    for path in ("/stats/reset", "/api/v1/stats/reset"):
        status, _content_type, body = get(port, path)
        assert status == 405 and "`stats reset` to the broker's port" in body, (path, body)
    assert "cmd_put 1\r\n" in get(port, "/stats?format=json")[2].replace("\\r\\n", "\r\n")
