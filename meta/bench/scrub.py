"""What the background scrubber costs puts: the same broker with it on and off, in turns.

``python -m meta.bench.scrub`` starts a broker (threshold mode, ``unflushThreshold=1000``, so
that a put costs CPU rather than an fsync and CPU contention shows), fills its partition
with ``--fill-mib`` MiB of 1 KiB messages in segments of ``--segment-mib`` MiB, then runs
``--turns`` pairs of turns, each a restart of the broker on that data with
``scrubBytesPerSecond`` set to ``--rate`` or to 0, followed by ``--seconds`` of synchronous
puts (``meta.bench.load.run_sync``) and, in the same turn, puts paced at ``--latency-rate``
per second (``run_latency``) for their latency. The scrubber is checking the filled segments
during the "on" turns (at a high ``--rate`` it restarts its pass within them). The report
gives each turn's put rate and latency percentiles and the medians of on/off ratios.

Every loop is bounded by count and time, and the broker is always stopped. Figures belong in
docs/performance.md, dated; no test asserts them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from meta.bench.broker import BenchBroker
from meta.bench.load import PutFrames, run_latency, run_pipelined, run_sync

MESSAGE_BYTES = 1024
TOPIC = "bench-sync"


@dataclass
class ScrubBroker(BenchBroker):
    """A bench broker whose ``server.ini`` also sets ``scrubBytesPerSecond``."""

    scrub_bytes_per_s: int = 0

    def server_ini(self) -> str:
        text = super().server_ini()
        return text.replace(
            "[system]\n", f"[system]\nscrubBytesPerSecond={self.scrub_bytes_per_s}\n", 1
        )


def fill(directory: Path, fill_mib: int, segment_bytes: int) -> None:
    """Put ``fill_mib`` MiB of messages, pipelined, with the scrubber off."""
    frames = PutFrames(TOPIC, MESSAGE_BYTES)
    count = fill_mib * 1024 * 1024 // (MESSAGE_BYTES + 20)
    with ScrubBroker(directory, threshold=1000, segment_bytes=segment_bytes) as broker:
        done = run_pipelined(broker.address, frames, 600.0, count)
        if done["messages"] < count:
            raise RuntimeError(f"filled only {done['messages']} of {count} messages")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def turn(directory: Path, segment_bytes: int, rate: int, args: argparse.Namespace) -> dict:
    """One restart with ``scrubBytesPerSecond=rate``, then the two measurements."""
    frames = PutFrames(TOPIC, MESSAGE_BYTES)
    broker = ScrubBroker(
        directory, threshold=1000, segment_bytes=segment_bytes, scrub_bytes_per_s=rate
    )
    with broker:
        time.sleep(0.5)  # the scrubber's first piece starts at once; let it run
        sync = run_sync(broker.address, frames, args.seconds, 10_000_000)
        paced = run_latency(broker.address, frames, args.latency_rate, args.seconds)
    latencies = paced["latencies_s"]
    return {
        "scrub_bytes_per_s": rate,
        "sync_msg_per_s": sync["msg_per_s"],
        "latency_p50_ms": 1000 * percentile(latencies, 0.5),
        "latency_p99_ms": 1000 * percentile(latencies, 0.99),
    }


def measure(args: argparse.Namespace) -> dict:
    segment_bytes = args.segment_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="metaq-bench-scrub-") as work:
        directory = Path(work)
        fill(directory, args.fill_mib, segment_bytes)
        turns = []
        for _ in range(args.turns):
            turns.append(turn(directory, segment_bytes, args.rate, args))
            turns.append(turn(directory, segment_bytes, 0, args))
    pairs = list(zip(turns[0::2], turns[1::2], strict=True))
    return {
        "rate_bytes_per_s": args.rate,
        "turns": turns,
        "median_sync_rate_ratio_on_off": statistics.median(
            on["sync_msg_per_s"] / off["sync_msg_per_s"] for on, off in pairs
        ),
        "median_p99_ratio_on_off": statistics.median(
            on["latency_p99_ms"] / max(off["latency_p99_ms"], 1e-9) for on, off in pairs
        ),
    }


def format_report(report: dict) -> str:
    lines = [f"scrubBytesPerSecond={report['rate_bytes_per_s']} against 0, in turns:"]
    for row in report["turns"]:
        lines.append(
            f"  scrub {row['scrub_bytes_per_s']:>10}: {row['sync_msg_per_s']:8.0f} sync puts/s, "
            f"paced p50 {row['latency_p50_ms']:.2f} ms, p99 {row['latency_p99_ms']:.2f} ms"
        )
    lines.append(
        f"median on/off: sync rate x{report['median_sync_rate_ratio_on_off']:.2f}, "
        f"paced p99 x{report['median_p99_ratio_on_off']:.2f}"
    )
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m meta.bench.scrub", description=__doc__)
    parser.add_argument("--rate", type=int, default=4 * 1024 * 1024, help="scrub bytes/s")
    parser.add_argument("--fill-mib", type=int, default=64, help="data the scrubber checks")
    parser.add_argument("--segment-mib", type=int, default=16, help="segment size")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measurement")
    parser.add_argument("--latency-rate", type=float, default=200.0, help="paced puts per s")
    parser.add_argument("--turns", type=int, default=3, help="pairs of on/off turns")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    report = measure(args)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
