"""Put latency at a fixed rate, open loop: ``run_open_latency``.

``meta.bench.load.run_latency`` sends each put only once the previous one is answered, so it
cannot offer more puts a second than one put's round trip allows, and a slow reply delays
the puts scheduled after it (their wait is not counted). Here the i-th put leaves at
``start + i / rate`` whether or not earlier ones are answered (one connection, pipelined), and
its latency runs from that scheduled time to its reply, so a broker that falls behind shows
it in the percentiles (no coordinated omission). Bounded: at most ``rate * duration_s`` puts,
and the replies are waited for at most ``REPLY_TIMEOUT_S`` after the last send.
"""

from __future__ import annotations

import selectors
import time

from meta.bench.load import REPLY_TIMEOUT_S, BenchError, PutFrames, connect, take_replies
from meta.protocol.codec import Decoder

RECEIVE_BYTES = 256 * 1024


def run_open_latency(
    address: tuple[str, int], frames: PutFrames, rate: float, duration_s: float
) -> dict:
    """Puts at ``rate`` a second for ``duration_s`` on one connection, open loop.

    Returns:
        ``messages``, ``seconds`` (from the start to the last send, plus one interval),
        ``target_rate``, ``msg_per_s`` (the rate the puts left at, below ``rate`` only when
        this process fell behind) and ``latencies_s`` (each put's time from its scheduled
        send to its reply, in opaque order).
    """
    total = max(1, int(rate * duration_s))
    scheduled: dict[int, float] = {}
    outstanding: set[int] = set()
    latencies: dict[int, float] = {}
    decoder = Decoder()
    sock = connect(address)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    start = time.monotonic() + 0.05
    give_up = start + duration_s + REPLY_TIMEOUT_S
    sent, last_send = 0, start
    try:
        while len(latencies) < total:
            now = time.monotonic()
            if now > give_up:
                raise BenchError(f"{total - len(latencies)} puts unanswered after the run")
            while sent < total and start + sent / rate <= now:
                sent += 1
                scheduled[sent] = start + (sent - 1) / rate
                outstanding.add(sent)
                sock.sendall(frames.header(sent) + frames.body)
                last_send = time.monotonic()
            wait = (start + sent / rate - now) if sent < total else give_up - now
            if selector.select(max(wait, 0.0)):  # readable: recv returns without waiting
                data = sock.recv(RECEIVE_BYTES)
                if not data:
                    raise BenchError("broker closed the connection")
                decoder.receive_data(data)
                arrived, before = time.monotonic(), set(outstanding)
                take_replies(decoder, outstanding)
                for opaque in before - outstanding:
                    latencies[opaque] = arrived - scheduled[opaque]
    finally:
        selector.close()
        sock.close()
    seconds = max(last_send - start + 1 / rate, 1e-9)  # the rate the puts really left at
    return {
        "messages": len(latencies),
        "seconds": seconds,
        "target_rate": rate,
        "msg_per_s": len(latencies) / seconds,
        "latencies_s": [latencies[opaque] for opaque in sorted(latencies)],
    }
