"""``DashboardResource``: requests become ``routes.Request``s; replies are written at once
or when their Deferred fires; a route that raises answers 500 (no network: DummyRequest)."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import defer
from twisted.web import server
from twisted.web.test.requesthelper import DummyRequest

from meta.dashboard import server as dashboard_server
from meta.dashboard.routes import NOT_FOUND_TEXT, Reply, Request, route
from meta.dashboard.server import DashboardResource


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


def test_unknown_paths_answer_the_original_404_text_and_other_methods_405():
    dashboard = SimpleNamespace()
    assert route(dashboard, Request("GET", "/nothing")).body == NOT_FOUND_TEXT.encode()
    assert route(dashboard, Request("PUT", "/topics")).code == 405


def test_healthz_answers_ok():
    reply = route(SimpleNamespace(), Request("GET", "/healthz"))
    assert (reply.code, reply.body) == (200, b"ok\n")


def test_the_topic_page_is_shown_without_groups_when_zookeeper_cannot_be_read(monkeypatch):
    from meta.dashboard import pages

    monkeypatch.setattr(pages, "topic_page", lambda dashboard, topic: "<h2>Topic t</h2>")
    views = SimpleNamespace(groups_of=lambda topic: defer.fail(RuntimeError("no session")))
    replies = []
    route(SimpleNamespace(views=views), Request("GET", "/topics/t")).addCallback(replies.append)
    (reply,) = replies
    assert reply.code == 200
    assert b"<h2>Topic t</h2>" in reply.body
    assert b"Not available: no session" in reply.body
