"""Entry point of the broker: ``meta-server -f server.ini`` / ``python -m meta.server``.

``--slave async_slave.properties`` (or Java's ``-Fmetaslave=async_slave.properties``) starts
an async slave: the broker registers as ``ids/B/slave<N>``, refuses puts with
403, and a ``meta.slave.replicator.Replicator`` copies the master once the broker serves;
at a stop, replication stops first (its batches in progress are appended), then the broker.

``--http [jettyBroker.properties]`` (or Java's ``-FjettyBroker=FILE``) serves the HTTP
protocol (``meta.server.http``) once the broker serves; a port it cannot take stops the
broker with status 1.

Parses arguments, loads the config (a ``ConfigError`` exits with status 2 and a message that
names the file, section and key), sets up logging (stderr, or a file rotated by size or
reopened for logrotate, as text or JSON lines: ``meta.server.log_output``), raises the
open-file limit (``meta.server.descriptor_limit``), starts the dashboard
(``meta.dashboard``; a port it cannot take exits with status 1) and the ``Broker`` on the
global reactor and installs signal handlers: SIGTERM and SIGINT stop gracefully (flush,
deregister, close); SIGHUP reloads the config file (``tools/metaServer.sh reload`` sends it).

Reload (``ConfigReloader``): the file is re-read in a thread with the same ``--local``
overrides and handed to ``Broker.reload`` (what takes effect is described there). A file that
does not load (syntax, unknown key, bad value) changes nothing: the broker keeps serving on
its running config and logs ``config reload failed, keeping the running configuration:`` and
the ``ConfigError`` text, which names file, section and key. Unlike Java, the file is re-read
even when its mtime did not change, and a broken file is read again by the next reload.

Runs on the main thread, which becomes the reactor thread. Signal handlers only schedule work
on the reactor (``callFromThread``); ``ConfigReloader`` is reactor thread only.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from meta import __version__
from meta.compiled import log_build
from meta.errors import ConfigError
from meta.server.log_output import LogOutput
from meta.server.sync_roles import become_gregor, gregor_started, offsets_recovered

if TYPE_CHECKING:
    from meta.server.broker import Broker

log = logging.getLogger("meta.server")

PLUGIN_OPTIONS = {"metaslave": "slave", "jettyBroker": "http", "samsa": "samsa", "gregor": "gregor"}
"""Java's ``-F<plugin>=FILE`` names -> the option they stand for."""

LOCAL_OVERRIDES = {"system.hostName": "127.0.0.1", "zookeeper.zk.zkConnect": "127.0.0.1:2181"}


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="meta-server",
        description="Start a Metamorphosis-compatible broker (metaq-py).",
    )
    parser.add_argument("-f", "--config", required=True, help="path of server.ini")
    parser.add_argument(
        "-s",
        "--slave",
        metavar="FILE",
        help="run as an async slave configured by FILE (async_slave.properties): copy the "
        "master with the same brokerId, serve gets, answer puts with 403",
    )
    parser.add_argument(
        "--http",
        nargs="?",
        const="",
        metavar="FILE",
        help="serve the HTTP protocol (/put, /get, /offset) on serverPort of FILE "
        "(jettyBroker.properties; without FILE: port 8080)",
    )
    parser.add_argument(
        "--samsa",
        metavar="FILE",
        help="run as a synchronous-replication master configured by FILE "
        "(samsa_master.properties): a put is answered 200 only once its gregor slave has it too",
    )
    parser.add_argument(
        "--gregor",
        metavar="FILE",
        help="run as a synchronous-replication slave configured by FILE "
        "(gregor_slave.properties): take sync only from the master it names, answer puts "
        "with 403",
    )
    parser.add_argument(
        "-F",
        dest="plugins",
        action="append",
        default=[],
        metavar="PLUGIN=FILE",
        help="Java's plugin form: -Fmetaslave=FILE is --slave FILE, -FjettyBroker=FILE is "
        "--http FILE, -Fsamsa=FILE is --samsa FILE, -Fgregor=FILE is --gregor FILE",
    )
    parser.add_argument(
        "-l",
        "--local",
        action="store_true",
        help="listen on 127.0.0.1 and use the ZooKeeper at 127.0.0.1:2181 "
        "(what metaServer.sh start local does)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO)",
    )
    _add_log_arguments(parser)
    parser.add_argument("--version", action="version", version=f"metaq-py {__version__}")
    arguments = parser.parse_args(argv)
    problem = log_output(arguments).problem()
    if problem is not None:
        parser.error(problem)
    _apply_plugins(parser, arguments)
    problem = _role_conflict(arguments)
    if problem is not None:
        parser.error(problem)
    return arguments


