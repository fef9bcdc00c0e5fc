"""The dashboard's URL table: which function answers which path, as HTML, JSON or text.

``route(dashboard, request)`` returns a ``Reply``, or a Deferred firing with one for the
actions (they wait for a reload or a ZooKeeper write). The original dashboard's URLs answer
whole HTML pages (each page's fragment in ``meta.dashboard.shell``'s frame; ``/`` is the
Dashboard page), or JSON when the request's ``Accept`` or ``Content-Type`` is JSON or the
query has ``format=json``; ``/api/v1/...`` always answers JSON; ``/static/`` serves the
pages' one script and style sheet. An unknown path, and a page of an unknown topic,
consumer group or stats item, answers 404 with a text naming what was not found.

Reactor thread only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from meta.dashboard import pages
from meta.dashboard.html import error_fragment
from meta.dashboard.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from meta.dashboard.metrics import consumer_lag_text
from meta.dashboard.shell import (
    PAGE_NAMES,
    SCRIPT,
    SCRIPT_PATH,
    STYLE,
    STYLE_PATH,
    document,
    operator_panel,
)
from meta.status import facts
from meta.status.health import readiness

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
HTML = "text/html; charset=utf-8"
JAVASCRIPT = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status code, ``Content-Type``, body, and any other headers."""

    code: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Request:
    """What a route needs from an HTTP request."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    wants_json: bool = False
    client_host: str = ""
    server_host: str = ""  # the address the request was accepted on
    admin_header: bool = False
    host_header: str = ""
    authorization: str = ""  # the Authorization header (the actions' operator token)


def text_reply(code: int, text: str) -> Reply:
    return Reply(code, TEXT, text.encode("utf-8"))


def json_reply(value: Any, code: int = 200) -> Reply:
    body = json.dumps(value, indent=1, sort_keys=True).encode("utf-8") + b"\n"
    return Reply(code, JSON, body)


def html_reply(fragment: str, code: int = 200) -> Reply:
    return Reply(code, HTML, fragment.encode("utf-8"))


def is_group_name(name: str) -> bool:
    """Whether ``name`` can name a consumer group's ZooKeeper path: no part between its
    ``/``s is empty, ``.`` or ``..`` (ZooKeeper refuses those; a client creating
    ``consumers/a/b`` makes group ``a/b`` work, so ``/`` itself is allowed)."""
    return all(part not in ("", ".", "..") for part in name.split("/"))


def not_a_group(name: str) -> str:
    return (
        f"no consumer group {name}: a group's name cannot hold an empty, '.' or '..' part "
        "between '/'s (ZooKeeper refuses such a path)"
    )


def not_found(path: str) -> Reply:
    """The 404 of a path that is no page of the dashboard, naming it. (The Java dashboard's
    text, "I am sorry, i can't find the page.", named nothing; no tool reads it.)"""
    return text_reply(404, f"No page {path} on this dashboard: the menu at / lists the pages.\n")


def unknown(request: Request, text: str) -> Reply:
    """The 404 of a page whose topic, group or stats item does not exist: ``text`` names it,
    in the page's error box, or as ``{"error": text}`` when JSON was asked for."""
    if request.wants_json:
        return json_reply({"error": text}, 404)
    return html_reply(error_fragment(text), 404)


def route(dashboard: Any, request: Request) -> Any:
    """The ``Reply`` (or a Deferred of one) to ``request``."""
    if request.method == "POST":
        return dashboard.actions.route(request)
    if request.method not in ("GET", "HEAD"):
        return text_reply(405, f"{request.method} is not allowed on {request.path}\n")
    reply = _get(dashboard, request)
    if isinstance(reply, Reply):
        return _as_page(dashboard, request, reply)
    return reply.addCallback(lambda answer: _as_page(dashboard, request, answer))


def _get(dashboard: Any, request: Request) -> Any:
    path = request.path
    handler = FIXED.get(path)
    if handler is not None:
        return handler(dashboard, request)
    for prefix, prefix_handler in PREFIXED:
        if path.startswith(prefix) and len(path) > len(prefix):
            return prefix_handler(dashboard, request, path[len(prefix) :])
    return not_found(path)


