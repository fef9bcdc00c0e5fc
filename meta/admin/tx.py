"""``meta-admin tx``: list prepared XA branches and finish them by hand.

Subcommands, each one connection to a live broker:

* ``list [--qualifier Q] [--all]``: the keys ``transaction null <sid> RECOVER [Q]`` returns
  (prepared branches and heuristically finished ones), with state, message count and bytes
  from ``stats json:transactions`` (or, from a broker that answers text, ``stats
  transactions``: one ``<key> <state> <messages> <bytes>`` line per live transaction). A
  broker without either item (a Java broker answers both as unknown topics) gets the RECOVER
  keys alone. ``--all`` adds the transactions that are still open.
* ``commit KEY`` / ``rollback KEY``: ``HEURISTIC_COMMIT`` / ``HEURISTIC_ROLLBACK``, this
  project's stand-in for Java's JMX operations. Our broker accepts them only from its own
  host, journals the outcome and keeps the branch listed (clients then get ``XA_HEURCOM`` 7
  or ``XA_HEURRB`` 6) until ``forget``.
* ``forget KEY``: ``FORGET``, which drops a heuristic outcome.

Every subcommand takes ``--json``: ``list`` prints ``{"broker", "transactions": [{"key",
"state", "messages", "bytes"}]}`` (the last three null without ``stats transactions``), the
others ``{"key", "action", "outcome", "broker"}``.

Keys are checked with ``meta.protocol.transaction_key.parse_transaction_key`` before any
connection is made and sent in the spelling brokers name them by (``TransactionId.key()``:
lower-case hex), so ``XID:1:0A:0B:q`` and ``XID:1:0a:0b:q`` are one branch, as for Java.
Single-threaded.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from meta.admin.client import EXIT_OK, AdminClient, BrokerRefusedError, reply_text
from meta.admin.output import cell, to_json
from meta.admin.reads import stats_document
from meta.errors import LocalProtocolError
from meta.protocol.commands import Result
from meta.protocol.transaction_key import XATransactionId, parse_transaction_key

QUALIFIER_FORBIDDEN_CHARACTERS = ": \t\r\n"

FINISH_ACTIONS = {
    # subcommand: (wire type, what the tool prints on success, help)
    "commit": (
        "HEURISTIC_COMMIT",
        "heuristically committed",
        "commit a prepared XA branch: its messages are appended to their partitions",
    ),
    "rollback": (
        "HEURISTIC_ROLLBACK",
        "heuristically rolled back",
        "roll a prepared XA branch back: its messages are dropped",
    ),
    "forget": (
        "FORGET",
        "forgotten",
        "drop a heuristic outcome, so RECOVER stops listing the branch",
    ),
}

KEY_HELP = "XA transaction key, XID:<formatId>:<gtridHex>:<bqualHex>:<uniqueQualifier>"
JSON_HELP = "print JSON (stable keys) instead of text"


@dataclass(frozen=True)
class TransactionRow:
    """One line of ``tx list``; ``state`` and the counts are None without the stats item."""

    key: str
    state: str | None = None
    messages: int | None = None
    byte_count: int | None = None


# --- arguments -------------------------------------------------------------------------------


def xa_key(text: str) -> str:
    """argparse type of a key argument: a valid XA key, in the brokers' spelling."""
    try:
        parsed = parse_transaction_key(text)
    except LocalProtocolError as error:
        raise argparse.ArgumentTypeError(f"{error}; expected {KEY_HELP}") from None
    if not isinstance(parsed, XATransactionId):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an XA transaction key: only XA branches (XID:...) can be "
            "finished by an operator"
        )
    return parsed.key()


