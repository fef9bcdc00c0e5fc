"""The HTML fragments at the original dashboard's URLs.

Each ``*_page`` function returns one fragment (``meta.dashboard.routes`` puts it into
``meta.dashboard.shell``'s frame: each page is a whole document, with plain links between
them) built from the same facts as the JSON API; every value goes through
``meta.dashboard.html``'s escaping. ``/java-properties`` shows Python and runtime facts
(version, argv, pid, rlimits, ``META_*`` variables only: no other environment, no secrets);
``/thread-dump`` shows every thread's stack, the reactor's (the caller's) first.

Reactor thread only: pages read the broker's state and, for ``/config``, the small local
config file (as ``stats config`` does).
"""

from __future__ import annotations

import datetime
import os
import resource
import sys
import threading
import traceback
from typing import Any
from urllib.parse import quote

from meta.config import read_config_bytes
from meta.dashboard.history import SAMPLE_INTERVAL_S
from meta.dashboard.html import (
    bar_chart,
    error_fragment,
    escape,
    facts_table,
    heading,
    line_chart,
    link,
    paragraph,
    table,
)
from meta.dashboard.logring import LogRing
from meta.status import facts

STATS_ITEMS = ("", "topics", "offsets", "realtime", "transactions", "slave", "help")
RLIMITS = ("RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_FSIZE")
LOG_LINES_SHOWN = 20


def dashboard_page(dashboard: Any) -> str:
    broker = dashboard.broker
    broker_facts = facts.broker_facts(broker, dashboard.started_at_s, dashboard.now_s())
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(
        seconds=broker_facts["uptime_seconds"]
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pairs = [
        ("Started", f"{started:%Y-%m-%d %H:%M:%S} UTC ({_ago(broker_facts['uptime_seconds'])})"),
        ("Broker", f"{broker_facts['broker_id']} ({broker_facts['role']})"),
        ("URI", broker_facts["uri"]),
        ("Version", f"{broker_facts['version']} (wire {broker_facts['wire_version']})"),
        ("Ready", "yes" if broker_facts["ready"] else "; ".join(broker_facts["not_ready_reasons"])),
        ("ZooKeeper", broker_facts["zookeeper"] or "disabled"),
        ("dataPath", broker_facts["data_path"]),
        ("dataLogPath", broker_facts["data_log_path"]),
        ("Working directory", os.getcwd()),
        ("Connections", broker_facts["connections"]),
        ("Open file descriptors", f"{_open_fds()} of {_limit('RLIMIT_NOFILE')}"),
        ("Peak resident memory", f"{usage.ru_maxrss // 1024} MiB"),
        ("CPU time", f"{usage.ru_utime + usage.ru_stime:.1f} s"),
        ("Python", f"{broker_facts['python']} on {broker_facts['platform']}"),
        ("CPUs", os.cpu_count()),
        ("pid", broker_facts["pid"]),
    ]
    history = dashboard.history
    return (
        heading("Broker")
        + facts_table(pairs)
        + line_chart(
            "Puts per second, per topic, last 5 minutes",
            history.put_rates(),
            "msg/s",
            SAMPLE_INTERVAL_S,
        )
        + line_chart(
            "Gets per second, last 5 minutes",
            [("get", history.get_rates())],
            "/s",
            SAMPLE_INTERVAL_S,
        )
    )


def topics_page(dashboard: Any) -> str:
    topics = facts.topics_facts(dashboard.broker)
    if not topics:
        return heading("Topics") + paragraph("No topic is configured or stored here.", "note")
    rows = [
        (
            link(f"/topics/{quote(topic['topic'], safe='')}", topic["topic"]),
            topic["partitions"],
            topic["messages"],
            topic["bytes"],
            topic["average_bytes"],
            topic["accept_publish"],
            topic["accept_subscribe"],
        )
        for topic in topics
    ]
    headers = (
        "Topic",
        "Partitions",
        "Messages",
        "Bytes",
        "Average size (B)",
        "Publish",
        "Subscribe",
    )
    chart = bar_chart(
        "Messages per topic", [(topic["topic"], topic["messages"]) for topic in topics], "msg"
    )
    return heading("Topics") + table(headers, rows, raw_columns=(0,)) + chart


def topic_page(dashboard: Any, topic_facts: dict[str, Any]) -> str:
    """One topic's page from its ``facts.topic_facts``."""
    topic = topic_facts["topic"]
    settings = [
        (name, topic_facts[name])
        for name in (
            "num_partitions",
            "accept_publish",
            "accept_subscribe",
            "unflush_threshold",
            "unflush_interval_ms",
            "data_path",
            "delete_policy",
            "delete_when",
            "messages",
            "bytes",
        )
    ]
    realtime = [
        (kind, dashboard.broker.realtime.format_topic(kind, topic))
        if dashboard.broker.stat_enabled(topic)
        else (kind, "NO")
        for kind in ("put", "put_failed", "get", "get_miss")
    ]
    partitions = topic_facts["partitions"]
    rows = [
        (
            p["partition"],
            p["min_offset"],
            p["max_offset"],
            p["messages"],
            p["bytes"],
            p["segments"],
            "yes" if p["accepts_puts"] else (p["failed"] or "closed"),
        )
        for p in partitions
    ]
    headers = ("Partition", "Min offset", "Max offset", "Messages", "Bytes", "Segments", "Puts")
    chart = bar_chart(
        "Bytes per partition", [(f"{topic}-{p['partition']}", p["bytes"]) for p in partitions], "B"
    )
    return (
        heading(f"Topic {topic}")
        + facts_table(settings)
        + heading("Realtime")
        + facts_table(realtime)
        + heading("Partitions")
        + table(headers, rows)
        + chart
    )


def group_links(topic: str, groups: list[str]) -> str:
    """The consumer groups of ``topic`` (from ZooKeeper), each linking to its page."""
    if not groups:
        return ""
    hrefs = [
        (f"/topics/{quote(topic, safe='')}?group={quote(group, safe='')}", group)
        for group in groups
    ]
    items = "".join(f"<li>{link(href, group)}</li>" for href, group in hrefs)
    return heading("Consumer groups") + f"<ul>{items}</ul>\n"


def groups_unavailable(reason: str) -> str:
    """The topic page's group list when ZooKeeper cannot be read."""
    return heading("Consumer groups") + paragraph(f"Not available: {reason}", "note")


def replication_page(dashboard: Any) -> str:
    replication = facts.replication_facts(dashboard.broker)
    rows = replication["async_slave"]
    if replication["role"] != "async_slave":
        note = (
            "This broker is a master. Its async slaves copy it as consumers; each slave's own "
            "dashboard shows its lag. Synchronous replication is not configured."
        )
        return heading("Replication") + paragraph(note, "note")
    headers = ("Topic", "Partition", "Slave end", "Master end", "Lag bytes", "Lag s", "State")
    keys = ("topic", "partition", "slave_end", "master_end", "lag_bytes", "lag_seconds", "state")
    chart = bar_chart(
        "Lag per partition",
        [(f"{row['topic']}-{row['partition']}", row["lag_bytes"] or 0) for row in rows],
        "B",
    )
    return (
        heading("Async slave replication")
        + table(headers, [[row[key] for key in keys] for row in rows])
        + chart
    )


def transactions_page(dashboard: Any) -> str:
    transactions = facts.transactions_facts(dashboard.broker)
    if not transactions:
        return heading("Transactions") + paragraph("No transaction is open or prepared.", "note")
    rows = [(t["key"], t["state"], t["messages"], t["bytes"]) for t in transactions]
    return heading("Transactions") + table(("Key", "State", "Messages", "Bytes"), rows)


def stats_page(item: str, code: int, text: str) -> str:
    """The answer ``code`` and ``text`` of ``stats <item>``, with links to the items."""
    links = " ".join(
        link(f"/stats/{name}" if name else "/stats", name or "general") for name in STATS_ITEMS
    )
    title = f"stats {item}".strip()
    return (
        heading(title)
        + f"<p>{links}</p>\n"
        + (paragraph(f"result {code}", "note") if code != 200 else "")
        + f'<textarea readonly aria-label="{escape(title)}">'
        + escape(text)
        + "</textarea>\n"
    )


def config_page(dashboard: Any) -> str:
    """The broker's config file as it is on disk now.

    Raises:
        OSError: the file cannot be read (the route answers 500 naming it).
    """
    path = dashboard.broker.config.path
    text = read_config_bytes(path).decode("utf-8", "replace")
    modified = datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.UTC)
    return (
        heading(f"Config {path}")
        + paragraph(f"Last modified {modified:%Y-%m-%d %H:%M:%S} UTC", "note")
        + '<p><button type="button" data-action="/reload-config">Reload config</button></p>'
        + '<p id="action-result" role="status"></p>\n'
        + f"<pre>{escape(text)}</pre>\n"
    )


