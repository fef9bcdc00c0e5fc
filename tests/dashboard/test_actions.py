"""Actions pass three gates: the same-origin ones (127.0.0.1, ::1 or the address the
dashboard was reached at, ``X-MetaQ-Admin: 1``, a ``Host`` that is an address), a configured
operator token file, and that token in ``Authorization: Bearer``."""

from __future__ import annotations

import dataclasses

import pytest
from twisted.internet import defer

import meta.dashboard.actions as actions_module
from meta.dashboard.actions import (
    ACTIONS_OFF_TEXT,
    RELOAD_DONE_TEXT,
    TOKEN_KEY,
    Actions,
    TokenFileError,
    is_trusted,
    presented_token,
    read_token,
)
from meta.dashboard.routes import Request
from meta.log_limits import PeerWarnings

TOKEN = "0123456789abcdef0123456789abcdef"


def post(
    path: str,
    host: str = "127.0.0.1",
    header: bool = True,
    host_header: str = "127.0.0.1:8120",
    token: str | None = TOKEN,
) -> Request:
    authorization = "" if token is None else f"Bearer {token}"
    return Request(
        "POST",
        path,
        client_host=host,
        admin_header=header,
        host_header=host_header,
        authorization=authorization,
    )


@pytest.fixture
def token_file(tmp_path) -> str:
    path = tmp_path / "dashboard.token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return str(path)


def test_only_the_loopback_address_with_the_header_is_trusted():
    assert is_trusted(post("/reload-config"))
    assert is_trusted(post("/reload-config", host="::1"))
    assert is_trusted(post("/reload-config", host="::ffff:127.0.0.1"))
    assert not is_trusted(post("/reload-config", header=False))
    assert not is_trusted(post("/reload-config", host="127.0.0.2"))
    assert not is_trusted(post("/reload-config", host="10.1.2.3"))
    assert not is_trusted(post("/reload-config", host="not an address"))


def test_a_client_on_the_broker_host_at_its_own_address_is_trusted():
    """The rule the heuristic transaction commands follow too (meta.operator_access)."""
    request = post("/reload-config", host="10.1.2.3", host_header="10.1.2.3:8120")
    assert not is_trusted(request)
    assert is_trusted(dataclasses.replace(request, server_host="10.1.2.3"))


def test_an_untrusted_reload_gets_403_and_does_not_reload(token_file):
    reloads = []
    actions = Actions(None, lambda: reloads.append(1), token_file)
    reply = actions.route(post("/reload-config", header=False))
    assert reply.code == 403
    assert reloads == []


def test_refusals_are_logged_a_few_per_client_host(token_file, caplog, monkeypatch):
    """Goal: an operator sees refused actions in the log, and a page posting in a loop
    cannot fill it. Method: 20 refused posts from one host, one from another."""
    monkeypatch.setattr(actions_module, "REFUSALS", PeerWarnings(burst=3))
    actions = Actions(None, lambda: defer.succeed(1), token_file)
    caplog.set_level("WARNING", "meta.dashboard")
    for _ in range(20):
        actions.route(post("/reload-config", token="wrong"))
    actions.route(post("/reload-config", host="::1", header=False))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 4
    assert lines[0] == "dashboard action /reload-config from 127.0.0.1 refused: 401 Unauthorized"
    assert lines[3] == "dashboard action /reload-config from ::1 refused: 403 Forbidden"


def test_without_a_token_file_actions_are_off_and_the_answer_says_how_to_turn_them_on():
    reloads = []
    reply = Actions(None, lambda: reloads.append(1), None).route(post("/reload-config"))
    assert (reply.code, reply.body.decode()) == (403, ACTIONS_OFF_TEXT)
    assert f"[system] {TOKEN_KEY}=" in ACTIONS_OFF_TEXT and "chmod 600" in ACTIONS_OFF_TEXT
    assert reloads == []


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN[:-1], TOKEN + "0", TOKEN.upper()])
def test_a_missing_or_wrong_token_gets_401_and_does_not_reload(token_file, token):
    reloads = []
    actions = Actions(None, lambda: reloads.append(1), token_file)
    reply = actions.route(post("/reload-config", token=token))
    assert reply.code == 401
    assert dict(reply.headers)["WWW-Authenticate"].startswith("Bearer ")
    assert reloads == []


def test_a_token_file_others_can_read_turns_the_actions_off_with_503(token_file):
    import os

    os.chmod(token_file, 0o644)
    reply = Actions(None, lambda: defer.succeed(1), token_file).route(post("/reload-config"))
    assert reply.code == 503
    assert f"chmod 600 {token_file}" in reply.body.decode()


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"", "no token of at least 16"), (b"short\n", "no token"), (b"x" * 5000, "larger")],
)
def test_an_unusable_token_file_is_named_with_its_problem(tmp_path, content, problem):
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(TokenFileError, match=problem) as raised:
        read_token(str(path))
    assert str(path) in str(raised.value)
    with pytest.raises(TokenFileError, match="cannot read"):
        read_token(str(tmp_path / "missing"))


def test_the_token_is_the_first_line_and_the_bearer_scheme_is_case_blind(token_file):
    assert read_token(token_file) == TOKEN.encode()
    assert presented_token(f"bearer {TOKEN}") == TOKEN.encode()
    assert presented_token(f"Basic {TOKEN}") is None
    assert presented_token("Bearer") is None


def test_a_trusted_reload_with_the_token_answers_the_original_text(token_file):
    actions = Actions(None, lambda: defer.succeed("outcome"), token_file)
    replies = []
    actions.route(post("/reload-config")).addCallback(replies.append)
    assert replies[0].code == 200
    assert replies[0].body == RELOAD_DONE_TEXT.encode()


def test_a_failed_reload_answers_the_error_text(token_file):
    actions = Actions(None, lambda: defer.fail(ValueError("bad key x")), token_file)
    replies = []
    actions.route(post("/reload-config")).addCallback(replies.append)
    assert replies[0].body == b"bad key x"


def test_skip_passes_topic_group_and_partition_unquoted(token_file):
    class Views:
        def skip(self, topic, group, partition):
            self.asked = (topic, group, partition)
            return defer.succeed("success")

    views = Views()
    replies = []
    path = "/topics/test/groups/%3Cg%3E/partitions/3/skip"
    Actions(views, None, token_file).route(post(path)).addCallback(replies.append)
    assert views.asked == ("test", "<g>", 3)
    assert replies[0].body == b"success"


def test_unknown_posts_get_404():
    assert Actions(None, None).route(post("/nothing")).code == 404


def test_a_request_addressed_by_a_name_other_than_localhost_is_not_trusted():
    assert is_trusted(post("/reload-config", host_header="localhost:8120"))
    assert is_trusted(post("/reload-config", host_header="[::1]:8120"))
    assert is_trusted(post("/reload-config", host_header="127.0.0.1"))
    assert not is_trusted(post("/reload-config", host_header="evil.example:8120"))
    assert not is_trusted(post("/reload-config", host_header=""))


@pytest.mark.parametrize("group", ["a%2F..", "..", "%2E%2E", ".", "a%2F%2Fb", "%2Fa"])
def test_a_skip_of_a_group_zookeeper_cannot_address_is_404_and_writes_nothing(token_file, group):
    class Views:
        def skip(self, topic, group, partition):
            raise AssertionError("no skip may run")

    reply = Actions(Views(), None, token_file).route(
        post(f"/topics/test/groups/{group}/partitions/0/skip")
    )
    assert reply.code == 404
    assert b"ZooKeeper refuses such a path" in reply.body