def qualifier(text: str) -> str:
    """argparse type of ``--qualifier``: non-empty, no ``:`` and no whitespace."""
    if not text or any(character in QUALIFIER_FORBIDDEN_CHARACTERS for character in text):
        raise argparse.ArgumentTypeError(
            f"invalid unique qualifier {text!r}: it must be non-empty, without ':' or spaces"
        )
    return text


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``tx`` and its subcommands; ``connection`` holds ``--broker``/``--timeout``."""
    group = commands.add_parser(
        "tx",
        help="list prepared XA transactions and finish them by hand",
        description="List prepared XA branches and finish them heuristically (commit, "
        "rollback), then forget the outcome. Use when a transaction manager is gone for "
        "good and its prepared branches pin messages and journal files. A metaq-py broker "
        "accepts commit and rollback only from its own host.",
    )
    actions = group.add_subparsers(dest="tx_command", metavar="SUBCOMMAND", required=True)
    listing = actions.add_parser(
        "list",
        parents=[connection],
        help="list prepared and heuristically finished XA branches",
        description="List the XA branches RECOVER returns (prepared, and heuristically "
        "finished until forgotten) with state, message count and bytes.",
    )
    listing.add_argument("--qualifier", type=qualifier, help="only branches of this qualifier")
    listing.add_argument(
        "--all", action="store_true", help="also list open transactions, local ones included"
    )
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    listing.set_defaults(run=run_list)
    for name, (type_, _done, text) in FINISH_ACTIONS.items():
        action = actions.add_parser(
            name, parents=[connection], help=text, description=text[0].upper() + text[1:] + "."
        )
        action.add_argument("key", type=xa_key, metavar="XID_KEY", help=KEY_HELP)
        action.add_argument("--json", action="store_true", help=JSON_HELP)
        action.set_defaults(run=run_finish, tx_type=type_, tx_action=name)


# --- subcommands -----------------------------------------------------------------------------


def run_finish(arguments: argparse.Namespace, client: AdminClient) -> int:
    """``commit`` / ``rollback`` / ``forget``: one transaction command, its outcome printed."""
    type_, done, _help = FINISH_ACTIONS[arguments.tx_action]
    key = arguments.key
    if type_ == "FORGET":
        check_forgettable(client, key)
    check_reply(client, client.transaction(key, type_), f"{type_} of {key}")
    if arguments.json:
        document = {"key": key, "action": arguments.tx_action, "outcome": done}
        print(to_json({**document, "broker": client.name}))
        return EXIT_OK
    line = f"{key}: {done} on broker {client.name}"
    if type_ != "FORGET":
        line += f"; listed by 'meta-admin tx list' until 'meta-admin tx forget {key}'"
    print(line)
    return EXIT_OK


def run_list(arguments: argparse.Namespace, client: AdminClient) -> int:
    """``list``: RECOVER keys, enriched with ``stats transactions`` when the broker has it."""
    reply = client.transaction("null", "RECOVER", arguments.qualifier)
    check_reply(client, reply, "RECOVER")
    keys = [key for key in reply.body.decode("utf-8", "replace").split("\r\n") if key]
    live = live_transactions(client)
    if live is None:
        print(
            f"meta-admin: broker {client.name} has no 'stats transactions' item (a Java "
            "broker?); showing the RECOVER keys only",
            file=sys.stderr,
        )
        live = {}
    rows = [live.get(key, TransactionRow(key)) for key in keys]
    if arguments.all:
        listed = set(keys)
        rows += [
            row
            for key, row in live.items()
            if key not in listed and _matches(key, arguments.qualifier)
        ]
    if arguments.json:
        print(to_json({"broker": client.name, "transactions": [row_document(r) for r in rows]}))
        return EXIT_OK
    if not rows:
        scope = f" with qualifier {arguments.qualifier}" if arguments.qualifier else ""
        what = "transactions" if arguments.all else "prepared or heuristic XA transactions"
        print(f"no {what}{scope} on broker {client.name}")
        return EXIT_OK
    print(format_rows(rows))
    return EXIT_OK


def check_reply(client: AdminClient, reply: Result, what: str) -> None:
    """Raise ``BrokerRefusedError`` with the broker's text unless the reply is a 200."""
    if reply.code != 200:
        raise BrokerRefusedError(
            f"broker {client.name} refused {what} (result {reply.code}): {reply_text(reply.body)}"
        )


def check_forgettable(client: AdminClient, key: str) -> None:
    """FORGET answers OK for any XA key (Java), so say when there is nothing to forget."""
    rows = live_transactions(client)
    if rows is None:
        return  # a broker without the stats item: FORGET's own answer must do
    row = rows.get(key)
    if row is None:
        raise BrokerRefusedError(f"broker {client.name} has no heuristic outcome for {key}")
    if not (row.state or "").startswith("HEURISTIC_"):
        raise BrokerRefusedError(
            f"{key} is {row.state} on broker {client.name}, not heuristically finished: "
            "forget only drops a heuristic outcome (commit or roll the branch back first)"
        )


def live_transactions(client: AdminClient) -> dict[str, TransactionRow] | None:
    """Live transactions by key, from ``stats json:transactions`` or, on a broker that answers
    text, ``stats transactions``; None when the broker has neither item (a Java broker)."""
    document = stats_document(client, "transactions")
    if document is not None:
        return {
            row["key"]: TransactionRow(row["key"], row["state"], row["messages"], row["bytes"])
            for row in document["transactions"]
        }
    reply = client.stats("transactions")
    if reply.code != 200:
        return None
    return parse_transaction_stats(reply.body)


def parse_transaction_stats(body: bytes) -> dict[str, TransactionRow] | None:
    """Rows of a ``STATS`` body of ``<key> <state> <messages> <bytes>`` lines, or None when
    any line has another shape (an unknown item is answered as a topic's stats)."""
    lines = body.decode("utf-8", "replace").split("\r\n")
    if len(lines) < 3 or lines[0] != "STATS" or lines[-2:] != ["END", ""]:
        return None
    rows = {}
    for line in lines[1:-2]:
        tokens = line.split(" ")
        if len(tokens) != 4 or not (tokens[2].isdigit() and tokens[3].isdigit()):
            return None
        if not tokens[0].startswith(("XID:", "TX:")):
            return None
        rows[tokens[0]] = TransactionRow(tokens[0], tokens[1], int(tokens[2]), int(tokens[3]))
    return rows


def row_document(row: TransactionRow) -> dict:
    """A ``tx list`` row as JSON; ``state``, ``messages`` and ``bytes`` are null when the
    broker has no ``stats transactions`` item."""
    return {"key": row.key, "state": row.state, "messages": row.messages, "bytes": row.byte_count}


def format_rows(rows: list[TransactionRow]) -> str:
    """A left-aligned table: KEY, STATE, MESSAGES, BYTES (``-`` where unknown)."""
    width = max(len("KEY"), *(len(row.key) for row in rows))
    lines = [f"{'KEY':<{width}}  {'STATE':<18}  {'MESSAGES':>8}  {'BYTES':>10}"]
    for row in rows:
        state = row.state or "-"
        messages, byte_count = cell(row.messages), cell(row.byte_count)
        lines.append(f"{row.key:<{width}}  {state:<18}  {messages:>8}  {byte_count:>10}")
    return "\n".join(lines)


def _matches(key: str, unique_qualifier: str | None) -> bool:
    if unique_qualifier is None:
        return True
    return key.startswith("XID:") and key.rsplit(":", 1)[1] == unique_qualifier
