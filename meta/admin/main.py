"""Entry point of the operator tool: ``meta-admin <group> <command>``, ``python -m meta.admin``.

Argument parsing with one argparse subparser per command group (``COMMAND_GROUPS``: each
module offers ``add_parser(commands, connection)`` and sets ``run(arguments, client)`` on its
leaves), so a later group is one more module and one more entry. Every command and group
has ``--help``. ``--broker HOST:PORT`` and ``--timeout SECONDS`` are accepted before the group
or after the command.

``main(argv)`` returns the exit status instead of exiting: 0 done, 1 the broker refused, 2 bad
usage or the broker could not be reached (``meta.admin.client``). Errors go to stderr as one
line naming what is wrong; results go to stdout. Single-threaded; no reactor, no kazoo.
"""

from __future__ import annotations

import argparse
import sys

from meta import __version__
from meta.admin import tx
from meta.admin.client import (
    DEFAULT_BROKER,
    DEFAULT_TIMEOUT_S,
    EXIT_USAGE,
    AdminClient,
    AdminError,
    UsageError,
    parse_broker_address,
)

COMMAND_GROUPS = (tx,)
"""Modules registering a command group; add new groups here."""

EPILOG = "Exit status: 0 done, 1 the broker refused, 2 bad usage or broker unreachable."


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


def connection_options(with_defaults: bool) -> argparse.ArgumentParser:
    """``--broker`` and ``--timeout``; without defaults (on commands) they override the
    values given before the group only when given."""
    options = argparse.ArgumentParser(add_help=False)
    broker = DEFAULT_BROKER if with_defaults else argparse.SUPPRESS
    timeout = DEFAULT_TIMEOUT_S if with_defaults else argparse.SUPPRESS
    options.add_argument(
        "--broker",
        type=broker_argument,
        default=broker,
        metavar="HOST:PORT",
        help=f"broker to talk to (default {DEFAULT_BROKER})",
    )
    options.add_argument(
        "--timeout",
        type=timeout_argument,
        default=timeout,
        metavar="SECONDS",
        help=f"bound on connecting and on each reply (default {DEFAULT_TIMEOUT_S:g})",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meta-admin",
        parents=[connection_options(with_defaults=True)],
        description="Operator tool of a running metaq-py broker.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"metaq-py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    leaf_options = connection_options(with_defaults=False)
    for group in COMMAND_GROUPS:
        group.add_parser(commands, leaf_options)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; return the exit status (argparse's own exits included)."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    try:
        with AdminClient(arguments.broker, arguments.timeout) as client:
            return arguments.run(arguments, client)
    except AdminError as error:
        print(f"meta-admin: {error}", file=sys.stderr)
        return error.exit_status


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else EXIT_USAGE
