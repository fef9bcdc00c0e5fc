"""One put that wakes a great many long-polled gets neither waits for them nor stalls others.

A real broker process; 32 connections each hold 3,000 long-polled gets at the end of a
partition (96,000, just under the broker's ``DATA_WAITERS_MAX``), held for sure once each
connection's ``version`` sent after them is answered (``meta.bench.abuse.LongPollStorm``).
A victim connection times ``version`` round trips while one put wakes them all. The put
must be answered within ``PUT_S_MAX`` and no victim round trip may take longer than
``VICTIM_S_MAX`` until every woken get was answered: the broker answers them in slices
(``meta.server.long_poll``), serving other clients between slices. Both bounds are loose
(the machine running the tests may be busy); answering all the gets at once takes seconds.
"""

from __future__ import annotations

from meta.bench.abuse import LongPollStorm
from tests.integration.broker_process import BrokerProcess
from tests.integration.client_helpers import wait_for
from tests.integration.test_reply_budget import Victim

TOPIC = "storm"
CONNECTIONS = 32
POLLS = 3000
PUT_S_MAX = 0.5
VICTIM_S_MAX = 0.5


def test_a_put_waking_96000_long_polls_is_answered_promptly_and_others_are_served(tmp_path):
    broker = BrokerProcess(tmp_path, topics={TOPIC: {}}).start()
    try:
        storm = LongPollStorm(("127.0.0.1", broker.port), TOPIC, CONNECTIONS, POLLS)
        try:
            storm.hold()
            victim = Victim(broker)
            victim.start()
            try:
                began = len(victim.seconds)
                put_s = storm.wake()
                storm.drain()
                # The round trip under way when the last reply arrived counts too.
                first_after = len(victim.seconds)
                wait_for(lambda: len(victim.seconds) > first_after, what="one more round trip")
            finally:
                victim.stop.set()
                victim.join(30)
            assert victim.error is None, victim.error
            during = victim.seconds[began:]
        finally:
            storm.close()
        assert put_s < PUT_S_MAX, f"the put was answered after {put_s * 1000:.0f} ms"
        worst = max(during)
        assert worst < VICTIM_S_MAX, f"a victim's round trip took {worst * 1000:.0f} ms"
    finally:
        broker.stop()
