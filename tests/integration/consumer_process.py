"""A consumer group member in a process of its own, for tests that kill it abruptly.

Usage: ``python -m tests.integration.consumer_process ZK_CONNECT ROOT TOPIC GROUP ID OUT
[SESSION_MS [COMMIT_MS]]``.

The process joins ``GROUP`` with a ZooKeeper session of ``SESSION_MS`` (default 2 s),
commits every ``COMMIT_MS`` (default 500 ms), appends the id of every message it
receives to ``OUT`` (one decimal id a line, flushed per message, so a SIGKILL loses nothing
already reported), prints ``ready`` on stdout once it has joined and then runs until killed.
"""

from __future__ import annotations

import sys
import threading

from meta.client import ConsumerConfig, MetaClientConfig, MetaMessageSessionFactory

SESSION_TIMEOUT_MS = 2000
COMMIT_PERIOD_MS = 500


def main(argv: list[str]) -> None:
    zk_connect, root, topic, group, consumer_id, out_path = argv[:6]
    session_ms = int(argv[6]) if len(argv) > 6 else SESSION_TIMEOUT_MS
    commit_ms = int(argv[7]) if len(argv) > 7 else COMMIT_PERIOD_MS
    config = MetaClientConfig(zk_connect=zk_connect, zk_root=root, zk_session_timeout_ms=session_ms)
    factory = MetaMessageSessionFactory(config)
    out = open(out_path, "a", encoding="ascii")  # noqa: SIM115 - open until the process dies
    lock = threading.Lock()

    def record(message) -> None:
        with lock:
            out.write(f"{message.id}\n")
            out.flush()

    consumer = factory.create_consumer(
        ConsumerConfig(
            group, consumer_id=consumer_id, zk_sync_s=0.5, commit_offset_period_ms=commit_ms
        )
    )
    consumer.subscribe(topic, 64 * 1024, record)
    consumer.complete_subscribe()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
