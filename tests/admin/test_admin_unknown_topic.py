"""Every command that names a topic treats an unknown one the same way: exit status 1,
nothing on stdout, and one stderr line naming the topic, the topics that exist and, when
one is close, a "did you mean". Runs against ``conftest.admin_cluster``."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

GROUP = "g-topic-check"
MSG_ID_OF_BROKER_1 = 1 << 12
"""A message id whose worker bits (21..12) name broker 1."""

COMMANDS = {
    "partitions": ("partitions", "{topic}"),
    "lag": ("lag", GROUP, "--topic", "{topic}"),
    "reset-offsets": ("reset-offsets", GROUP, "--topic", "{topic}", "--to", "earliest"),
    "browse": ("browse", "{topic}", "1-0"),
    "find-message": ("find-message", str(MSG_ID_OF_BROKER_1), "--topic", "{topic}"),
    "produce": ("produce", "{topic}"),
    "consume": ("consume", "{topic}", "--max-messages", "1"),
    "consume --group": ("consume", "{topic}", "--group", GROUP, "--max-messages", "1"),
}


@pytest.fixture(scope="module")
def group_node(zookeeper, admin_cluster):
    """A stopped group, so that commands naming a group get as far as the topic."""
    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    client.start(timeout=10)
    client.ensure_path(f"{admin_cluster.root}/consumers/{GROUP}/ids")
    client.stop()
    client.close()


def argv_of(command: str, topic: str) -> list[str]:
    return [word.format(topic=topic) for word in COMMANDS[command]]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_topic_exits_1_with_one_line_and_a_suggestion(cli, group_node, command):
    status, out, err = cli(*argv_of(command, "ordres"))
    assert (status, out) == (1, "")
    assert len(err.splitlines()) == 1
    assert err.startswith("meta-admin: unknown topic ordres: ")
    assert "(topics: " in err and "browse, " in err
    assert err.rstrip().endswith("did you mean orders?")


@pytest.mark.parametrize("command", ["partitions", "consume"])
def test_an_unknown_topic_far_from_every_name_gets_no_suggestion(cli, group_node, command):
    status, out, err = cli(*argv_of(command, "zzqqxx"))
    assert (status, out) == (1, "")
    assert "unknown topic zzqqxx" in err and "did you mean" not in err