def _as_page(dashboard: Any, request: Request, reply: Reply) -> Reply:
    """An HTML fragment as a whole page: in the frame, with the menu's entry of its path
    marked and, on pages with action buttons, the Operator token field."""
    if reply.content_type != HTML:
        return reply
    fragment = reply.body.decode("utf-8")
    name = request.path.strip("/").split("/")[0]
    current = name if name in PAGE_NAMES else "dashboard" if name in ("", "index.html") else ""
    operator = ""
    if 'data-action="' in fragment:
        actions = dashboard.actions
        operator = operator_panel(actions.token_file is not None, actions.how_to_enable)
    page = document(_title(dashboard), current, fragment, operator)
    return replace(reply, body=page.encode("utf-8"))


def _page(
    html: Callable[[Any], str], facts_of: Callable[[Any], Any] | None = None
) -> Callable[[Any, Request], Reply]:
    """An original URL: the HTML fragment, or the page's facts as JSON when asked."""

    def answer(dashboard: Any, request: Request) -> Reply:
        if request.wants_json and facts_of is not None:
            return json_reply(facts_of(dashboard))
        return html_reply(html(dashboard))

    return answer


def _broker_facts(dashboard: Any) -> dict[str, Any]:
    return facts.broker_facts(dashboard.broker, dashboard.started_at_s, dashboard.now_s())


def _title(dashboard: Any) -> str:
    broker = dashboard.broker
    return f"MetaQ admin {broker.version} -- Broker-{broker.config.broker_id}"


def _shell(dashboard: Any, request: Request) -> Reply:
    """``/``: the Dashboard page (its script follows a Java dashboard ``#fragment`` link)."""
    if request.wants_json:
        return json_reply(
            {"broker_id": dashboard.broker.config.broker_id, "version": dashboard.broker.version}
        )
    return html_reply(pages.dashboard_page(dashboard))


def _readyz(dashboard: Any, request: Request) -> Reply:
    code, body = readiness(dashboard.broker)
    return Reply(code, TEXT, body)


def _metrics(dashboard: Any, request: Request) -> Any:
    """The scrape; with ``?groups=G1,G2`` also those groups' lag (read from ZooKeeper)."""
    text = dashboard.metrics.render()
    groups = [group for group in request.query.get("groups", "").split(",") if group]
    if not groups:
        return Reply(200, METRICS_CONTENT_TYPE, text)
    lag = dashboard.views.consumer_lag(groups)
    lag.addCallback(lambda rows: Reply(200, METRICS_CONTENT_TYPE, text + consumer_lag_text(rows)))
    lag.addErrback(lambda failure: text_reply(503, f"{failure.getErrorMessage()}\n"))
    return lag


def _config(dashboard: Any, request: Request) -> Reply:
    """The config file's page; 500 with an error box naming the file when it cannot be read."""
    try:
        return html_reply(pages.config_page(dashboard))
    except OSError as error:
        path = dashboard.broker.config.path
        return html_reply(error_fragment(f"cannot read the config file {path}: {error}"), 500)


def _logging(dashboard: Any, request: Request) -> Reply:
    since = request.query.get("since") or request.query.get("timetamp") or "0"
    since_ms = int(since) if since.isdigit() else 0
    if request.wants_json:
        lines = dashboard.ring.lines(since_ms) if dashboard.ring is not None else []
        return json_reply([{"time_ms": line.created_ms, "text": line.text} for line in lines])
    return html_reply(pages.logging_page(dashboard.ring, since_ms))


def _topic(dashboard: Any, request: Request, topic: str) -> Any:
    try:
        topic_facts = facts.topic_facts(dashboard.broker, topic)
    except facts.UnknownTopicError as error:
        return unknown(request, str(error))
    group = request.query.get("group")
    if group is not None and not is_group_name(group):
        return unknown(request, not_a_group(group))
    if group is not None:
        return dashboard.views.page(topic, group, request.wants_json)
    if request.wants_json:
        return json_reply(topic_facts)
    page = pages.topic_page(dashboard, topic_facts)
    groups = dashboard.views.groups_of(topic)
    groups.addCallback(lambda found: pages.group_links(topic, found))
    # ZooKeeper out of reach (or suspended) costs the group list, not the page.
    groups.addErrback(lambda failure: pages.groups_unavailable(failure.getErrorMessage()))
    groups.addCallback(lambda links: html_reply(page + links))
    return groups


