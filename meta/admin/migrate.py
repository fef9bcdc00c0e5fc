"""``meta-admin migrate-java-data DIR``: retire a Java broker's transaction journal.

Segments interchange between Java and metaq-py brokers both ways, but the transaction
journals do not (metaq-py's has its own format, docs/formats.md §6): a metaq-py broker refuses to
start on a Java ``transactions/`` directory, and a Java broker on a metaq-py one. This command
checks the Java journal (``meta.tx.java_journal``) and, when a Java broker would have nothing
left to do with it, moves it aside to ``transactions.java.<UTC time>`` (kept, never deleted;
the name has no ``-``, so no broker takes it for a partition directory). When something is
pending, a prepared XA transaction or a committed batch missing from its segments, it lists
it, moves nothing, and says how to finish it on the Java broker first.

Runs offline, on a stopped broker's directories; no ZooKeeper, no broker connection.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from meta.admin.client import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from meta.admin.output import to_json
from meta.tx.java_journal import JavaJournal, inspect_java_journal, is_java_journal_file
from meta.tx.records import FILE_MAGIC, FILE_MAGIC_V1

JOURNAL_DIRECTORY = "transactions"
MOVED_PREFIX = "transactions.java."

FINISH_ON_JAVA = (
    "Start the Java broker on this directory once more, finish the prepared XA transactions "
    "with their transaction manager (or the broker's JMX heuristic operations), stop it "
    "cleanly (a committed batch missing from its segments is appended again at its start), "
    "then run this command again."
)


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``migrate-java-data``."""
    del connection  # Offline: reads and renames files only.
    migrate = commands.add_parser(
        "migrate-java-data",
        help="check a stopped Java broker's transaction journal and move it aside",
        description="Check the Java transaction journal in DIR/transactions (DIR is the Java "
        "broker's dataLogPath, which defaults to its dataPath). If no transaction is pending "
        "(no prepared XA transaction, every committed batch intact in its segments), move "
        "it aside to DIR/transactions.java.<UTC time>, kept for reference, so that a metaq-py "
        "broker can start on DIR; otherwise list what is pending and change nothing. Open, "
        "unprepared transactions are rolled back, as a Java broker's start would do. Run it "
        "with the Java broker stopped.",
        epilog="Refused (exit 1): something is pending; unreadable files exit 2.",
    )
    migrate.add_argument("directory", metavar="DIR", help="the Java broker's dataLogPath")
    migrate.add_argument(
        "--data-path",
        action="append",
        metavar="DIR",
        help="where the <topic>-<partition> directories are (repeatable; default: DIR)",
    )
    migrate.add_argument("--dry-run", action="store_true", help="check only; move nothing")
    migrate.add_argument("--json", action="store_true", help="print the result as JSON")
    migrate.set_defaults(run=run_migrate, open_session=lambda _arguments: contextlib.nullcontext())


def run_migrate(arguments: argparse.Namespace, _session: None) -> int:
    journal = os.path.join(arguments.directory, JOURNAL_DIRECTORY)
    if not os.path.isdir(arguments.directory):
        return _fail(f"{arguments.directory} is not a directory")
    if not os.path.isdir(journal):
        return _done(arguments, {"action": "none", "reason": f"no {journal}"}, EXIT_OK)
    problem = _not_java(journal)
    if problem is not None:
        return _fail(problem) if problem else _done(arguments, _already(journal), EXIT_OK)
    try:
        report = inspect_java_journal(journal, arguments.data_path or [arguments.directory])
    except OSError as error:
        return _fail(f"cannot read {journal}: {error}")
    document = _document(report)
    if report.pending:
        document.update(action="refused", reason=FINISH_ON_JAVA)
        return _done(arguments, document, EXIT_REFUSED)
    if arguments.dry_run:
        document.update(action="none", reason="--dry-run: it can be moved aside")
        return _done(arguments, document, EXIT_OK)
    target = os.path.join(
        arguments.directory, MOVED_PREFIX + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    )
    try:
        os.rename(journal, target)
        _fsync_directory(arguments.directory)
    except OSError as error:
        return _fail(f"cannot move {journal} to {target}: {error}")
    document.update(action="moved", moved_to=target)
    return _done(arguments, document, EXIT_OK)


def _not_java(journal: str) -> str | None:
    """None for a Java journal (or only empty files: a Java broker that never saw a
    transaction), "" for a metaq-py journal, else what is wrong."""
    kinds = set()
    for name in sorted(os.listdir(journal)):
        if not name.startswith("redo."):
            continue
        with open(os.path.join(journal, name), "rb") as file:
            head = file.read(len(FILE_MAGIC))
        if head in (FILE_MAGIC, FILE_MAGIC_V1):
            kinds.add("metaq-py")
        elif is_java_journal_file(head):
            kinds.add("java")
        elif head:
            return f"{journal}/{name} is neither a Java nor a metaq-py journal file"
    if kinds == {"metaq-py"}:
        return ""
    if "metaq-py" in kinds:
        return f"{journal} mixes Java and metaq-py journal files"
    return None


def _already(journal: str) -> dict:
    return {"journal": journal, "action": "none", "reason": "already a metaq-py journal"}


def _document(report: JavaJournal) -> dict:
    return {
        "journal": report.directory,
        "redo_files": report.redo_files,
        "checkpoint": list(report.checkpoint) if report.checkpoint else None,
        "prepared": report.prepared,
        "rolled_back": report.in_flight,
        "incomplete_batches": [
            {
                "transaction": batch.transaction_id,
                "partition": batch.partition,
                "offset": batch.offset,
                "length": batch.length,
                "reason": batch.reason,
            }
            for batch in report.incomplete_batches
        ],
        "unreadable": report.unreadable,
    }


def _done(arguments: argparse.Namespace, document: dict, status: int) -> int:
    if arguments.json:
        print(to_json(document))
        return status
    for transaction in document.get("prepared", []):
        print(f"prepared XA transaction {transaction}: its outcome is still to be decided")
    for batch in document.get("incomplete_batches", []):
        print(
            f"committed transaction {batch['transaction']}: batch of {batch['length']} bytes "
            f"at {batch['partition']} offset {batch['offset']} not intact ({batch['reason']})"
        )
    for where in document.get("unreadable", []):
        print(f"unreadable tail (a Java start truncates it too): {where}")
    for transaction in document.get("rolled_back", []):
        print(f"open transaction {transaction}: rolled back, as a Java broker's start does")
    action = document["action"]
    if action == "moved":
        print(f"moved {document['journal']} aside to {document['moved_to']} (kept)")
    elif action == "refused":
        print(f"refused: {document['journal']} has pending work. {document['reason']}")
    else:
        print(f"nothing moved: {document['reason']}")
    return status


def _fail(text: str) -> int:
    print(f"meta-admin: {text}", file=sys.stderr)
    return EXIT_USAGE


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
