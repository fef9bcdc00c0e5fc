"""``meta-admin spark-writes``: the exactly-once Spark writes and their batches in doubt.

Each write with ``transactional=true`` keeps a commit record in ZooKeeper
(``R/spark/transactions/<writeId>``, ``meta.client.zk.spark_commits``): the last batch
committed in full, and the decision of a batch whose commit has not finished. A batch in
doubt is one whose decision is recorded but whose commit was cut short (the driver died, or a
broker was down): its branches are committed when the query runs that batch again. The
prepared branches themselves are listed by ``meta-admin tx list`` on each broker (XA unique
qualifier ``spark-<writeId>``). The tokens of batch write jobs under way (``job-<token>``
children) are not decisions and are not listed.

Single-threaded.
"""

from __future__ import annotations

import argparse
import json

from meta.admin.client import EXIT_OK
from meta.admin.options import cluster_options
from meta.admin.output import table, to_json
from meta.admin.session import ClusterSession
from meta.client.zk.spark_commits import decision_batch

HEADERS = ["WRITE_ID", "COMMITTED_BATCH", "IN_DOUBT_BATCH", "BRANCHES", "BROKERS"]


def add_parser(commands: argparse._SubParsersAction, connection: argparse.ArgumentParser) -> None:
    """Register ``spark-writes``."""
    del connection  # The records are in ZooKeeper.
    writes = commands.add_parser(
        "spark-writes",
        parents=[cluster_options()],
        help="list exactly-once Spark writes and their batches in doubt",
        description="For each Spark write with transactional=true, print the last batch "
        "committed in full and each batch whose commit has not finished (in doubt: its "
        "branches are committed when the query runs the batch again), with its branch "
        "count and brokers.",
    )
    writes.set_defaults(run=run_spark_writes, open_session=ClusterSession.from_arguments)


def spark_writes(session: ClusterSession) -> list[dict]:
    """One row per write: its id, last committed batch and batches in doubt."""
    zk = session.zk
    base = f"{zk.root}/spark/transactions"
    rows = []
    for write_id in sorted(zk.children(base)) if zk.exists(base) else []:
        path = f"{base}/{write_id}"
        record = json.loads(zk.data(path) or b"{}")
        doubts = []
        for child in sorted(zk.children(path)):
            batch = decision_batch(child)
            if batch is None:
                continue  # the token of a batch write job under way, not a decision
            decision = json.loads(zk.data(f"{path}/{child}") or b'{"branches": []}')
            branches = decision["branches"]
            doubts.append(
                {
                    "batch": batch,
                    "branches": len(branches),
                    "brokers": sorted({uri for uri, _gid, _bid in branches}),
                }
            )
        committed = record.get("committedBatch", -1)
        rows.append({"write_id": write_id, "committed_batch": committed, "in_doubt": doubts})
    return rows


def run_spark_writes(arguments: argparse.Namespace, session: ClusterSession) -> int:
    rows = spark_writes(session)
    if arguments.json:
        print(to_json({"zk_root": session.zk.root, "writes": rows}))
        return EXIT_OK
    if not rows:
        print("no transactional Spark write")
        return EXIT_OK
    cells = []
    for row in rows:
        committed = "-" if row["committed_batch"] < 0 else row["committed_batch"]
        if not row["in_doubt"]:
            cells.append([row["write_id"], committed, "-", "-", "-"])
        for doubt in row["in_doubt"]:
            brokers = ",".join(doubt["brokers"])
            cells.append([row["write_id"], committed, doubt["batch"], doubt["branches"], brokers])
    print(table(HEADERS, cells))
    return EXIT_OK
