"""``BenchBroker``: a real broker process for the benchmarks, always stopped afterwards.

It runs ``python -m meta.server`` on a free 127.0.0.1 port with a given flush policy, ZooKeeper
off or registered in a given ZooKeeper (``zk_connect``, root ``ZK_ROOT``), and stops it with
SIGTERM, then SIGKILL of its process group. ``meta.bench.load`` (``tools/bench``) and the Spark,
slave and group benchmarks use it. Every wait is bounded in time. Single-threaded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from meta.client.net.connection import BrokerConnection
from meta.errors import MetaError
from meta.ports import free_port
from meta.protocol.commands import Version

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
MAX_SIZE_DEFAULT = 1024 * 1024
ZK_ROOT = "/meta"
"""The ZooKeeper root of benchmark brokers that register (``BenchBroker.zk_connect``)."""
SCENARIO_NAMES = (
    "sync",
    "pipelined",
    "unbatched",
    "concurrent",
    "client",
    "consume",
    "latency",
    "tx",
    "e2e",
)
TOPICS = tuple(f"bench-{name}" for name in SCENARIO_NAMES)


class BenchError(MetaError):
    """A reply was not 200, an opaque did not match, or the broker stopped answering."""


# --- the broker process ----------------------------------------------------------------------


def server_ini(
    port: int,
    data_path: Path,
    threshold: int,
    interval_ms: int,
    *,
    zk_connect: str = "",
    broker_id: int = 0,
    segment_bytes: int = 1024 * 1024 * 1024,
    topics: dict[str, int] | None = None,
) -> str:
    """A server.ini for one benchmark broker on 127.0.0.1.

    ``zk_connect``: register in that ZooKeeper under ``ZK_ROOT`` (else ZooKeeper is off);
    ``topics``: topic -> partitions (default: every bench topic with one partition).
    """
    system = {
        "brokerId": broker_id,
        "hostName": HOST,
        "serverPort": port,
        "dashboardHttpPort": 0,  # any free port (logged): benchmark brokers never collide
        "dataPath": data_path,
        "numPartitions": 1,
        "unflushThreshold": threshold,
        "unflushInterval": interval_ms,
        "maxSegmentSize": segment_bytes,
        "maxTransferSize": MAX_SIZE_DEFAULT,
        "maxMessageSize": MAX_SIZE_DEFAULT,
        "flushTxLogAtCommit": 1,  # the tx scenario (meta.bench.tx) measures durable commits
    }
    zookeeper = {
        "zk.zkEnable": "true" if zk_connect else "false",
        "zk.zkConnect": zk_connect or "127.0.0.1:1",
        "zk.zkRoot": ZK_ROOT,
        "zk.zkSyncTimeMs": 0,
    }
    lines = ["[system]", *(f"{key}={value}" for key, value in system.items()), ""]
    lines += ["[zookeeper]", *(f"{key}={value}" for key, value in zookeeper.items())]
    for topic, partitions in (topics or dict.fromkeys(TOPICS, 1)).items():
        lines += ["", f"[topic={topic}]", f"numPartitions={partitions}"]
    return "\n".join(lines) + "\n"


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_answering(address: tuple[str, int], timeout_s: float, alive: Callable) -> None:
    """Poll with ``version`` requests until the broker answers (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise BenchError("broker process exited during start-up")
        try:
            with BrokerConnection(*address, timeout_s=2.0) as connection:
                connection.request(Version(1))
                return
        except (OSError, MetaError):
            time.sleep(0.05)
    raise BenchError(f"broker at {address} did not answer within {timeout_s} s")


@dataclass
class BenchBroker:
    """One broker process in ``directory`` with the flush policy ``threshold``/``interval_ms``.

    ``profile_path``: run the broker under cProfile and write its stats there at exit;
    ``launcher``: a command the interpreter runs under (``valgrind ...``: the start then
    waits up to ``start_timeout_s``).
    """

    directory: Path
    threshold: int
    interval_ms: int = 10000
    profile_path: Path | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    zk_connect: str = ""  # register in this ZooKeeper (``ZK_ROOT``); "": ZooKeeper off
    broker_id: int = 0
    segment_bytes: int = 1024 * 1024 * 1024
    topics: dict[str, int] | None = None  # topic -> partitions; None: the bench topics
    python_path: str = str(REPO)  # the code the broker runs (another checkout: a comparison)
    launcher: tuple[str, ...] = ()
    start_timeout_s: float = START_TIMEOUT_S

    def server_ini(self) -> str:
        return server_ini(
            self.port,
            self.data_path,
            self.threshold,
            self.interval_ms,
            zk_connect=self.zk_connect,
            broker_id=self.broker_id,
            segment_bytes=self.segment_bytes,
            topics=self.topics,
        )

    def extra_arguments(self) -> list[str]:
        """More ``meta.server`` arguments (a slave adds ``--slave FILE``)."""
        return []

    def server_command(self) -> list[str]:
        """The interpreter arguments that run the broker (before ``-f server.ini``)."""
        return ["-m", "meta.server"]

    @property
    def address(self) -> tuple[str, int]:
        return (HOST, self.port)

    @property
    def data_path(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    def start(self) -> BenchBroker:
        self.data_path.mkdir(parents=True, exist_ok=True)
        config = self.directory / "server.ini"
        config.write_text(self.server_ini())
        command = [*self.launcher, sys.executable]
        if self.profile_path is not None:
            command += ["-m", "cProfile", "-o", str(self.profile_path)]
        command += [*self.server_command(), "-f", str(config), *self.extra_arguments()]
        env = dict(os.environ, PYTHONPATH=self.python_path, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=env,
                start_new_session=True,
            )
        try:
            wait_until_answering(self.address, self.start_timeout_s, self.alive)
        except BaseException:
            self.stop()
            raise BenchError(f"broker did not start; its log:\n{self.log_tail()}") from None
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, characters: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-characters:]

    def cpu_seconds(self) -> float:
        """User + system CPU time of the broker process so far."""
        if not self.alive():
            return 0.0
        return process_cpu_seconds(self.process.pid)

    def stop(self) -> int | None:
        """SIGTERM and wait; SIGKILL the process group if it does not exit in time."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT_S)
        return self.process.returncode

    def __enter__(self) -> BenchBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def report_in_work_directory(
    args, prefix: str, run: Callable[..., dict], format_report: Callable[[dict], str]
) -> int:
    """A bench's ``main``: ``run(args, work)`` in a fresh temporary directory (removed after,
    unless ``args.keep``), then the report as JSON (``args.json``) or as text."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        report = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
