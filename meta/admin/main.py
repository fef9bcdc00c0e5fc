"""Entry point of the operator tool: ``meta-admin <command> ...``, ``python -m meta.admin``.

Argument parsing with one argparse subparser per command (``COMMAND_GROUPS``: each module
offers ``add_parser(commands, connection)`` and sets ``run(arguments, session)`` on its
leaves), so a later group is one more module and one more entry. Every command has ``--help``.

Two kinds of leaves:

* the ``tx`` group talks to one broker: ``--broker HOST:PORT`` and ``--timeout SECONDS``
  (accepted before the group or after the command); ``run`` gets an ``AdminClient``;
* the cluster commands (``brokers``, ``topics``, ``partitions``, ``groups``, ``lag``,
  ``reset-offsets``, ``browse``, ``find-message``, ``stats``, ``slaves``, ``produce``,
  ``consume``, ``spark-writes``, ``recover-offsets``, ``replication``) find brokers through
  ZooKeeper:
  ``--zk-connect HOST:PORT[,...]``, ``--zk-root PATH`` and ``--timeout`` (also accepted before
  the command) and ``--json``; they set ``open_session`` and ``run`` gets a
  ``meta.admin.session.ClusterSession``.

``main(argv)`` returns the exit status instead of exiting: 0 done, 1 refused or not found, 2
bad usage or a broker or ZooKeeper could not be reached (``meta.admin.client``). Errors go to
stderr as one line naming what is wrong; results go to stdout; progress bars go to stderr,
only on a terminal. A reader of stdout that goes away (``meta-admin consume TOPIC | head``)
ends the command quietly with 0, as Unix filters do. Single-threaded; no reactor.
"""

from __future__ import annotations

import argparse
import os
import sys

from meta import __version__
from meta.admin import (
    cluster,
    consume,
    groups,
    messages,
    migrate,
    produce,
    recover,
    replication,
    slaves,
    spark_writes,
    truncate,
    tx,
    verify,
)
from meta.admin.client import EXIT_OK, EXIT_STATUS_RULE, EXIT_USAGE, AdminClient, AdminError
from meta.admin.options import (
    broker_argument,
    broker_options,
    timeout_argument,
    zookeeper_options,
)

COMMAND_GROUPS = (
    tx,
    cluster,
    groups,
    messages,
    slaves,
    produce,
    consume,
    migrate,
    recover,
    replication,
    spark_writes,
    truncate,
    verify,
)
"""Modules registering commands; add new groups here."""


__all__ = ["broker_argument", "build_parser", "connection_options", "main", "timeout_argument"]


def connection_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--broker`` and ``--timeout`` (see ``meta.admin.options.broker_options``)."""
    return broker_options(with_defaults)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meta-admin",
        parents=[broker_options(with_defaults=True), zookeeper_options(with_defaults=True)],
        description="Operator tool of a metaq-py (MetaQ 1.x) cluster: what is in the cluster, "
        "how far behind consumer groups are, what partitions hold; move a stopped group's "
        "offsets, find a message, finish XA transactions.",
        epilog=EXIT_STATUS_RULE,
    )
    parser.add_argument("--version", action="version", version=f"metaq-py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    leaf_options = broker_options(with_defaults=False)
    for group in COMMAND_GROUPS:
        group.add_parser(commands, leaf_options)
    _end_help_with_exit_rule(parser)
    return parser


def _end_help_with_exit_rule(parser: argparse.ArgumentParser) -> None:
    """End every command's ``--help`` with ``EXIT_STATUS_RULE`` (after its own epilog).

    argparse has no public way to list a parser's subcommands; ``_actions`` and
    ``_SubParsersAction`` have been stable since Python 3.2, and a change shows at once in
    tests/admin/test_admin_help.py, which reads the rule from every command's help.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.epilog = " ".join(filter(None, [command.epilog, EXIT_STATUS_RULE]))
                _end_help_with_exit_rule(command)


def main(argv: list[str] | None = None) -> int:
    """Run one command; return the exit status (argparse's own exits included)."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    try:
        open_session = getattr(arguments, "open_session", None)
        if open_session is None:
            with AdminClient(arguments.broker, arguments.timeout) as client:
                return arguments.run(arguments, client)
        with open_session(arguments) as session:
            return arguments.run(arguments, session)
    except BrokenPipeError:
        return _stdout_closed()
    except AdminError as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("meta-admin: interrupted", file=sys.stderr)
        return 130


def _stdout_closed() -> int:
    """The reader of stdout went away (``meta-admin consume TOPIC | head``): end quietly with
    status 0, as Unix filters do. stdout now goes to /dev/null, so the interpreter's last flush
    of what is still buffered cannot fail again at exit."""
    try:
        stdout = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return EXIT_OK  # not a real file (a test's capture): nothing left to flush into a pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stdout)
    finally:
        os.close(devnull)
    return EXIT_OK


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else EXIT_USAGE
