"""What the dashboard costs the broker: ``python -m meta.bench.dashboard [--json]``.

Two measurements on a broker process started here (``meta.bench.broker.BenchBroker``,
group commit, ZooKeeper off):

* **scrape**: the broker's CPU time (``/proc/<pid>/stat``) per ``GET /metrics`` of a broker
  holding ``--partitions`` partitions (1,000 by default, one message each), over
  ``--scrapes`` scrapes. Target: at most 20 ms.
* **turns**: pipelined puts (``meta.bench.run_pipelined``) for ``--seconds`` alone, then as
  long with a scraper fetching ``/metrics`` every second and a browser-like client fetching
  ``/topics`` every 2 s, in ``--turns`` alternating turns on the same broker (a shared
  machine's speed moves too much between separate runs). Target: the rate with the
  dashboard's clients is at least 95% of the rate without them (medians of the turns).

The HTTP clients run in this process's threads, the producer in the main thread.
``tools/bench`` runs the same measurements as its ``dashboard`` scenario (``bench_row``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from meta.bench.broker import BenchBroker, report_in_work_directory
from meta.bench.load import PutFrames, run_pipelined

SERVING = re.compile(r"dashboard serving http://([^/]+)/")
SCRAPE_TARGET_S = 0.020
RATE_TARGET = 0.95
TOPIC = "bench-pipelined"
SCRAPE_TOPIC = "bench-scrape"


def dashboard_url(broker: BenchBroker, timeout_s: float = 30.0) -> str:
    """``http://host:port`` from the broker's "dashboard serving" log line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = SERVING.search(broker.log_tail(100_000))
        if found:
            return f"http://{found.group(1)}"
        time.sleep(0.05)
    raise RuntimeError(f"the broker logged no dashboard address:\n{broker.log_tail()}")


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def fill_partitions(broker: BenchBroker, partitions: int) -> None:
    """One message in each partition of ``SCRAPE_TOPIC``."""
    for partition in range(partitions):
        frames = PutFrames(SCRAPE_TOPIC, 100, partition)
        result = run_pipelined(broker.address, frames, 30.0, 1, window=1)
        assert result["messages"] == 1


def measure_scrape(broker: BenchBroker, url: str, scrapes: int) -> dict:
    fetch(f"{url}/metrics")  # warm up
    cpu_before = broker.cpu_seconds()
    start = time.monotonic()
    for _ in range(scrapes):
        size = len(fetch(f"{url}/metrics"))
    cpu_s = broker.cpu_seconds() - cpu_before
    return {
        "scrapes": scrapes,
        "broker_cpu_ms_per_scrape": cpu_s / scrapes * 1000,
        "wall_ms_per_scrape": (time.monotonic() - start) / scrapes * 1000,
        "bytes_per_scrape": size,
        "target_ms": SCRAPE_TARGET_S * 1000,
    }


class Pollers:
    """A scraper (``/metrics`` every 1 s) and a browser (``/topics`` every 2 s) in threads."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.requests = 0
        self._threads = [
            threading.Thread(target=self._poll, args=("/metrics", 1.0), daemon=True),
            threading.Thread(target=self._poll, args=("/topics", 2.0), daemon=True),
        ]

    def __enter__(self) -> Pollers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _poll(self, path: str, interval_s: float) -> None:
        while not self._stop.is_set():
            fetch(self._url + path)
            self.requests += 1
            self._stop.wait(interval_s)


def measure_turns(broker: BenchBroker, url: str, turns: int, seconds: float) -> dict:
    frames = PutFrames(TOPIC, 128)
    alone, polled, polled_messages, polled_seconds = [], [], 0, 0.0
    for _ in range(turns):
        alone.append(run_pipelined(broker.address, frames, seconds, 10**9)["msg_per_s"])
        with Pollers(url):
            result = run_pipelined(broker.address, frames, seconds, 10**9)
        polled.append(result["msg_per_s"])
        polled_messages += result["messages"]
        polled_seconds += result["seconds"]
    ratio = statistics.median(polled) / statistics.median(alone)
    return {
        "alone_msg_per_s": alone,
        "polled_msg_per_s": polled,
        "ratio": ratio,
        "polled_messages": polled_messages,
        "polled_seconds": polled_seconds,
    }


def run(args: argparse.Namespace, work: Path) -> dict:
    topics = {TOPIC: 1, SCRAPE_TOPIC: args.partitions}
    with BenchBroker(work / "broker", threshold=0, topics=topics) as broker:
        url = dashboard_url(broker)
        fill_partitions(broker, args.partitions)
        scrape = measure_scrape(broker, url, args.scrapes)
        turns = measure_turns(broker, url, args.turns, args.seconds)
    return {"partitions": args.partitions, "scrape": scrape, "turns": turns}


def bench_row(report: dict) -> dict:
    """``tools/bench``'s ``dashboard`` row from ``run``'s report: the puts made with the
    pollers (messages, seconds, the median rate), the median rate alone, and the scrape."""
    scrape, turns = report["scrape"], report["turns"]
    return {
        "messages": turns["polled_messages"],
        "seconds": turns["polled_seconds"],
        "msg_per_s": statistics.median(turns["polled_msg_per_s"]),
        "alone_msg_per_s": statistics.median(turns["alone_msg_per_s"]),
        "polled_ratio": turns["ratio"],
        "partitions": report["partitions"],
        "scrapes": scrape["scrapes"],
        "scrape_cpu_ms": scrape["broker_cpu_ms_per_scrape"],
        "scrape_wall_ms": scrape["wall_ms_per_scrape"],
        "scrape_bytes": scrape["bytes_per_scrape"],
    }


def format_report(report: dict) -> str:
    scrape, turns = report["scrape"], report["turns"]
    return "\n".join(
        [
            f"scrape of {report['partitions']} partitions: "
            f"{scrape['broker_cpu_ms_per_scrape']:.2f} ms broker CPU "
            f"(target <= {scrape['target_ms']:.0f} ms), {scrape['wall_ms_per_scrape']:.2f} ms "
            f"wall, {scrape['bytes_per_scrape']} bytes",
            "pipelined puts alone:      "
            + ", ".join(f"{rate:,.0f}" for rate in turns["alone_msg_per_s"])
            + " msg/s",
            "with /metrics and /topics: "
            + ", ".join(f"{rate:,.0f}" for rate in turns["polled_msg_per_s"])
            + " msg/s",
            f"ratio of medians: {turns['ratio']:.3f} (target >= {RATE_TARGET})",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meta.bench.dashboard", description=__doc__)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=100)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return report_in_work_directory(parser.parse_args(argv), "metaq-dash-", run, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
