"""The dashboard's pages in a real headless Chromium (Debian's ``chromium`` package).

Goal: every page of a master that holds topics, consumer groups and an async slave loads
without a JavaScript console message or a Content-Security-Policy violation, its DOM shows
the expected values, and hostile group names appear as text; the Java dashboard's
``/#fragment`` links lead to their pages. Method: start a master and its slave under a fresh
ZooKeeper root, put messages, write consumer group nodes, then run ``chromium --headless
--dump-dom --screenshot`` once per page, reached by its ``/#fragment`` link
(``--virtual-time-budget`` lets the script follow it) and read the console from Chromium's
log. Screenshots go to the test's directory, or to
``docs/screenshots/`` when ``META_DASHBOARD_SCREENSHOTS=1`` (the README's pictures).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from meta.protocol.commands import Put
from meta.protocol.message import checksum
from tests.integration.broker_process import REPO
from tests.integration.client_helpers import wait_for
from tests.integration.test_dashboard import dashboard_port, get
from tests.integration.test_slave import make_cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

SCRIPT_GROUP = "<script>alert(1)</script>"
IMG_GROUP = "<img src=x onerror=alert(2)>"
CONSOLE = re.compile(r":INFO:CONSOLE[^\]]*\] (.*)|(Refused to [^\n]*)")
TOPICS = {"alpha": {"numPartitions": 2}, "beta": {"numPartitions": 1}}
SYSTEM = {"numPartitions": 2, "unflushThreshold": 0}
BROWSER_TIMEOUT_S = 60
README_PAGES = {"dashboard", "topics", "topic", "group", "cluster", "slave-replication"}


def browse(url: str, screenshot: Path, profile: Path) -> tuple[str, list[str]]:
    """``(DOM after the page's scripts ran, console messages)`` of ``url``."""
    assert CHROMIUM is not None, "chromium is missing: tools/setup-env.sh installs it"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=4000",
            "--window-size=1280,900",
            f"--screenshot={screenshot}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, ["".join(found) for found in CONSOLE.findall(done.stderr)]


def put_messages(broker, topic: str, partition: int, count: int) -> None:
    with broker.connect() as connection:
        for index in range(count):
            data = b"%s message %d" % (topic.encode(), index)
            reply = connection.request(
                Put(topic, partition, data, 0, index, checksum=checksum(data))
            )
            assert reply.code == 200


@pytest.fixture
def cluster(tmp_path, zookeeper):
    token = tmp_path / "dashboard.token"  # the actions are on: pages show the token field
    token.write_text("0123456789abcdef0123456789abcdef\n")
    token.chmod(0o600)
    made = make_cluster(tmp_path, zookeeper, {**SYSTEM, "dashboardAdminTokenFile": token}, TOPICS)
    made.master.start()
    made.slave.start()
    try:
        yield made
    finally:
        made.slave.stop()
        made.master.stop()


def screenshot_path(tmp_path: Path, name: str) -> Path:
    """Where the screenshot of page ``name`` goes (``docs/screenshots`` for the README's)."""
    if os.environ.get("META_DASHBOARD_SCREENSHOTS") == "1" and name in README_PAGES:
        directory = REPO / "docs" / "screenshots"
    else:
        directory = tmp_path / "screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"dashboard-{name}.png"


def write_groups(admin, root: str) -> None:
    """A consumer group ``readers`` 100 bytes into alpha-0, and two hostile group names."""
    for group in ("readers", SCRIPT_GROUP, IMG_GROUP):
        admin.create(f"{root}/consumers/{group}/offsets/alpha/0-0", b"-1-100", makepath=True)
    admin.create(f"{root}/consumers/readers/owners/alpha/0-1", b"readers-host-1", makepath=True)


def test_every_page_loads_in_chromium_and_shows_the_broker(cluster, admin, tmp_path):
    put_messages(cluster.master, "alpha", 0, 40)
    put_messages(cluster.master, "alpha", 1, 5)
    put_messages(cluster.master, "beta", 0, 3)
    write_groups(admin, cluster.root)
    master_port = dashboard_port(cluster.master)
    slave_port = dashboard_port(cluster.slave)
    wait_for(lambda: "alpha" in get(slave_port, "/api/v1/replication")[2], what="slave lag")
    # The rate charts need two samples of the counters.
    wait_for(lambda: "Puts per second" in get(master_port, "/dashboard")[2], what="charts")
    end = int(
        re.search(
            r"alpha part 0 min_offset 0 max_offset (\d+)", get(master_port, "/stats/offsets")[2]
        ).group(1)
    )
    alpha = next(
        t for t in json.loads(get(master_port, "/api/v1/topics")[2]) if t["topic"] == "alpha"
    )
    average = f"<td>{alpha['average_bytes']}</td><td>yes</td><td>yes</td>"
    pages = [
        ("dashboard", "dashboard", ["Broker", "master", "meta://127.0.0.1:", "Puts per second"]),
        ("topics", "topics", ["alpha", "beta", "45", "Messages per topic"]),
        ("topic", "topics/alpha", ["Topic alpha", "Bytes per partition", "readers", IMG_GROUP]),
        (
            "group",
            "topics/alpha?group=readers",
            ["Group readers on topic alpha", "readers-host-1", str(end - 100), "Operator token"],
        ),
        ("replication", "replication", ["This broker is a master"]),
        ("transactions", "transactions", ["No transaction is open or prepared."]),
        ("stats", "stats", ["cmd_put 48"]),
        ("stats-topics", "stats/topics", ["alpha partitions 2 message_count 45"]),
        ("config", "config", ["[topic=alpha]", "Reload config", "Operator token"]),
        ("logging", "logging", ["dashboard serving"]),
        ("runtime", "java-properties", ["Python", "RLIMIT_NOFILE"]),
        ("threads", "thread-dump", ["(reactor)"]),
        ("cluster", "cluster", ["Current", f"127.0.0.1:{master_port}", "slave 0"]),
        ("group-script", f"topics/alpha?group={SCRIPT_GROUP}", [f"Group {SCRIPT_GROUP} on"]),
        ("group-img", f"topics/alpha?group={IMG_GROUP}", [f"Group {IMG_GROUP} on topic alpha"]),
    ]
    for name, fragment, expected in pages:
        url = f"http://127.0.0.1:{master_port}/#{quote(fragment, safe='/?=')}"
        shot = screenshot_path(tmp_path, name)
        dom, console = browse(url, shot, tmp_path / f"profile-{name}")
        assert console == [], (fragment, console)
        assert '<a href="/cluster"' in dom, fragment  # the menu reaches every page
        for text in expected:
            assert html.escape(text, quote=False) in dom, (fragment, text)
        assert ">True<" not in dom and ">False<" not in dom, fragment  # yes and no
        if name == "topics":
            assert average in dom  # alpha's average size, then Publish and Subscribe
        if name == "dashboard":
            assert ">now</text>" in dom  # the rate charts' time axis
        # The page's own script file is the only script element; hostile names are text.
        assert dom.count("<script") == 1, fragment
        assert '<script src="/static/dashboard.js">' in dom, fragment
        assert "<img src=x" not in dom, fragment
        assert shot.stat().st_size > 0

    # An unknown #fragment: an error box, as text (markup in it stays text), and no fetch.
    dom, console = browse(
        f"http://127.0.0.1:{master_port}/#nope<b>x</b>",
        screenshot_path(tmp_path, "not-found"),
        tmp_path / "profile-not-found",
    )
    assert console == []
    assert '<div class="error" role="alert">No page #nope%3Cb%3Ex%3C/b%3E on' in dom

    group = json.loads(get(master_port, "/api/v1/topics/alpha/groups/readers")[2])
    assert [p["owner"] for p in group["partitions"]] == [None, "readers-host-1"]
    assert group["partitions"][0]["pending_bytes"] == end - 100

    dom, console = browse(
        f"http://127.0.0.1:{slave_port}/#replication",
        screenshot_path(tmp_path, "slave-replication"),
        tmp_path / "profile-slave",
    )
    assert console == []
    for text in ("Async slave replication", "alpha", "copying"):
        assert text in dom
