"""A real, throw-away ZooKeeper server for tests, plus helpers that force failures.

``ZooKeeperServer`` runs Debian's ZooKeeper (``/usr/share/java/zookeeper.jar``, whose manifest
``Class-Path`` names every dependency jar) as a standalone server on a free port of 127.0.0.1,
in its own process group, with its data and log in a private directory. Tests reach it through
``connect_string``. ``tools/setup-env.sh`` installs Java and the jars; a missing jar or ``java``
raises ``ZooKeeperUnavailable`` with that hint, because these tests must never skip
(STYLE 23).

The server is tuned for fast failure tests: ``tickTime`` is 200 ms, sessions may be as short as
``SESSION_TIMEOUT_MIN_MS`` and no transaction is fsynced (``forceSync=no``). The admin HTTP
server is off; the ``ruok``/``srvr``/``stat``/``mntr`` four-letter words are enabled.

``expire_session()`` and ``lose_connection()`` break a live ``KazooClient`` the way kazoo's own
test harness does, and return once the client has seen the break and recovered. Every wait in
this module is bounded; a timeout raises ``TimeoutError`` naming what did not happen.

Thread affinity: a ``ZooKeeperServer`` is driven from one thread (the pytest main thread). The
helpers may be called from any thread that owns the client.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient, KazooState

from meta.ports import free_port

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
# slf4j-simple gives the server a logger that writes to stderr (our log file); without it
# slf4j falls back to a silent no-op logger and failures are hard to read.
LOGGER_JAR = JAVA_DIR / "slf4j-simple.jar"
DEBIAN_CONF_DIR = Path("/etc/zookeeper/conf")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
SETUP_HINT = "run tools/setup-env.sh (as root) to install Java and Debian's ZooKeeper jars"

TICK_MS = 200
SESSION_TIMEOUT_MIN_MS = 1000
SESSION_TIMEOUT_MAX_MS = 60000
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
PORT_ATTEMPTS_MAX = 3
LOG_TAIL_BYTES = 4000


class ZooKeeperUnavailable(RuntimeError):
    """Java or Debian's ZooKeeper jars are not installed."""


def java_command() -> list[str]:
    """Return the JVM command line prefix that runs Debian's ZooKeeper server.

    Returns:
        ``[java, flags..., "-cp", classpath, MAIN_CLASS]``; the config path goes last.

    Raises:
        ZooKeeperUnavailable: ``java`` or ``zookeeper.jar`` is missing.
    """
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable(f"`java` is not on PATH; {SETUP_HINT}")
    if not ZOOKEEPER_JAR.is_file():
        raise ZooKeeperUnavailable(f"{ZOOKEEPER_JAR} is missing; {SETUP_HINT}")
    # The same class path Debian's zkEnv.sh / /etc/zookeeper/conf/environment use.
    classpath = [str(DEBIAN_CONF_DIR)] if DEBIAN_CONF_DIR.is_dir() else []
    classpath.append(str(ZOOKEEPER_JAR))
    if LOGGER_JAR.is_file():
        classpath.append(str(LOGGER_JAR))
    # A small heap, serial GC and the C1 compiler start the JVM in about half a second.
    flags = [
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dzookeeper.admin.enableServer=false",
    ]
    return [java, *flags, "-cp", os.pathsep.join(classpath), MAIN_CLASS]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter word and return the reply ("" if none or refused)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            connection.sendall(word.encode("ascii"))
            chunks = []
            while chunk := connection.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


