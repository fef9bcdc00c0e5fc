"""A steady produce load and consumer group members in processes of their own, for tests
that change a cluster under traffic and check what every consumer received.

``PacedProducer`` sends numbered messages (the body is the decimal sequence number) at a
fixed rate through ZooKeeper, round robin, from one thread, and records each acknowledged
one: its message id, partition and the time its acknowledgement came back. ``Member`` runs
``tests.integration.member_process``, one consumer of the group, and reads back what it
received (``Receipt``). Both use ``time.monotonic()``, the system-wide clock, so the times
of the two compare. Every wait has a bound; ``Member.kill`` and ``PacedProducer.stop`` are
safe to call at any time, twice too.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

from meta.client import Message
from meta.errors import MetaError
from tests.integration.broker_process import REPO

STOP_TIMEOUT_S = 30.0


class Ack(NamedTuple):
    """One acknowledged message: what the broker answered, and when (monotonic seconds)."""

    msg_id: int
    partition: str
    acked_at: float


class Receipt(NamedTuple):
    """One message as a member received it."""

    sequence: int
    partition: str
    msg_id: int
    received_at: float
    member: str


class PacedProducer:
    """Sends message ``n`` at ``n / rate_per_s`` seconds after the start (catching up after a
    pause of its own), until ``stop`` or ``sends_max`` messages; synchronous sends, so every
    ``Ack`` is one the broker answered with success."""

    def __init__(self, factory, topic: str, rate_per_s: int, sends_max: int) -> None:
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.sends_max = sends_max
        self.producer = factory.create_producer()
        self.producer.publish(topic)
        self.lock = threading.Lock()
        self.acks: dict[int, Ack] = {}
        self.failures: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        for sequence in range(self.sends_max):
            delay_s = start + sequence / self.rate_per_s - time.monotonic()
            if self._stop.wait(delay_s) if delay_s > 0 else self._stop.is_set():
                return
            try:
                result = self.producer.send_message(Message(self.topic, b"%d" % sequence))
            except MetaError as error:
                failure = repr(error)
            else:
                if result.success:
                    ack = Ack(result.msg_id, str(result.partition), time.monotonic())
                    with self.lock:
                        self.acks[sequence] = ack
                    continue
                failure = result.error_message or "failed"
            with self.lock:
                self.failures.append((sequence, failure))

    def acked(self) -> dict[int, Ack]:
        """A copy of the acknowledged messages by sequence number."""
        with self.lock:
            return dict(self.acks)

    def stop(self) -> None:
        """Send no more and wait (bounded) for the send in progress."""
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        assert not self._thread.is_alive(), "the producer thread did not stop"


class Member:
    """One ``tests.integration.member_process`` consumer; its output goes to ``directory``."""

    def __init__(
        self, name: str, zk_connect: str, root: str, topic: str, group: str, directory: Path
    ) -> None:
        self.name = name
        self.consumer_id = f"{group}_{name}"
        self.out_path = directory / f"{name}.received"
        self.log_path = directory / f"{name}.log"
        arguments = [zk_connect, root, topic, group, name, str(self.out_path)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.member_process", *arguments],
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=REPO,
                env=dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1"),
                start_new_session=True,
            )

    def wait_for_line(self, expected: str, timeout_s: float) -> None:
        """Wait until the process prints ``expected`` (bounded); raise if it exits first."""
        deadline = time.monotonic() + timeout_s
        stdout = self.process.stdout
        assert stdout is not None
        while (left_s := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([stdout], [], [], left_s)
            if not readable:
                break
            line = stdout.readline().decode().strip()
            if line == expected:
                return
            if not line and self.process.poll() is not None:
                break
        raise AssertionError(f"{self.name} did not print {expected!r}:\n{self.log()}")

    def leave(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM: the member leaves the group and exits 0 (checked)."""
        self.process.send_signal(signal.SIGTERM)
        self.wait_for_line("left", timeout_s)
        assert self.process.wait(timeout_s) == 0, self.log()

    def kill(self) -> None:
        """``kill -9`` the member's process group if it still runs, and reap it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def received_count(self) -> int:
        """Messages received so far (complete lines)."""
        return self.out_path.read_bytes().count(b"\n") if self.out_path.exists() else 0

    def receipts(self) -> list[Receipt]:
        """Every message received, in the order received."""
        if not self.out_path.exists():
            return []
        found = []
        for line in self.out_path.read_text(encoding="ascii").splitlines():
            sequence, partition, msg_id, received_at = line.split()
            found.append(
                Receipt(int(sequence), partition, int(msg_id), float(received_at), self.name)
            )
        return found
