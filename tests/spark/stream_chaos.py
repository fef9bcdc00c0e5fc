"""The chaos of ``tests/spark/test_exactly_once_chaos.py``: streaming copies, broken on purpose.

``ChaosRun`` drives copies of the source topic to sink topics, one streaming query per sink
side by side in one driver (``tests/spark/eos_chaos_job.py``), so that every start and
every kill of the driver meets every copy. In this order:

1. the first driver is killed (``kill -9``, with its JVM and Python workers) once a batch's
   rows of the first copy reached its sink and before Spark committed the batch in the
   copy's checkpoint's ``commits/`` (for a transactional writer: once the batch's commit has
   begun, its decision is in ZooKeeper or its rows became visible); a second driver starts
   from the checkpoints;
2. one broker (picked at random) is stopped and started again while a batch of the last
   copy runs (and one of every other copy, unless it copied the whole source already);
3. the second driver is killed as the first was, timed on the last copy's batches; a third
   runs until every checkpoint says the whole source was copied, and is then killed too.

All along, Python workers of the running driver are killed at random moments while a batch
runs (gaps drawn from ``WORKER_KILL_GAP_S``, ``WORKER_KILLS_PER_DRIVER`` per driver); Spark
retries their tasks. Every random choice
comes from one seeded ``random.Random``. The observations that time the kills: the batch ids
in each checkpoint's ``offsets/`` (planned) and ``commits/`` (committed), the end offsets of
the sinks' partitions (``offset`` command) and the write's decision records in ZooKeeper.
Every wait polls with a deadline; ``run`` stops every process it started, also on failure.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from meta.client import MetaClientConfig, MetaMessageSessionFactory
from meta.client.consume.pull import offset_of
from meta.client.zk.spark_commits import commit_record_path
from meta.errors import MetaError
from meta.protocol.commands import LONG_MAX
from tests.integration.broker_process import BrokerProcess
from tests.spark.driver_process import DriverProcess, kill_process

JOB = Path(__file__).with_name("eos_chaos_job.py")
TRANSACTIONAL_ID = "chaos-copy"  # the job's transactionalId
POLL_S = 0.02
PHASE_TIMEOUT_S = 600.0  # Generous: a loaded 2-core machine starts Spark slowly.
WORKER_KILL_GAP_S = (0.5, 3.0)  # Spread over the run: a kill every few seconds of a batch.
WORKER_KILLS_PER_DRIVER = 2  # so that every driver, and the re-runs it makes, meets them
OFFSET_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ChaosCluster:
    """Where the copy runs: ZooKeeper, the brokers, the source and its size."""

    zk_connect: str
    root: str
    brokers: list[BrokerProcess]
    source: str
    source_bytes: int
    max_bytes_per_batch: int


@dataclass
class ChaosReport:
    """What the chaos did, for the test's assertions and its failure messages.

    ``kills_before_commit`` counts, by sink, the driver kills timed on that copy that
    landed before Spark committed the batch.
    """

    driver_kills: list[str] = field(default_factory=list)
    kills_before_commit: dict[str, int] = field(default_factory=dict)
    worker_kills: int = 0
    broker_restarts: int = 0
    driver_logs: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def query_failures(self) -> int:
        return sum(log.count("query failed:") for log in self.driver_logs)

    def note(self, event: str) -> None:
        """Add ``event`` to the timeline, with the seconds since the run started."""
        self.timeline.append(f"{time.monotonic() - self.started:6.1f} s {event}")


def batch_ids(directory: Path) -> list[int]:
    """The batch ids in a checkpoint log directory (``offsets/`` or ``commits/``)."""
    if not directory.is_dir():
        return []
    return sorted(int(entry.name) for entry in directory.iterdir() if entry.name.isdigit())


def source_end_bytes(offsets_file: Path) -> int:
    """The sum of the source offsets a batch ends at (the last line of ``offsets/N``)."""
    document = json.loads(offsets_file.read_text().strip().splitlines()[-1])
    return sum(offset for topic in document.values() for offset in topic.values())


@dataclass(frozen=True)
class Copy:
    """One streaming copy of the run: its sink, its writer's option and its checkpoint."""

    sink: str
    transactional: bool
    checkpoint: Path

    def planned(self) -> int:
        """The last batch id in the checkpoint's ``offsets/`` (-1 before the first)."""
        ids = batch_ids(self.checkpoint / "offsets")
        return ids[-1] if ids else -1

    def committed(self) -> int:
        """The last batch id in the checkpoint's ``commits/`` (-1 before the first)."""
        ids = batch_ids(self.checkpoint / "commits")
        return ids[-1] if ids else -1

    def running(self) -> bool:
        """True while a planned batch is not committed."""
        return self.planned() > self.committed()

    def copied(self, source_bytes: int) -> bool:
        """True once a committed batch ends where the source ends."""
        committed = self.committed()
        if committed < 0:
            return False
        return source_end_bytes(self.checkpoint / "offsets" / str(committed)) == source_bytes