def _apply_plugins(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> None:
    """Turn Java's ``-F<plugin>=FILE`` forms into the options they stand for."""
    for plugin in arguments.plugins:
        name, _, path = plugin.partition("=")
        option = PLUGIN_OPTIONS.get(name)
        if option is None or not path:
            parser.error(
                f"-F{plugin}: the plugins are metaslave, jettyBroker, samsa and gregor, as "
                "-Fmetaslave=FILE, -FjettyBroker=FILE, -Fsamsa=FILE and -Fgregor=FILE"
            )
        given = getattr(arguments, option)
        if given and given != path:
            parser.error(f"-F{plugin} and --{option} {given} name different files")
        setattr(arguments, option, path)


def _role_conflict(arguments: argparse.Namespace) -> str | None:
    """Why the HA roles asked for cannot be combined (Java drops some silently), or None."""
    roles = [
        f"--{name} ({role})"
        for name, role in (
            ("slave", "async slave"),
            ("samsa", "synchronous master"),
            ("gregor", "synchronous slave"),
        )
        if getattr(arguments, name)
    ]
    if len(roles) <= 1:
        return None
    return (
        f"{' and '.join(roles)} cannot be combined: a broker is a plain master, an async "
        "slave, a samsa master or a gregor slave"
    )


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-file", metavar="PATH", help="append the log to PATH instead of stderr"
    )
    parser.add_argument(
        "--log-max-bytes",
        type=int,
        default=0,
        metavar="N",
        help="rotate --log-file past N bytes to PATH.1, PATH.2... (default 0: never)",
    )
    parser.add_argument(
        "--log-backups",
        type=int,
        default=5,
        metavar="K",
        help="rotated files kept with --log-max-bytes (default 5)",
    )
    parser.add_argument(
        "--log-reopen",
        action="store_true",
        help="reopen --log-file when it was moved or removed (for logrotate without copytruncate)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text lines (default) or one JSON object per line",
    )


def log_output(arguments: argparse.Namespace) -> LogOutput:
    """The log destination and format that ``arguments`` ask for."""
    return LogOutput(
        path=arguments.log_file,
        max_bytes=arguments.log_max_bytes,
        backups=arguments.log_backups,
        reopen=arguments.log_reopen,
        json=arguments.log_format == "json",
    )


