"""A real Spark standalone cluster for tests: a master on 127.0.0.1 and workers on 127.0.0.x.

``SparkStandalone`` starts them from PySpark's bundled launcher (``bin/spark-class``
``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``), each in a process
group of its own, and waits (bounded) until the master is ALIVE and every worker registered.
Each worker runs on a loopback address of its own (``worker_hosts``), so Spark sees one host
per worker: a speculative copy of a task runs only on a host without an attempt of it, so
speculation needs two. Ports are chosen by the JVMs (port 0) and read from the master's log;
the master's REST submission server (a fixed port, 6066) is switched off so parallel runs
never collide. ``stop`` ends every group (SIGTERM, then SIGKILL), which also ends the
executors and their Python workers: they are children of their worker. ``submit`` runs
``bin/spark-submit``.

Every wait polls a log file with a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from tests.integration.zookeeper import terminate_group

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# Small, fast-starting JVMs: C1 only, the serial collector.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")


class SparkStandalone:
    """A master and one worker per host of ``worker_hosts`` (each with ``cores`` and
    ``memory``), with their logs and work in ``directory``."""

    def __init__(
        self,
        directory: Path,
        cores: int = 2,
        memory: str = "1g",
        worker_hosts: tuple[str, ...] = ("127.0.0.1",),
    ) -> None:
        self.directory = directory
        self.cores = cores
        self.memory = memory
        self.worker_hosts = worker_hosts
        self.url = ""
        self._processes: list[subprocess.Popen[bytes]] = []

    def environment(self, host: str = "127.0.0.1") -> dict[str, str]:
        """The launcher's environment: ``host`` only, small daemons, no REST server."""
        environment = dict(os.environ)
        environment.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP=host,
            SPARK_LOCAL_HOSTNAME=host,
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=JVM_OPTIONS,
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            SPARK_LOG_DIR=str(self.directory),
            SPARK_CONF_DIR=str(self.directory / "conf"),
        )
        return environment

    def start(self) -> SparkStandalone:
        """Start the master, then the workers; stop all if any is not up in time."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "conf").mkdir(exist_ok=True)
        try:
            master_log = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--webui-port",
                "0",
            )
            master = self._processes[-1]
            self.url = self._wait_for(master_log, _MASTER_URL, master).group(1)
            self._wait_for(master_log, re.compile(r"New state: ALIVE"), master)
            # Workers start side by side: each JVM's start-up costs seconds.
            workers = [self._spawn_worker(host) for host in self.worker_hosts]
            for worker_log, worker in workers:
                registered = re.compile(r"Successfully registered with master")
                self._wait_for(worker_log, registered, worker)
        except BaseException:
            self.stop()
            raise
        return self

    def submit(
        self, script: Path, *arguments: str, timeout_s: float, **conf: str
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master URL`` of a Python ``script`` (client deploy mode).

        The driver and the Python workers of the executors run this interpreter
        (``PYSPARK_PYTHON``); ``conf`` adds ``--conf`` settings. Output is text.
        """
        settings = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "512m",
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            # Small test queries: no code generation, no adaptive re-planning.
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.adaptive.enabled": "false",
            **conf,
        }
        command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.url]
        for name, value in settings.items():
            command += ["--conf", f"{name}={value}"]
        environment = self.environment()
        environment.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        return subprocess.run(
            [*command, str(script), *arguments],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=environment,
            cwd=self.directory,
        )

    def stop(self) -> None:
        """Stop the workers (and with them their executors), then the master."""
        while self._processes:
            terminate_group(self._processes.pop(), STOP_TIMEOUT_S)

    def logs(self) -> str:
        """The tail of every log, for a failure message."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.directory.glob("*.log"))
        )

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _spawn_worker(self, host: str) -> tuple[Path, subprocess.Popen[bytes]]:
        log_path = self._spawn(
            f"worker-{host}",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            host,
            "--port",
            "0",
            "--webui-port",
            "0",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.directory / "work"),
            host=host,
        )
        return log_path, self._processes[-1]

    def _spawn(self, name: str, main_class: str, *arguments: str, host: str = "127.0.0.1") -> Path:
        log_path = self.directory / f"{name}.log"
        launcher = SPARK_HOME / "bin" / "spark-class"
        with open(log_path, "wb") as log:
            self._processes.append(
                subprocess.Popen(
                    [str(launcher), main_class, *arguments],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.environment(host),
                    cwd=self.directory,
                    start_new_session=True,
                )
            )
        return log_path

    def _wait_for(
        self, log_path: Path, pattern: re.Pattern[str], process: subprocess.Popen[bytes]
    ) -> re.Match[str]:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = pattern.search(log_path.read_text(errors="replace"))
            if found:
                return found
            if process.poll() is not None:
                raise RuntimeError(
                    f"{log_path.stem} exited with {process.returncode}: {self.logs()}"
                )
            time.sleep(0.1)
        raise TimeoutError(
            f"no {pattern.pattern!r} in {log_path} within {START_TIMEOUT_S:.0f} s: {self.logs()}"
        )