def port_is_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Return True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class ZooKeeperServer:
    """One standalone ZooKeeper process on 127.0.0.1, owned by the test session.

    Args:
        base_dir: directory for ``zoo.cfg``, ``data/`` and ``zookeeper.log``; a fresh temporary
            directory (removed by ``stop(remove_data=True)``) when None.
        port: client port; a free one is picked when None.
    """

    host = "127.0.0.1"

    def __init__(self, base_dir: str | os.PathLike[str] | None = None, port: int | None = None):
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="metaq-zk-"))
        self.data_dir = self.base_dir / "data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self._fixed_port = port
        self.port = port or 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """``host:port`` for ``KazooClient(hosts=...)``; append a chroot path if wanted."""
        assert self.port, "server was never started"
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it serves requests (see ``is_serving``).

        A picked port can be taken by someone else between the pick and the JVM's bind, so a
        failed start on a picked port is retried on a new one.

        Raises:
            ZooKeeperUnavailable: Java or the jars are missing.
            RuntimeError: the server exited during start-up (the message holds its log tail).
            TimeoutError: the server did not answer within ``START_TIMEOUT_S``.
        """
        assert not self.running, "server already running"
        command = java_command()
        attempts = 1 if self._fixed_port else PORT_ATTEMPTS_MAX
        for attempt in range(1, attempts + 1):
            self.port = self._fixed_port or free_port(self.host)
            self._write_config()
            try:
                self._spawn_and_wait(command)
                return
            except RuntimeError:
                if attempt == attempts:
                    raise

    def stop(self, remove_data: bool = False) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after ``STOP_TIMEOUT_S``.

        The process is always reaped. Safe to call when already stopped.

        Args:
            remove_data: also delete the base directory when this object created it.
        """
        process, self._process = self._process, None
        if process is not None:
            terminate_group(process, STOP_TIMEOUT_S)
        if remove_data and self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start again on the same port with the same data (sessions survive if the
        outage is shorter than their timeout)."""
        self.stop()
        self._fixed_port = self.port
        self.start()

    def is_serving(self) -> bool:
        """True when the server answers ``ruok`` and serves requests.

        ``ruok`` alone is not enough: the server answers ``imok`` while it is still loading its
        database, and ``srvr`` then says "not currently serving requests".
        """
        return self.four_letter_word("ruok") == "imok" and "Mode:" in self.four_letter_word("srvr")

    def four_letter_word(self, word: str) -> str:
        """Send a four-letter word (``ruok``, ``srvr``, ``stat``, ``mntr``) to this server."""
        return four_letter_word(self.host, self.port, word)

    def log_tail(self) -> str:
        """Return the end of the server log, for failure messages."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={SESSION_TIMEOUT_MIN_MS}",
            f"maxSessionTimeout={SESSION_TIMEOUT_MAX_MS}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            # Test data is thrown away: skip fsync and the 64 MiB log preallocation.
            "forceSync=no",
            "preAllocSize=1024",
        ]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _spawn_and_wait(self, command: list[str]) -> None:
        with open(self.log_path, "ab") as log:
            # A process group of its own: stop() signals the whole JVM and nothing else, and a
            # Ctrl-C in the test terminal does not race our own shutdown of the server.
            self._process = subprocess.Popen(
                [*command, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise RuntimeError(
                    f"ZooKeeper exited with {code} during start-up on port {self.port}; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.is_serving():
                return
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(
            f"ZooKeeper did not serve requests on {self.connect_string} within "
            f"{START_TIMEOUT_S:.0f} s; log {self.log_path}:\n{self.log_tail()}"
        )


def terminate_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM the process group of ``process``, SIGKILL it after ``timeout_s``, and reap it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()


class _StateWatch:
    """Records a client's state changes and signals once ``broken`` then CONNECTED were seen."""

    def __init__(self, broken: str):
        self.broken_state = broken
        self.broken = threading.Event()
        self.recovered = threading.Event()

    def __call__(self, state: str) -> bool:
        # Runs on kazoo's event thread: only set flags, never call ZooKeeper from here.
        if state == self.broken_state:
            self.broken.set()
        elif self.broken.is_set() and state == KazooState.CONNECTED:
            self.recovered.set()
            return True  # Tells kazoo to remove this listener.
        return False


def expire_session(client: KazooClient, timeout_s: float = 15.0) -> None:
    """Make the server expire ``client``'s session, then wait for a new session.

    Method (the classic ZooKeeper/kazoo trick): a second client attaches to the same session id
    and password and closes it. That is a real server-side expiry: ephemeral nodes of the
    session are deleted and ``client`` sees ``KazooState.LOST``, then kazoo opens a new session
    and reports CONNECTED. If the first client steals the session back before the second one
    closes it, the trick is repeated until ``timeout_s``.

    Args:
        client: a started, connected client.
        timeout_s: bound on the whole operation.

    Raises:
        TimeoutError: LOST then CONNECTED were not both seen in time.
    """
    assert client.connected, "client must be connected"
    watch = _StateWatch(KazooState.LOST)
    client.add_listener(watch)
    deadline = time.monotonic() + timeout_s
    try:
        while not watch.broken.is_set() and time.monotonic() < deadline:
            session_id, password = client.client_id
            _close_session(client.hosts, session_id, password, deadline)
            watch.broken.wait(min(2.0, max(0.0, deadline - time.monotonic())))
        if not watch.broken.is_set():
            raise TimeoutError(f"session was not observed LOST within {timeout_s} s")
        if not watch.recovered.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"client did not reconnect after expiry within {timeout_s} s")
    finally:
        client.remove_listener(watch)


def _close_session(hosts, session_id: int, password: bytes, deadline: float) -> None:
    # `hosts` is kazoo's parsed host list: [(host, port), ...]; chroot does not matter here.
    connect_string = ",".join(f"{host}:{port}" for host, port in hosts)
    intruder = KazooClient(hosts=connect_string, client_id=(session_id, password))
    try:
        intruder.start(timeout=max(0.5, deadline - time.monotonic()))
        intruder.stop()
    finally:
        intruder.close()


def lose_connection(client: KazooClient, timeout_s: float = 15.0) -> None:
    """Drop ``client``'s TCP connection (its session survives), then wait for reconnection.

    Method: kazoo's harness way, a ``_CONNECTION_DROP`` request that makes the connection
    thread fail the socket as if the network had broken. ``client`` sees SUSPENDED, then
    CONNECTED again on the same session. For a server-side outage use
    ``ZooKeeperServer.stop()`` / ``start()`` or ``restart()`` instead.

    Args:
        client: a started, connected client.
        timeout_s: bound on the whole operation.

    Raises:
        TimeoutError: SUSPENDED then CONNECTED were not both seen in time.
    """
    from kazoo.protocol.connection import _CONNECTION_DROP

    assert client.connected, "client must be connected"
    watch = _StateWatch(KazooState.SUSPENDED)
    client.add_listener(watch)
    deadline = time.monotonic() + timeout_s
    try:
        client._call(_CONNECTION_DROP, None)
        if not watch.broken.wait(timeout_s):
            raise TimeoutError(f"connection was not observed SUSPENDED within {timeout_s} s")
        if not watch.recovered.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"client did not reconnect within {timeout_s} s")
    finally:
        client.remove_listener(watch)