def configure_logging(level: str, output: LogOutput | None = None) -> None:
    # Messages may quote bytes from peers: no raw control character reaches the log.
    handler = (output or LogOutput()).handler()
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)
    # Twisted's own events (unhandled errors in Deferreds, protocol exceptions) go to the
    # same log, with timestamps and levels, instead of Twisted's bare stderr fallback; its
    # INFO chatter ("Starting factory ...") is left out.
    logging.getLogger("twisted").setLevel(logging.WARNING)
    from twisted.logger import STDLibLogObserver, globalLogBeginner

    globalLogBeginner.beginLoggingTo([STDLibLogObserver()], redirectStandardIO=False)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    configure_logging(arguments.log_level, log_output(arguments))
    overrides = LOCAL_OVERRIDES if arguments.local else None
    try:
        config, slave, http, samsa, gregor = _load_configuration(arguments, overrides)
    except ConfigError as error:
        print(f"meta-server: configuration error: {error}", file=sys.stderr)
        return 2
    if samsa is not None and samsa.recover_offset and not offsets_recovered(config):
        return 1
    from meta.server.descriptor_limit import raise_descriptor_limit

    raise_descriptor_limit(config, http=http is not None)
    from meta.server.reactor import install

    log.info("reactor: %s", install())
    log_build(log)
    from twisted.internet import reactor

    from meta.server.broker import Broker

    broker = Broker(config, reactor, slave_id=-1 if slave is None else slave.slave_id)
    is_gregor = gregor is not None
    if is_gregor and not become_gregor(broker, reactor, gregor):
        return 1
    if not _dashboard_started(broker, reactor, overrides, is_gregor):
        return 1
    replicator = _replication_roles(broker, reactor, slave, samsa)
    outcome = {"status": 0}
    listeners: list[Any] = []  # the HTTP protocol's port, closed first at a stop
    reloader = ConfigReloader(
        broker, partial(_load_in_thread, overrides=overrides, gregor=is_gregor)
    )

    def started(_: object) -> None:
        if http is not None:
            from meta.server.http.resource import start_http

            # A port that cannot be taken fails here, and started_failed stops the broker.
            listeners.append(start_http(broker, reactor, http.server_port))
        if replicator is not None:
            replicator.start()
        if is_gregor:
            gregor_started(broker)
        if samsa is not None:
            broker.sync.start()

    def started_failed(failure) -> None:
        log.error("broker failed to start: %s", failure.value)
        outcome["status"] = 1
        broker.stop().addBoth(lambda _: reactor.stop())

    def request_stop(signum: int, frame: object) -> None:
        log.info("signal %d received", signum)
        reactor.callFromThread(_stop_then_exit, broker, reactor, replicator, listeners)

    def request_reload(signum: int, frame: object) -> None:
        reactor.callFromThread(reloader.request)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGHUP, request_reload)
    reactor.callWhenRunning(lambda: broker.start().addCallback(started).addErrback(started_failed))
    reactor.run(installSignalHandlers=False)
    _collect_before_exit()
    return outcome["status"]


def _collect_before_exit() -> None:
    """Collect once while the log is open (it reports an unhandled error in a Deferred), then
    freeze every object: with its files closed, the broker leaves nothing to Python's exit,
    whose collections would walk them all again and again (a few hundred ms per stop)."""
    gc.collect()
    gc.freeze()


def _dashboard_started(
    broker: Any, reactor: Any, overrides: dict[str, str] | None, gregor: bool
) -> bool:
    """Start the dashboard (before the broker: /readyz answers 503 until the broker serves);
    False (logged) when it cannot start."""
    from meta.dashboard.server import DashboardError, start_dashboard

    try:
        start_dashboard(broker, reactor, lambda: _reload(broker, overrides, gregor))
    except DashboardError as error:
        log.error("broker failed to start: %s", error)
        return False
    return True


class ConfigReloader:
    """Serves reload requests: re-reads the config file and hands it to ``Broker.reload``.

    One reload runs at a time. Requests that arrive meanwhile are folded into one more
    reload after it, which reads the file again: every request is followed by a reload that
    read the file after the request came. Reactor thread only.

    Args:
        broker: the running ``Broker``.
        load: called with the running config; returns a Deferred that fires with the file
            re-read (``load_config(..., topic_defaults=running)``) or fails with
            ``ConfigError``.
    """

    def __init__(self, broker: Broker, load: Callable[[Any], Any]) -> None:
        self._broker = broker
        self._load = load
        self._running = False
        self._again = False

    @property
    def running(self) -> bool:
        """Whether a reload is under way."""
        return self._running

    def request(self) -> None:
        """Reload now, or right after the reload that is under way."""
        if self._running:
            self._again = True
            return
        self._running = True
        self._reload()

    def _reload(self) -> None:
        from twisted.internet import defer

        self._again = False
        log.info("config reload requested: reading %s", self._broker.config.path)
        reloaded = defer.maybeDeferred(self._load, self._broker.config)
        reloaded.addCallback(self._broker.reload)
        reloaded.addErrback(self._failed)
        reloaded.addBoth(self._done)

    def _failed(self, failure: Any) -> None:
        from meta.server.reload import RELOAD_FAILED, ReloadRefused

        if failure.check(ConfigError, ReloadRefused):
            reason = failure.getErrorMessage()
        else:
            reason = failure.getTraceback()
        log.error("%s, keeping the running configuration: %s", RELOAD_FAILED, reason)

    def _done(self, _: object) -> None:
        if self._again:
            self._reload()
        else:
            self._running = False


