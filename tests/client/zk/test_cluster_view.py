"""``ZkClusterView`` against a scripted stand-in for ``KazooClient``: how long a caller can
wait for ZooKeeper, and what it is told when ZooKeeper does not answer.

The stand-in answers the async reads from a dict of nodes, or never (``silent``); its
blocking ``get_children`` (what kazoo's ``ChildrenWatch`` calls at creation) waits until the
test releases it, as kazoo's waits for a ZooKeeper that is down. Each caller runs in a thread
joined with a deadline.
"""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from meta.client.zk.cluster_view import ZkClusterView
from meta.errors import ClientError

WAIT_S = 5.0
TIMEOUT_S = 0.2
TOPICS_PUB = "/meta/brokers/topics-pub"


class Result:
    """A kazoo async result: a value, an error, or no answer within any timeout."""

    def __init__(self, value=None, error: BaseException | None = None, answered: bool = True):
        self.value, self.error, self.answered = value, error, answered

    def get(self, timeout: float | None = None):
        if not self.answered:
            time.sleep(timeout or 0)
            raise KazooTimeoutError("no answer")
        if self.error is not None:
            raise self.error
        return self.value


class Handler:
    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def lock_object(self) -> threading.Lock:
        return threading.Lock()

    def spawn(self, function, *args) -> threading.Thread:
        thread = threading.Thread(target=function, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()
        return thread


class FakeZooKeeper:
    """The parts of ``KazooClient`` the view uses; ``silent`` makes every async read hang."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = nodes
        self.silent = False
        self.released = threading.Event()  # lets a blocking get_children return
        self.handler = Handler()

    def add_listener(self, listener) -> None:
        pass

    def remove_listener(self, listener) -> None:
        pass

    def _children(self, path: str) -> list[str]:
        prefix = path + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def ensure_path_async(self, path: str) -> Result:
        return Result(True, answered=not self.silent)

    def get_children_async(self, path: str, watch=None) -> Result:
        return Result(self._children(path), answered=not self.silent)

    def get_async(self, path: str, watch=None) -> Result:
        if path not in self.nodes:
            return Result(error=NoNodeError(), answered=not self.silent)
        return Result((self.nodes[path], None), answered=not self.silent)

    def retry(self, function, *args, **kwargs):
        return function(*args, **kwargs)

    def get_children(self, path: str, watch=None) -> list[str]:
        self.released.wait()  # ZooKeeper went away: kazoo waits for it to come back
        return self._children(path)


def nodes(topic: str = "t") -> dict[str, bytes]:
    return {
        f"{TOPICS_PUB}/{topic}/0-m": b'{"numParts": 2}',
        "/meta/brokers/ids/0/master": b"meta://127.0.0.1:8123",
    }


def call_in_thread(call):
    """Run ``call`` in a thread; return ``(finished, result or exception, seconds)``."""
    box: list = []

    def run():
        try:
            box.append(call())
        except Exception as error:
            box.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    return not thread.is_alive(), box[0] if box else None, time.monotonic() - started


@pytest.fixture
def zookeeper():
    client = FakeZooKeeper(nodes())
    yield client
    client.released.set()


def test_publish_returns_with_the_snapshot_while_the_watch_waits_for_zookeeper(zookeeper):
    """Goal: a first publish waits for ZooKeeper no longer than its bounded reads, even when
    ZooKeeper goes away before the watch is set up (kazoo's ChildrenWatch waits unbounded).
    Method: the async reads answer, the blocking ``get_children`` hangs; publish must return
    in time with the topic's partitions."""
    view = ZkClusterView(zookeeper, "/meta", operation_timeout_s=TIMEOUT_S)
    finished, error, _seconds = call_in_thread(lambda: view.publish("t"))
    assert finished and error is None
    assert [str(p) for p in view.snapshot("t").partitions] == ["0-0", "0-1"]


def test_a_silent_zookeeper_fails_publish_in_time_naming_zookeeper(zookeeper):
    zookeeper.silent = True
    view = ZkClusterView(zookeeper, "/meta", operation_timeout_s=TIMEOUT_S, connect="zk1:2181")
    finished, error, seconds = call_in_thread(lambda: view.publish("t"))
    assert finished and seconds < WAIT_S
    assert isinstance(error, ClientError)
    assert "ZooKeeper at zk1:2181 did not answer" in str(error)
    assert "within 0.2 s" in str(error)


def test_a_silent_zookeeper_fails_a_partition_read_in_time_naming_zookeeper(zookeeper):
    zookeeper.silent = True
    view = ZkClusterView(zookeeper, "/meta", operation_timeout_s=TIMEOUT_S, connect="zk1:2181")
    finished, error, seconds = call_in_thread(lambda: view.read_partitions("t"))
    assert finished and seconds < WAIT_S
    assert isinstance(error, ClientError) and "ZooKeeper at zk1:2181" in str(error)


def test_the_watch_set_up_later_still_follows_the_topic(zookeeper):
    """Goal: the watch a worker thread sets up once ZooKeeper answers again keeps the
    snapshot current. Method: publish while the watch waits, add a publisher, release."""
    view = ZkClusterView(zookeeper, "/meta", operation_timeout_s=TIMEOUT_S)
    finished, _error, _seconds = call_in_thread(lambda: view.publish("t"))
    assert finished
    zookeeper.nodes[f"{TOPICS_PUB}/t/1-m"] = b'{"numParts": 1}'
    zookeeper.nodes["/meta/brokers/ids/1/master"] = b"meta://127.0.0.1:8124"
    zookeeper.released.set()
    deadline = time.monotonic() + WAIT_S
    while len(view.snapshot("t").partitions) != 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(view.snapshot("t").brokers) == [0, 1]
