"""``DashboardResource``: requests become ``routes.Request``s; replies are written at once
or when their Deferred fires; a route that raises answers 500 (no network: DummyRequest)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from twisted.internet import defer
from twisted.web import server
from twisted.web.test.requesthelper import DummyRequest

from meta.admin.client import NotFoundError
from meta.config import ZkConfig
from meta.dashboard import server as dashboard_server
from meta.dashboard.actions import Actions
from meta.dashboard.routes import Reply, Request, route
from meta.dashboard.server import DashboardResource
from meta.dashboard.zookeeper import ZooKeeperViews
from tests.dashboard.fakes import FakeBroker
from tests.dashboard.test_zk_reads import Reactor


def request(path: bytes, method: bytes = b"GET", headers: dict | None = None) -> DummyRequest:
    made = DummyRequest(path.split(b"/")[1:])
    made.path, _, query = path.partition(b"?")
    made.method = method
    made.args = {}
    for pair in filter(None, query.split(b"&")):
        key, _, value = pair.partition(b"=")
        made.args.setdefault(key, []).append(value)
    for name, value in (headers or {}).items():
        made.requestHeaders.addRawHeader(name, value)
    return made


def render_with(monkeypatch, answer) -> tuple[DummyRequest, object, list[Request]]:
    seen: list[Request] = []

    def fake_route(dashboard, parsed):
        seen.append(parsed)
        return answer(parsed)

    monkeypatch.setattr(dashboard_server, "route", fake_route)
    made = request(b"/topics?format=json", headers={b"X-MetaQ-Admin": b"1", b"Host": b"h:1"})
    result = DashboardResource(SimpleNamespace()).render(made)
    return made, result, seen


def test_a_request_is_parsed_into_method_path_query_and_headers(monkeypatch):
    _made, _result, seen = render_with(monkeypatch, lambda parsed: Reply(200, "text/plain", b""))
    (parsed,) = seen
    assert (parsed.method, parsed.path, parsed.query) == ("GET", "/topics", {"format": "json"})
    assert parsed.wants_json
    assert parsed.admin_header
    assert parsed.host_header == "h:1"


def test_a_reply_is_written_with_its_code_and_content_type(monkeypatch):
    made, result, _seen = render_with(monkeypatch, lambda parsed: Reply(201, "text/x", b"hi"))
    assert result == b"hi"
    assert made.responseCode == 201
    assert made.responseHeaders.getRawHeaders(b"content-type") == [b"text/x"]


def test_a_deferred_reply_is_written_when_it_fires(monkeypatch):
    later: defer.Deferred = defer.Deferred()
    made, result, _seen = render_with(monkeypatch, lambda parsed: later)
    assert result is server.NOT_DONE_YET
    assert made.finished == 0
    later.callback(Reply(200, "text/plain", b"done"))
    assert made.written == [b"done"]
    assert made.finished == 1


def test_a_route_that_raises_answers_500_with_the_message(monkeypatch):
    def broken(parsed):
        raise RuntimeError("boom")

    made, result, _seen = render_with(monkeypatch, broken)
    assert made.responseCode == 500
    assert result == b"Server error: boom\n"


def test_unknown_paths_answer_404_naming_the_path_and_other_methods_405():
    dashboard = SimpleNamespace()
    reply = route(dashboard, Request("GET", "/nothing"))
    assert (reply.code, reply.content_type) == (404, "text/plain; charset=utf-8")
    assert reply.body == b"No page /nothing on this dashboard: the menu at / lists the pages.\n"
    assert route(dashboard, Request("PUT", "/topics")).code == 405


def test_the_config_page_of_a_file_that_cannot_be_read_is_500_naming_it(tmp_path):
    broker = FakeBroker()
    broker.config.path = str(tmp_path / "gone.ini")
    dashboard = SimpleNamespace(broker=broker, actions=Actions(None, None))
    reply = route(dashboard, Request("GET", "/config"))
    assert (reply.code, reply.content_type) == (500, "text/html; charset=utf-8")
    assert b"cannot read the config file " + str(tmp_path / "gone.ini").encode() in reply.body
    (tmp_path / "gone.ini").write_text("[system]\nbrokerId=3\n")
    shown = route(dashboard, Request("GET", "/config"))
    assert shown.code == 200 and b"brokerId=3" in shown.body


@pytest.mark.parametrize("path", ["/topics/nope", "/topics/nope?group=g"])
def test_the_page_of_an_unknown_topic_is_404_naming_it(path):
    path, _, query = path.partition("?")
    request = Request("GET", path, dict([query.split("=")]) if query else {})
    reply = route(SimpleNamespace(broker=FakeBroker(configured={"orders": 2})), request)
    assert (reply.code, reply.content_type) == (404, "text/html; charset=utf-8")
    assert b"no topic nope on this broker" in reply.body
    assert b'class="error"' in reply.body


def test_the_json_of_an_unknown_topic_is_404_naming_it():
    dashboard = SimpleNamespace(broker=FakeBroker())
    reply = route(dashboard, Request("GET", "/api/v1/topics/nope/groups/g"))
    assert (reply.code, reply.content_type) == (404, "application/json")
    assert "no topic nope" in json.loads(reply.body)["error"]


def test_an_unknown_consumer_group_is_404_and_zookeeper_out_of_reach_503():
    broker = FakeBroker(configured={"orders": 2})
    unknown = NotFoundError("unknown consumer group g: no node /meta/consumers/g")

    def read_on_this_thread(run):
        raise unknown

    broker.registry = SimpleNamespace(read_on_this_thread=read_on_this_thread)
    broker.config.zookeeper = ZkConfig(connect="127.0.0.1:1")
    reactor = Reactor()
    views = ZooKeeperViews(broker, lambda: 0.0, lambda: 8120, reactor)
    replies: list[Reply] = []
    views.page("orders", "g", False).addCallback(replies.append)
    reactor.drain(1)
    broker.registry = None  # ZooKeeper disabled on this broker
    views.page("orders", "g", True).addCallback(replies.append)
    assert [reply.code for reply in replies] == [404, 503]
    assert b"unknown consumer group g" in replies[0].body
    assert "ZooKeeper is disabled" in json.loads(replies[1].body)["error"]


def test_healthz_answers_ok():
    reply = route(SimpleNamespace(), Request("GET", "/healthz"))
    assert (reply.code, reply.body) == (200, b"ok\n")


def test_the_topic_page_is_shown_without_groups_when_zookeeper_cannot_be_read(monkeypatch):
    from meta.dashboard import pages

    monkeypatch.setattr(pages, "topic_page", lambda dashboard, facts: "<h2>Topic t</h2>")
    views = SimpleNamespace(groups_of=lambda topic: defer.fail(RuntimeError("no session")))
    replies = []
    dashboard = SimpleNamespace(views=views, broker=FakeBroker(configured={"t": 1}))
    route(dashboard, Request("GET", "/topics/t")).addCallback(replies.append)
    (reply,) = replies
    assert reply.code == 200
    assert b"<h2>Topic t</h2>" in reply.body
    assert b"Not available: no session" in reply.body


SECURITY = {
    b"content-security-policy": dashboard_server.CONTENT_SECURITY_POLICY.encode(),
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"x-frame-options": b"DENY",
}


def assert_secured(made: DummyRequest) -> None:
    for name, value in SECURITY.items():
        assert made.responseHeaders.getRawHeaders(name) == [value], name


def test_every_answer_carries_the_security_headers_errors_and_late_ones_too(monkeypatch):
    made, _result, _seen = render_with(monkeypatch, lambda parsed: Reply(200, "text/x", b""))
    assert_secured(made)

    def broken(parsed):
        raise RuntimeError("boom")

    made, _result, _seen = render_with(monkeypatch, broken)
    assert made.responseCode == 500
    assert_secured(made)
    made, _result, _seen = render_with(monkeypatch, lambda parsed: defer.fail(ValueError("x")))
    assert made.responseCode == 500
    assert_secured(made)
    extra = Reply(401, "text/plain", b"", (("WWW-Authenticate", "Bearer"),))
    made, _result, _seen = render_with(monkeypatch, lambda parsed: defer.succeed(extra))
    assert_secured(made)
    assert made.responseHeaders.getRawHeaders(b"www-authenticate") == [b"Bearer"]


def test_the_policy_allows_no_inline_script_no_framing_and_only_this_origin():
    policy = dict(
        part.strip().split(" ", 1) for part in dashboard_server.CONTENT_SECURITY_POLICY.split(";")
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in dashboard_server.CONTENT_SECURITY_POLICY


def test_the_authorization_header_reaches_the_route(monkeypatch):
    seen: list[Request] = []
    monkeypatch.setattr(
        dashboard_server,
        "route",
        lambda dashboard, parsed: seen.append(parsed) or Reply(200, "text/plain", b""),
    )
    made = request(b"/reload-config", b"POST", {b"Authorization": b"Bearer abc"})
    DashboardResource(SimpleNamespace()).render(made)
    assert seen[0].authorization == "Bearer abc"


def test_the_script_and_style_sheet_are_served_with_their_types():
    dashboard = SimpleNamespace()
    script = route(dashboard, Request("GET", "/static/dashboard.js"))
    style = route(dashboard, Request("GET", "/static/dashboard.css"))
    assert (script.code, script.content_type) == (200, "text/javascript; charset=utf-8")
    assert b"sessionStorage" in script.body
    assert (style.code, style.content_type) == (200, "text/css; charset=utf-8")


@pytest.mark.parametrize("group", ["a/..", "..", "/../../x", "a//b", "a/"])
def test_the_page_of_a_group_zookeeper_cannot_address_is_404_without_reading_it(group):
    broker = FakeBroker(configured={"orders": 2})
    views = SimpleNamespace(page=lambda *args: pytest.fail("ZooKeeper must not be read"))
    dashboard = SimpleNamespace(broker=broker, views=views, actions=Actions(None, None))
    reply = route(dashboard, Request("GET", "/topics/orders", {"group": group}))
    assert reply.code == 404
    assert b"ZooKeeper refuses such a path" in reply.body
