"""Entry point of the broker: ``meta-server -f server.ini`` / ``python -m meta.server``.

Parses arguments, loads the config (a ``ConfigError`` exits with status 2 and a message that
names the file, section and key), sets up logging to stderr, starts the ``Broker`` on the
global reactor and installs signal handlers: SIGTERM and SIGINT stop gracefully (flush,
deregister, close); SIGHUP is logged and ignored until config reload exists.

Runs on the main thread, which becomes the reactor thread.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from meta import __version__
from meta.errors import ConfigError

LOCAL_OVERRIDES = {"system.hostName": "127.0.0.1", "zookeeper.zk.zkConnect": "127.0.0.1:2181"}


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="meta-server",
        description="Start a Metamorphosis-compatible broker (metaq-py).",
    )
    parser.add_argument("-f", "--config", required=True, help="path of server.ini")
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
    parser.add_argument("--version", action="version", version=f"metaq-py {__version__}")
    return parser.parse_args(argv)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo.client").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    configure_logging(arguments.log_level)
    from meta.config import load_config

    try:
        config = load_config(arguments.config, LOCAL_OVERRIDES if arguments.local else None)
    except ConfigError as error:
        print(f"meta-server: configuration error: {error}", file=sys.stderr)
        return 2
    from twisted.internet import reactor

    from meta.server.broker import Broker

    broker = Broker(config, reactor)
    outcome = {"status": 0}

    def started_failed(failure) -> None:
        logging.getLogger("meta.server").error("broker failed to start: %s", failure.value)
        outcome["status"] = 1
        broker.stop().addBoth(lambda _: reactor.stop())

    def request_stop(signum: int, frame: object) -> None:
        logging.getLogger("meta.server").info("signal %d received", signum)
        reactor.callFromThread(_stop_then_exit, broker, reactor)

    def ignore_hup(signum: int, frame: object) -> None:
        log = logging.getLogger("meta.server")
        log.warning("SIGHUP ignored: config reload is not supported yet")

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGHUP, ignore_hup)
    reactor.callWhenRunning(lambda: broker.start().addErrback(started_failed))
    reactor.run(installSignalHandlers=False)
    return outcome["status"]


def _stop_then_exit(broker, reactor) -> None:
    def done(result) -> None:
        if reactor.running:
            reactor.stop()
        return result

    broker.stop().addBoth(done)


if __name__ == "__main__":
    sys.exit(main())