def _api_topic(dashboard: Any, request: Request, topic: str) -> Any:
    json_request = replace(request, wants_json=True)
    if "/groups/" not in topic:
        return _topic(dashboard, json_request, topic)
    topic, group = topic.split("/groups/", 1)
    return _topic(dashboard, replace(json_request, query={"group": group}), topic)


RESET_ITEM = "reset"
"""The one ``stats`` item that changes something (it zeroes the counters): not a page."""


def _stats(dashboard: Any, request: Request, item: str = "") -> Reply:
    """``stats <item>``; 404 when the broker answers it as a topic it does not know (a name
    that is no item, no configured topic and no stored one: Java's ``resultCode 1``).

    ``reset`` answers 405 and resets nothing (the Java dashboard reset the counters on a
    GET, which a browser's prefetch or a crawler makes): the wire's ``stats reset`` does it."""
    if item == RESET_ITEM:
        return text_reply(
            405,
            "stats reset zeroes the broker's counters, so no GET runs it: send the line "
            "`stats reset` to the broker's port instead\n",
        )
    code, body = dashboard.broker.render_stats(item)
    text = body.decode("utf-8", "replace")
    lines = text.split("\r\n", 3)
    if lines[:1] == ["STATS"] and facts.is_unknown_topic_block(lines[1:3]):
        missing = f"no stats item or topic {item} on this broker (the stats page lists the items)"
        return unknown(request, missing)
    if request.wants_json:
        return json_reply({"item": item, "code": code, "text": text})
    return html_reply(pages.stats_page(item, code, text))


def _api_stats(dashboard: Any, request: Request, item: str) -> Reply:
    return _stats(dashboard, replace(request, wants_json=True), item)


FIXED: dict[str, Callable[[Any, Request], Any]] = {
    "/": _shell,
    "/index.html": _shell,
    "/healthz": lambda dashboard, request: text_reply(200, "ok\n"),
    SCRIPT_PATH: lambda dashboard, request: Reply(200, JAVASCRIPT, SCRIPT.encode("utf-8")),
    STYLE_PATH: lambda dashboard, request: Reply(200, CSS, STYLE.encode("utf-8")),
    "/readyz": _readyz,
    "/metrics": _metrics,
    "/dashboard": _page(pages.dashboard_page, _broker_facts),
    "/topics": _page(pages.topics_page, lambda d: facts.topics_facts(d.broker)),
    "/replication": _page(pages.replication_page, lambda d: facts.replication_facts(d.broker)),
    "/transactions": _page(pages.transactions_page, lambda d: facts.transactions_facts(d.broker)),
    "/config": _config,
    "/java-properties": _page(pages.runtime_page),
    "/thread-dump": _page(lambda dashboard: pages.thread_dump_page()),
    "/logging": _logging,
    "/stats": _stats,
    "/cluster": lambda dashboard, request: dashboard.views.cluster(request.wants_json),
    "/api/v1/broker": lambda dashboard, request: json_reply(_broker_facts(dashboard)),
    "/api/v1/topics": lambda d, r: json_reply(facts.topics_facts(d.broker)),
    "/api/v1/partitions": lambda d, r: json_reply(facts.partitions_facts(d.broker)),
    "/api/v1/replication": lambda d, r: json_reply(facts.replication_facts(d.broker)),
    "/api/v1/transactions": lambda d, r: json_reply(facts.transactions_facts(d.broker)),
    "/api/v1/cluster": lambda dashboard, request: dashboard.views.cluster(True),
}

PREFIXED: tuple[tuple[str, Callable[[Any, Request, str], Any]], ...] = (
    ("/topics/", _topic),
    ("/stats/", _stats),
    ("/api/v1/topics/", _api_topic),
    ("/api/v1/stats/", _api_stats),
)
