"""``escape_controls``, ``EscapingFormatter`` and ``PeerWarnings`` (a fake clock)."""

from __future__ import annotations

import logging
import sys

from meta.log_limits import EscapingFormatter, PeerWarnings, escape_controls

log = logging.getLogger("tests.log_limits")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_control_characters_are_written_as_hex_escapes():
    assert escape_controls("a\x1b[31mb\r\n\x00\x7f\x85é") == "a\\x1b[31mb\\x0d\\x0a\\x00\\x7f\\x85é"


def test_the_formatter_escapes_the_message_but_not_the_traceback():
    formatter = EscapingFormatter("%(message)s")
    try:
        raise ValueError("boom")
    except ValueError:
        record = log.makeRecord(
            log.name, logging.ERROR, "f", 1, "key %s", ("a\nb",), sys.exc_info()
        )
    text = formatter.format(record)
    assert text.startswith("key a\\x0ab\nTraceback")


def test_a_peer_gets_burst_warnings_per_window_then_a_count(caplog):
    clock = FakeClock()
    warnings = PeerWarnings(clock, burst=3, window_s=10)
    with caplog.at_level(logging.WARNING, logger=log.name):
        logged = [warnings.warn(log, "10.0.0.1", "bad %s", n) for n in range(7)]
        assert logged == [True, True, True, False, False, False, False]
        assert warnings.warn(log, "10.0.0.2", "bad %s", "other")
        clock.now = 10
        assert warnings.warn(log, "10.0.0.1", "bad %s", "again")
    messages = [record.getMessage() for record in caplog.records]
    assert messages[2] == "bad 2; further warnings from 10.0.0.1 are suppressed for 10 s"
    assert messages[-1] == "bad again (4 more warnings from 10.0.0.1 were suppressed before)"


def test_long_arguments_are_cut(caplog):
    warnings = PeerWarnings(FakeClock(), text_chars_max=10)
    with caplog.at_level(logging.WARNING, logger=log.name):
        warnings.warn(log, "h", "got %s", "x" * 100)
    assert caplog.records[0].getMessage() == "got xxxxxxxxxx... (90 more characters)"


def test_at_most_peers_max_hosts_are_remembered():
    warnings = PeerWarnings(FakeClock(), burst=1, peers_max=2)
    for host in ("a", "b", "c"):
        assert warnings.warn(log, host, "m")
    assert warnings.warn(log, "a", "m")  # forgotten, so a new window
    assert not warnings.warn(log, "c", "m")
