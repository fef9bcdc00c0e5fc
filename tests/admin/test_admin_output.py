"""Pure pieces of ``meta-admin``: tables, JSON, times, previews, progress bars, argument types
and the parsing of broker stats lines. No broker, no ZooKeeper."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from meta.admin.cluster import _topic_stats
from meta.admin.groups import ResetTarget, reset_target
from meta.admin.messages import message_id_argument, record_document, record_row
from meta.admin.options import zk_connect_argument, zk_root_argument
from meta.admin.output import (
    Progress,
    format_time_ms,
    key_values,
    parse_time,
    preview,
    table,
    to_json,
)
from meta.message_id import EPOCH_MS, IdWorker
from meta.protocol.message import HEADER_SIZE, Record, encode_payload

# --- tables and JSON -------------------------------------------------------------------------


def test_table_right_aligns_numbers_and_prints_none_as_dash():
    text = table(["TOPIC", "MAX_OFFSET", "NOTE"], [["a", 5, None], ["bbbb", 12345, "x"]])
    assert text.splitlines() == [
        "TOPIC  MAX_OFFSET  NOTE",
        "a               5  -",
        "bbbb        12345  x",
    ]


def test_a_column_of_dashes_alone_is_left_aligned_as_text():
    """ATTRIBUTE with no value in any row lines up as it does when one row has a value."""
    empty = table(["ATTRIBUTE", "SIZE"], [[None, 5], [None, 12]])
    some = table(["ATTRIBUTE", "SIZE"], [[None, 5], ["eu", 12]])
    assert empty.splitlines()[1] == "-             5"
    assert some.splitlines()[1] == "-             5"


def test_table_has_no_trailing_spaces_and_left_aligns_text():
    text = table(["A", "B"], [["x", "long text"], ["yy", None]])
    assert all(line == line.rstrip() for line in text.splitlines())
    assert text.splitlines()[1].startswith("x   ")


def test_table_prints_booleans_as_yes_and_no():
    assert table(["FLAG"], [[True], [False]]).splitlines()[1:] == ["yes", "no"]


def test_table_with_headers_only_is_the_header_line():
    assert table(["A", "B"], []) == "A  B"


def test_key_values_pads_names_to_one_width():
    assert key_values([("pid", "12"), ("broker_id", "1")]) == "pid        12\nbroker_id  1"


def test_json_keeps_the_key_order_it_was_given():
    text = to_json({"b": 1, "a": [None, True], "é": "ü"})
    assert list(json.loads(text)) == ["b", "a", "é"]
    assert '"é": "ü"' in text


# --- times -----------------------------------------------------------------------------------


def test_a_printed_time_parses_back_to_the_same_milliseconds():
    time_ms = 1_714_564_800_123
    text = format_time_ms(time_ms)
    assert text == "2024-05-01T12:00:00.123+00:00"
    assert parse_time(text) == time_ms


def test_parse_time_reads_z_dates_and_epoch_milliseconds():
    assert parse_time("2024-05-01T12:00:00Z") == 1_714_564_800_000
    assert parse_time("@1714564800000") == 1_714_564_800_000
    assert parse_time("2024-05-01") is not None


def test_parse_time_refuses_other_text():
    assert parse_time("yesterday") is None
    assert parse_time("@12a") is None


def test_reset_target_tells_offsets_times_and_keywords_apart():
    assert reset_target("earliest") == ResetTarget("earliest", text="earliest")
    assert reset_target("latest").kind == "latest"
    assert reset_target("1048576") == ResetTarget("offset", 1048576, "1048576")
    assert reset_target("1714564800000ms") == ResetTarget("time", 1714564800000, "1714564800000ms")
    assert reset_target("@1714564800000").value == 1714564800000
    assert reset_target("2024-05-01T12:00:00+00:00").value == 1714564800000


def test_reset_target_names_every_accepted_form_when_refusing():
    with pytest.raises(argparse.ArgumentTypeError, match="earliest, latest, a byte offset"):
        reset_target("soon")


# --- payload previews and records ------------------------------------------------------------


def test_preview_escapes_control_characters_and_cuts_long_text():
    assert preview(b"a\tb\nc") == "a\\tb\\nc"
    assert preview(b"x" * 100, 10) == "xxxxxxx..."


def test_preview_shows_binary_as_hex_escapes():
    assert preview(b"\x00\xffok\\") == "\\x00\\xffok\\x5c"


def test_record_document_decodes_the_attribute_and_the_time_in_the_id():
    msg_id = IdWorker(3, clock_ms=lambda: EPOCH_MS + 1000).next_id()
    payload, flag = encode_payload(b"body", "attr")
    document = record_document(Record(40, msg_id, flag, payload))
    assert document["attribute"] == "attr"
    assert document["data_text"] == "body"
    assert document["size"] == 4
    assert document["record_bytes"] == HEADER_SIZE + len(payload)
    assert document["time_ms"] == EPOCH_MS + 1000
    assert record_row(document)[-1] == "body"


def test_record_document_has_no_time_for_a_negative_java_id():
    document = record_document(Record(0, -6054433245132763136, 0, b"\xff"))
    assert document["time"] is None and document["data_text"] is None
    assert document["data_base64"] == "/w=="


# --- progress bars ---------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_nothing_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    with Progress("scanning", 10, stream=stream) as progress:
        progress.advance(5)
    assert stream.getvalue() == ""


def test_progress_draws_a_bar_on_a_terminal_and_erases_it():
    stream, now = FakeTerminal(), [0.0]
    with Progress("scanning", 10, stream=stream, clock=lambda: now[0]) as progress:
        progress.advance(5)
        progress.advance(1)  # within the redraw interval: not drawn
        now[0] = 1.0
        progress.advance(4)
    text = stream.getvalue()
    assert text.count("\r") == 3  # two draws and the erase
    assert "scanning [###############---------------]  50% 5/10" in text
    assert "100% 10/10" in text
    assert text.endswith("\r\x1b[K")


# --- argument types and stats lines ----------------------------------------------------------


def test_zk_connect_accepts_lists_and_a_chroot_and_refuses_a_missing_port():
    assert zk_connect_argument("a:1,b:2/chroot") == "a:1,b:2/chroot"
    with pytest.raises(argparse.ArgumentTypeError, match="HOST:PORT"):
        zk_connect_argument("localhost")


def test_zk_root_is_normalised_as_java_does():
    assert zk_root_argument("meta/") == "/meta"
    assert zk_root_argument("/") == "/"


def test_message_ids_may_be_negative_and_must_fit_64_bits():
    assert message_id_argument("-6054433245132763136") == -6054433245132763136
    with pytest.raises(argparse.ArgumentTypeError):
        message_id_argument(str(2**63))


def test_stats_topics_lines_become_documents():
    line = (
        "t partitions 2 message_count 5 message_bytes 300 accept_publish true "
        "accept_subscribe false"
    )
    assert _topic_stats(line) == {
        "topic": "t",
        "partitions": 2,
        "message_count": 5,
        "message_bytes": 300,
        "accept_publish": True,
        "accept_subscribe": False,
    }
    assert _topic_stats("idle *Empty*")["partitions"] == 0
