"""Actions are accepted only from the broker's host (127.0.0.1, ::1 or the address the
dashboard was reached at) with ``X-MetaQ-Admin: 1``."""

from __future__ import annotations

import dataclasses

from twisted.internet import defer

from meta.dashboard.actions import RELOAD_DONE_TEXT, Actions, is_trusted
from meta.dashboard.routes import Request


def post(
    path: str, host: str = "127.0.0.1", header: bool = True, host_header: str = "127.0.0.1:8120"
) -> Request:
    return Request("POST", path, client_host=host, admin_header=header, host_header=host_header)


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


def test_an_untrusted_reload_gets_403_and_does_not_reload():
    reloads = []
    actions = Actions(None, lambda: reloads.append(1))
    reply = actions.route(post("/reload-config", header=False))
    assert reply.code == 403
    assert reloads == []


def test_a_trusted_reload_answers_the_original_text():
    actions = Actions(None, lambda: defer.succeed("outcome"))
    replies = []
    actions.route(post("/reload-config")).addCallback(replies.append)
    assert replies[0].code == 200
    assert replies[0].body == RELOAD_DONE_TEXT.encode()


def test_a_failed_reload_answers_the_error_text():
    actions = Actions(None, lambda: defer.fail(ValueError("bad key x")))
    replies = []
    actions.route(post("/reload-config")).addCallback(replies.append)
    assert replies[0].body == b"bad key x"


def test_skip_passes_topic_group_and_partition_unquoted():
    class Views:
        def skip(self, topic, group, partition):
            self.asked = (topic, group, partition)
            return defer.succeed("success")

    views = Views()
    replies = []
    path = "/topics/test/groups/%3Cg%3E/partitions/3/skip"
    Actions(views, None).route(post(path)).addCallback(replies.append)
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
