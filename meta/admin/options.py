"""Shared command-line options and argument types of ``meta-admin``.

Two families of options, each built twice by ``*_options(with_defaults)``: with defaults on the
top-level parser (``meta-admin --zk-connect ... lag G``) and without (``argparse.SUPPRESS``) on
every leaf command, so a value given after the command overrides one given before it only when
it is given.

* broker options (the ``tx`` group): ``--broker HOST:PORT``, ``--timeout SECONDS``;
* cluster options (every command that reads ZooKeeper): ``--zk-connect HOST:PORT[,...]``,
  ``--zk-root PATH``, ``--timeout SECONDS``, and ``--json``.

Commands that change ZooKeeper (``reset-offsets``, ``groups delete``) are dry runs unless
``--execute`` is given (``add_execute_options``), as Kafka's ``kafka-consumer-groups`` is.

Pure argparse; no I/O. Single-threaded.
"""

from __future__ import annotations

import argparse

from meta.admin.client import DEFAULT_BROKER, DEFAULT_TIMEOUT_S, UsageError, parse_broker_address

DEFAULT_ZK_CONNECT = "127.0.0.1:2181"
DEFAULT_ZK_ROOT = "/meta"


def broker_argument(text: str) -> tuple[str, int]:
    """argparse type of ``--broker``."""
    try:
        return parse_broker_address(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def timeout_argument(text: str) -> float:
    """argparse type of ``--timeout``: positive seconds."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r}: expected positive seconds")
    return value


def zk_connect_argument(text: str) -> str:
    """argparse type of ``--zk-connect``: ``HOST:PORT`` entries separated by commas, with an
    optional chroot after the last one (kazoo's own syntax)."""
    hosts = text.split("/", 1)[0]
    for entry in hosts.split(","):
        try:
            parse_broker_address(entry)
        except UsageError:
            raise argparse.ArgumentTypeError(
                f"invalid ZooKeeper address {text!r}: expected HOST:PORT[,HOST:PORT...], "
                f"e.g. {DEFAULT_ZK_CONNECT}"
            ) from None
    return text


def zk_root_argument(text: str) -> str:
    """argparse type of ``--zk-root``: normalised as Java does (leading ``/``, no trailing one)."""
    if not text or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError(f"invalid ZooKeeper root {text!r}")
    root = text if text.startswith("/") else "/" + text
    if root.endswith("/") and len(root) > 1:
        root = root[:-1]
    return root


def positive_int(text: str) -> int:
    """argparse type of counts and byte bounds."""
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive integer")
    return int(text)


def offset_argument(text: str) -> int:
    """argparse type of byte offsets: a non-negative integer."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"invalid offset {text!r}: expected bytes, e.g. 0")
    return int(text)


def _timeout_option(options: argparse.ArgumentParser, with_defaults: bool) -> None:
    options.add_argument(
        "--timeout",
        type=timeout_argument,
        default=DEFAULT_TIMEOUT_S if with_defaults else argparse.SUPPRESS,
        metavar="SECONDS",
        help=f"bound on connecting and on each reply (default {DEFAULT_TIMEOUT_S:g})",
    )


def broker_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--broker`` and ``--timeout``."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--broker",
        type=broker_argument,
        default=DEFAULT_BROKER if with_defaults else argparse.SUPPRESS,
        metavar="HOST:PORT",
        help=f"broker to talk to, for the tx commands (default {DEFAULT_BROKER})",
    )
    _timeout_option(options, with_defaults)
    return options


def zookeeper_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--zk-connect`` and ``--zk-root`` (no ``--timeout``: see ``cluster_options``)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--zk-connect",
        type=zk_connect_argument,
        default=DEFAULT_ZK_CONNECT if with_defaults else argparse.SUPPRESS,
        metavar="HOST:PORT[,...]",
        help=f"ZooKeeper servers of the cluster (default {DEFAULT_ZK_CONNECT})",
    )
    options.add_argument(
        "--zk-root",
        type=zk_root_argument,
        default=DEFAULT_ZK_ROOT if with_defaults else argparse.SUPPRESS,
        metavar="PATH",
        help=f"the cluster's zk.zkRoot (default {DEFAULT_ZK_ROOT})",
    )
    return options


def cluster_options(json_default: object = False) -> argparse.ArgumentParser:
    """The options of every cluster command: ZooKeeper, ``--timeout`` and ``--json``.

    Args:
        json_default: the default of ``--json``; ``argparse.SUPPRESS`` on a subcommand
            keeps a ``--json`` given before it.
    """
    options = argparse.ArgumentParser(add_help=False, parents=[zookeeper_options(False)])
    _timeout_option(options, with_defaults=False)
    options.add_argument(
        "--json",
        action="store_true",
        default=json_default,
        help="print JSON (stable keys) instead of a table",
    )
    return options


def add_execute_options(parser: argparse.ArgumentParser, execute_help: str, dry_help: str) -> None:
    """``--execute`` (sets ``execute``) and ``--dry-run`` (the default, still accepted), which
    exclude each other."""
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--execute", action="store_true", default=False, help=execute_help)
    choice.add_argument(
        "--dry-run",
        dest="execute",
        action="store_false",
        default=False,
        help=f"{dry_help} (the default without --execute)",
    )