def _reload(broker: Any, overrides: dict[str, str] | None, gregor: bool = False) -> Any:
    """Re-read the config file and apply it; a Deferred of the ``ReloadOutcome``."""
    return _load_in_thread(broker.config, overrides, gregor).addCallback(broker.reload)


def _load_in_thread(running: Any, overrides: dict[str, str] | None, gregor: bool = False) -> Any:
    """Re-read ``running.path`` on the reactor's thread pool (it is blocking file I/O); a
    gregor slave keeps its status-test topic."""
    from twisted.internet import threads

    from meta.config import load_config

    loaded = threads.deferToThread(load_config, running.path, overrides, running)
    if gregor:
        from meta.sync.gregor import with_status_topic

        loaded.addCallback(with_status_topic)
    return loaded


def _load_configuration(
    arguments: argparse.Namespace, overrides: dict[str, str] | None
) -> tuple[Any, Any, Any, Any, Any]:
    """The broker's config and its roles' (async slave, HTTP, samsa, gregor; None when not
    asked for). A gregor slave's config has the status-test topic and no ZooKeeper.

    Raises:
        ConfigError: a file, a key or its value is wrong, or the set-up cannot work.
    """
    from meta.config import load_config

    config = load_config(arguments.config, overrides)
    slave = _load_slave(config, arguments.slave)
    http = _load_http(arguments.http)
    samsa, gregor = _load_sync_replication(arguments.samsa, arguments.gregor)
    if gregor is not None:
        from meta.sync.gregor import with_status_topic, without_zookeeper

        config = without_zookeeper(with_status_topic(config))
    return config, slave, http, samsa, gregor


def _load_slave(config: Any, path: str | None) -> Any:
    """Read and check ``async_slave.properties`` (None when not a slave).

    Raises:
        ConfigError: the file, a key or its value is wrong, or the set-up cannot work.
    """
    if path is None:
        return None
    from meta.config import load_slave_config
    from meta.slave.plan import check_slave_setup

    slave = load_slave_config(path)
    check_slave_setup(config, slave, path)
    return slave


def _load_http(path: str | None) -> Any:
    """Read ``jettyBroker.properties`` (None: no HTTP protocol; "": the defaults).

    Raises:
        ConfigError: the file, a key or its value is wrong.
    """
    if path is None:
        return None
    from meta.config import HttpConfig, load_http_config

    return load_http_config(path) if path else HttpConfig()


def _load_sync_replication(samsa: str | None, gregor: str | None) -> tuple[Any, Any]:
    """Read ``samsa_master.properties`` and ``gregor_slave.properties`` (None when not given).

    Raises:
        ConfigError: the file, a key or its value is wrong.
    """
    from meta.config import load_gregor_config, load_samsa_config

    return (
        None if samsa is None else load_samsa_config(samsa),
        None if gregor is None else load_gregor_config(gregor),
    )


def _replication_roles(broker: Broker, reactor: Any, slave: Any, samsa: Any) -> Any:
    """Give ``broker`` its replication role; return an async slave's replicator (or None).

    An async slave gets a ``Replicator`` (``broker.replication``, ``stats slave``); a samsa
    master a ``SamsaMaster`` (``broker.sync``: every put is replicated, ``stats sync``).
    """
    replicator = None
    if slave is not None:
        from meta.slave.replicator import Replicator

        replicator = Replicator(broker, slave, reactor)
        broker.replication = replicator
    if samsa is not None:
        from meta.server.protocol import send_now
        from meta.sync.samsa import SamsaMaster

        broker.sync = SamsaMaster(broker, samsa, reactor, send_now)
    return replicator


def _stop_then_exit(
    broker: Broker, reactor: Any, replicator: Any = None, listeners: Iterable[Any] = ()
) -> None:
    for listening in listeners:
        listening.stopListening()  # no new HTTP requests while the broker stops

    def done(result) -> None:
        if reactor.running:
            reactor.stop()
        return result

    from twisted.python.failure import Failure

    def replication_stopped(result) -> Any:
        if isinstance(result, Failure):
            log.error("stopping replication failed: %s", result.getErrorMessage())
        return broker.stop()

    if replicator is None:
        broker.stop().addBoth(done)
    else:
        replicator.stop().addBoth(replication_stopped).addBoth(done)


if __name__ == "__main__":
    sys.exit(main())
