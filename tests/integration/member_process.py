"""A consumer group member in a process of its own that leaves the group on SIGTERM.

Usage: ``python -m tests.integration.member_process ZK_CONNECT ROOT TOPIC GROUP ID OUT``.

The process joins ``GROUP`` as ``ID`` (as users run a consumer: one process, the client's
defaults except a commit every ``COMMIT_PERIOD_MS`` and a ``zk_sync_s`` of
``ZK_SYNC_S``), prints ``ready`` once it has joined, and appends one line per message it
receives to ``OUT``: ``<body> <B-P> <msg id> <time.monotonic() at receipt>``. The clock is
the system-wide monotonic clock, so a test compares these times with its own. On SIGTERM it
shuts the consumer down (commit, release the partitions, leave the group), prints ``left``
and exits 0. It exits the same way after ``LIFETIME_S`` should the test never stop it. The
client's log (INFO: what it owns and takes) goes to stderr.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from meta.client import ConsumerConfig, MetaClientConfig, MetaMessageSessionFactory

COMMIT_PERIOD_MS = 500
ZK_SYNC_S = 2.0
LIFETIME_S = 300.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str]) -> None:
    zk_connect, root, topic, group, consumer_id, out_path = argv[:6]
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    leave = threading.Event()
    signal.signal(signal.SIGTERM, lambda _number, _frame: leave.set())
    config = MetaClientConfig(zk_connect=zk_connect, zk_root=root)
    lock = threading.Lock()
    with (
        open(out_path, "a", encoding="ascii", buffering=1) as out,
        MetaMessageSessionFactory(config) as factory,
    ):

        def record(message) -> None:
            received = time.monotonic()
            line = f"{message.data.decode()} {message.partition} {message.id} {received:.6f}\n"
            with lock:
                out.write(line)

        consumer = factory.create_consumer(
            ConsumerConfig(
                group,
                consumer_id=consumer_id,
                zk_sync_s=ZK_SYNC_S,
                commit_offset_period_ms=COMMIT_PERIOD_MS,
            )
        )
        consumer.subscribe(topic, 64 * 1024, record)
        consumer.complete_subscribe()
        print("ready", flush=True)
        leave.wait(LIFETIME_S)
        consumer.shutdown()
    print("left", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