class ChaosRun:
    """Copies under chaos, one driver for all (see the module docstring).

    Args:
        cluster: the cluster and its source.
        sinks: each sink topic with its writer's ``transactional`` option, in order.
        seed: the seed of every random choice.
        directory: the checkpoints and the driver's log go here.
    """

    def __init__(
        self, cluster: ChaosCluster, sinks: dict[str, bool], seed: int, directory: Path
    ) -> None:
        assert sinks, "a run needs a sink"
        self.cluster = cluster
        self.copies = [
            Copy(sink, transactional, directory / f"checkpoint-{sink}")
            for sink, transactional in sinks.items()
        ]
        self.random = random.Random(seed)
        self.log_path = directory / "driver.log"
        self.report = ChaosReport(kills_before_commit=dict.fromkeys(sinks, 0))
        self.driver: DriverProcess | None = None
        self._next_worker_kill = 0.0
        self._driver_worker_kills = 0
        self._baseline: tuple[str, int, dict[int, int]] | None = None

    def run(self) -> ChaosReport:
        """Copy the whole source under chaos; every process started here is stopped."""
        config = MetaClientConfig(zk_connect=self.cluster.zk_connect, zk_root=self.cluster.root)
        zk = KazooClient(hosts=self.cluster.zk_connect, timeout=10)
        factory = MetaMessageSessionFactory(config)
        first, last = self.copies[0], self.copies[-1]
        try:
            zk.start(timeout=10)
            self._zk, self._factory = zk, factory
            self._partitions = {
                copy.sink: factory.get_partitions_for_topic(copy.sink) for copy in self.copies
            }
            self._start_driver()
            self._kill_driver_between_write_and_commit(first, self.random.randint(0, 1))
            self._start_driver()
            self._restart_a_broker_during_a_batch()
            self._kill_driver_between_write_and_commit(last, last.committed() + 1)
            self._start_driver()
            self._wait(self._copied, "the whole source copied and committed by every copy")
            self.report.note("whole source copied")
        finally:
            self._stop_driver()
            factory.shutdown()
            zk.stop()
            zk.close()
        return self.report

    def _committed(self) -> str:
        """Each copy's last committed batch, for the timeline."""
        return ", ".join(f"{copy.sink} {copy.committed()}" for copy in self.copies)

    def _start_driver(self) -> None:
        arguments = [
            self.cluster.zk_connect,
            self.cluster.root,
            self.cluster.source,
            str(self.cluster.max_bytes_per_batch),
        ]
        for copy in self.copies:
            transactional = "true" if copy.transactional else "false"
            arguments += [copy.sink, str(copy.checkpoint), transactional]
        self.driver = DriverProcess(JOB, arguments, self.log_path)
        self.report.note(f"driver started (committed batches: {self._committed()})")
        self._driver_worker_kills = 0
        self._next_worker_kill = time.monotonic() + self.random.uniform(*WORKER_KILL_GAP_S)

    def _stop_driver(self) -> None:
        if self.driver is not None:
            driver, self.driver = self.driver, None
            driver.kill()
            self.report.driver_logs.append(driver.log())
            self.report.note(f"driver killed (committed batches: {self._committed()})")

    def _kill_driver_between_write_and_commit(self, copy: Copy, first_batch: int) -> None:
        """Kill the driver once batch N >= ``first_batch`` of ``copy`` is in its sink but
        not committed."""
        batch = self._wait(
            lambda: self._written_not_committed(copy, first_batch),
            f"a batch >= {first_batch} written to {copy.sink} and not committed",
        )
        self._stop_driver()
        landed = copy.committed() < batch
        self.report.kills_before_commit[copy.sink] += landed
        where = "before" if landed else "after"
        self.report.driver_kills.append(
            f"{copy.sink} batch {batch}: killed {where} Spark committed it"
        )
        self.report.note(self.report.driver_kills[-1])

    def _restart_a_broker_during_a_batch(self) -> None:
        """Stop and start one broker once the new driver runs a batch of the last copy after
        committing one, while every copy runs a batch or has copied the whole source."""
        last = self.copies[-1]
        first = last.committed() + 1

        def batches_running() -> bool:
            if not last.planned() > last.committed() >= first:
                return False
            return all(
                copy.running() or copy.copied(self.cluster.source_bytes) for copy in self.copies
            )

        self._wait(batches_running, "a batch running")
        broker = self.random.choice(self.cluster.brokers)
        self.report.note(f"stopping broker {self.cluster.brokers.index(broker) + 1}")
        broker.stop()
        broker.start()
        self.report.broker_restarts += 1
        self.report.note("broker serving again")

    def _wait(self, condition, what: str, timeout_s: float = PHASE_TIMEOUT_S):
        """Poll ``condition`` (killing workers meanwhile) until it returns a true value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.driver is not None and self.driver.alive(), (
                f"the driver exited while waiting for {what}:\n{self.driver.log()[-5000:]}"
            )
            self._maybe_kill_a_worker()
            value = condition()
            if value:
                return value
            time.sleep(POLL_S)
        log = self.driver.log()[-5000:] if self.driver else ""
        raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}:\n{log}")

    def _maybe_kill_a_worker(self) -> None:
        now = time.monotonic()
        if self._driver_worker_kills >= WORKER_KILLS_PER_DRIVER or now < self._next_worker_kill:
            return
        running = [copy for copy in self.copies if copy.running()]
        if not running:
            return  # Between batches: wait for the next one.
        workers = self.driver.python_workers() if self.driver else []
        if workers and kill_process(self.random.choice(workers)):
            self.report.worker_kills += 1
            self._driver_worker_kills += 1
            batches = ", ".join(f"{copy.sink} {copy.planned()}" for copy in running)
            self.report.note(f"killed a Python worker (batches running: {batches})")
            self._next_worker_kill = now + self.random.uniform(*WORKER_KILL_GAP_S)

    def _copied(self) -> bool:
        return all(copy.copied(self.cluster.source_bytes) for copy in self.copies)

    def _written_not_committed(self, copy: Copy, first_batch: int) -> int | None:
        """Batch N (>= ``first_batch``) of ``copy`` when it runs and its rows reached the
        sink."""
        planned = copy.planned()
        if planned < first_batch or planned <= copy.committed():
            return None
        if self._baseline is None or self._baseline[:2] != (copy.sink, planned):
            self._baseline = (copy.sink, planned, self._sink_ends(copy.sink))
            return None
        ends = self._sink_ends(copy.sink)
        moved = any(ends.get(key, 0) > end for key, end in self._baseline[2].items())
        return planned if moved or self._commit_under_way(copy) else None

    def _sink_ends(self, sink: str) -> dict[int, int]:
        """The end offset of every partition of ``sink`` that answers now, by index."""
        ends = {}
        for index, partition in enumerate(self._partitions[sink]):
            try:
                ends[index] = offset_of(self._factory, sink, partition, LONG_MAX, OFFSET_TIMEOUT_S)
            except MetaError:
                continue  # Its broker is away: no news from it.
        return ends

    def _commit_under_way(self, copy: Copy) -> bool:
        """True while a decision record of ``copy``'s transactional write is in ZooKeeper."""
        if not copy.transactional:
            return False
        try:
            return bool(
                self._zk.get_children(commit_record_path(self.cluster.root, TRANSACTIONAL_ID))
            )
        except NoNodeError:
            return False
