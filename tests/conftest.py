"""Shared pytest fixtures.

ZooKeeper fixtures start a real server (``tests/integration/zookeeper.py``) lazily: only a test
that asks for ``zookeeper``, ``zk_root`` or ``kazoo_client`` pays for it, once per session.
They never skip: if Java or the ZooKeeper jars are missing the test fails and says to run
``tools/setup-env.sh`` (STYLE 23).

Tests under ``tests/integration/`` are marked ``integration`` automatically.

Tests in the directories of ``GUARDED_DIRECTORIES`` run under the descriptor guard
(``tests.descriptors``): a test that leaves a descriptor open fails, naming its target.

``tools/test`` runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile``: each
module on one worker, so its module fixtures start once). The test modules that mention
``tools/metaServer.sh`` hold one lock across the workers while they run
(``script_modules_one_at_a_time``): the script's ``stop`` looks for the other brokers it
started from this checkout, which a test on the other worker would otherwise be.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).parent
INTEGRATION_DIR = TESTS_DIR / "integration"
GUARDED_DIRECTORIES = tuple(
    TESTS_DIR / name
    for name in (
        "admin",
        "bench",
        "client",
        "config",
        "dashboard",
        "protocol",
        "server",
        "slave",
        "status",
        "store",
        "sync",
        "tx",
    )
)
"""The directories whose tests run in this process and close what they open."""
UNGUARDED_DIRECTORIES = (INTEGRATION_DIR, TESTS_DIR / "spark")
"""The directories whose tests the guard leaves alone: ``integration`` (its tests drive
brokers, ZooKeeper and clients in other processes; what this process holds of them is their
pipes and logs, some owned by session fixtures) and ``spark`` (the JVM's gateway and its
workers live for the whole session)."""
ZK_CLIENT_TIMEOUT_S = 10.0


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test a compiled build of other sources than the checkout's
    (``meta.compiled.stale_modules``): Python imports the extensions before the edited ``.py``
    files, so the tests would pass or fail on code that is not in the checkout."""
    from meta.compiled import stale_message, stale_modules

    stale = stale_modules()
    if stale:
        pytest.exit(stale_message(stale), returncode=4)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module", autouse=True)
def script_modules_one_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist, a module that mentions ``metaServer.sh`` runs while holding an
    exclusive lock that every worker's such modules take, so no two run at once."""
    path = Path(request.node.path)
    if not os.environ.get("PYTEST_XDIST_WORKER") or "metaServer.sh" not in path.read_text(
        encoding="utf-8"
    ):
        yield
        return
    # The workers' base temporary directories share this parent.
    lock_path = tmp_path_factory.getbasetemp().parent / "metaserver-script.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def descriptors_closed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test of ``GUARDED_DIRECTORIES`` that leaves a descriptor open
    (``tests.descriptors``)."""
    if not any(directory in Path(request.node.path).parents for directory in GUARDED_DIRECTORIES):
        yield
        return
    from tests.descriptors import guard_descriptors

    yield from guard_descriptors()


OTHER_BUILD_TEST = "tests/test_compiled.py::test_the_other_build_passes_the_tests_that_pin"


@pytest.fixture(scope="session", autouse=True)
def other_build(request: pytest.FixtureRequest) -> Iterator[object]:
    """The other build of the hot path (``tests.compiled_build.ScratchBuild``), started with
    the session when its test is to run, so that its compiling overlaps the other tests.

    None under pytest-xdist, where every worker collects every test: there the test makes the
    build itself, and the other worker's tests overlap it."""
    wanted = any(item.nodeid.startswith(OTHER_BUILD_TEST) for item in request.session.items)
    if not wanted or os.environ.get("PYTEST_XDIST_WORKER"):
        yield None
        return
    from tests.compiled_build import ScratchBuild

    build = ScratchBuild()
    try:
        yield build
    finally:
        build.close()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real standalone ZooKeeper on a free 127.0.0.1 port, shared by the whole session.

    Yields a ``tests.integration.zookeeper.ZooKeeperServer``; use ``.connect_string``. Tests
    must leave it running (use ``restart()`` for an outage, or start their own server).
    """
    from tests.integration.zookeeper import ZooKeeperServer, ZooKeeperUnavailable

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    unavailable = None
    try:
        server.start()
    except ZooKeeperUnavailable as error:
        unavailable = str(error)
    if unavailable:
        # Outside the except block, so the report is the hint alone, without a chained trace.
        pytest.fail(unavailable, pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _admin_client(zookeeper):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string, timeout=ZK_CLIENT_TIMEOUT_S)
    client.start(timeout=ZK_CLIENT_TIMEOUT_S)
    return client


@pytest.fixture
def zk_root(zookeeper) -> Iterator[str]:
    """A fresh, empty ZooKeeper path such as ``/t-3f2a...``, deleted (recursively) afterwards.

    Use it as a chroot (``zookeeper.connect_string + zk_root``) or as ``zk.zkRoot`` so tests
    never see each other's nodes.
    """
    path = f"/t-{uuid.uuid4().hex}"
    admin = _admin_client(zookeeper)
    try:
        admin.create(path)
    finally:
        admin.stop()
        admin.close()
    yield path
    from kazoo.exceptions import NoNodeError

    admin = _admin_client(zookeeper)
    try:
        admin.delete(path, recursive=True)
    except NoNodeError:
        pass  # The test removed it itself.
    finally:
        admin.stop()
        admin.close()


@pytest.fixture
def kazoo_client(zookeeper, zk_root: str) -> Iterator[object]:
    """A started ``KazooClient`` chrooted at ``zk_root``; stopped and closed afterwards."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string + zk_root, timeout=ZK_CLIENT_TIMEOUT_S)
    client.start(timeout=ZK_CLIENT_TIMEOUT_S)
    try:
        yield client
    finally:
        client.stop()
        client.close()