def logging_page(ring: LogRing | None, since_ms: int) -> str:
    if ring is None:
        return error_fragment("no log ring is installed")
    lines = ring.lines(since_ms, LOG_LINES_SHOWN)
    text = "\n".join(line.text for line in lines)
    return (
        heading(f"Last {LOG_LINES_SHOWN} log lines")
        + f'<pre id="log-lines" data-lines="{LOG_LINES_SHOWN}">{escape(text)}</pre>\n'
        + paragraph("Refreshes every 1.5 s.", "note")
    )


def runtime_page(dashboard: Any) -> str:
    limits = [(name, _limit(name)) for name in RLIMITS if hasattr(resource, name)]
    variables = sorted(
        (name, value) for name, value in os.environ.items() if name.startswith("META_")
    )
    pairs = [
        ("Python", sys.version),
        ("Executable", sys.executable),
        ("argv", " ".join(sys.argv)),
        ("pid", os.getpid()),
        ("Working directory", os.getcwd()),
        *limits,
    ]
    return (
        heading("Runtime")
        + facts_table(pairs)
        + heading("META_* environment variables")
        + (facts_table(variables) if variables else paragraph("None set.", "note"))
    )


def thread_dump_page() -> str:
    """Every thread's stack; the caller's (the reactor) first."""
    frames = sys._current_frames()  # documented in the sys module despite its underscore
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    current = threading.get_ident()
    order = sorted(frames, key=lambda ident: (ident != current, names.get(ident, "")))
    parts = [heading(f"{len(order)} threads")]
    for ident in order:
        name = names.get(ident, "unknown")
        suffix = " (reactor)" if ident == current else ""
        stack = "".join(traceback.format_stack(frames[ident]))
        parts.append(f"<h3>{escape(name)}{escape(suffix)}</h3><pre>{escape(stack)}</pre>\n")
    return "".join(parts)


def _ago(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} hours {minutes} minutes ago"
    if minutes:
        return f"{minutes} minutes ago"
    return f"{seconds} seconds ago"


def _open_fds() -> int | str:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return "unknown"


def _limit(name: str) -> str:
    soft, hard = resource.getrlimit(getattr(resource, name))

    def text(value: int) -> str:
        return "unlimited" if value == resource.RLIM_INFINITY else str(value)

    return f"{text(soft)} (hard {text(hard)})"
