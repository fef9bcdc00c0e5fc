"""The pure parts of ``meta-admin produce`` and ``consume``: message sources, pacing, the
fixed-partition selector, the send loop against a fake producer, output formats and the
group listener. No broker, no ZooKeeper."""

from __future__ import annotations

import base64
import io
import json
from concurrent.futures import Future

import pytest

from meta.admin.client import AdminError, UsageError
from meta.admin.consume import GroupPrinter, Output, format_message
from meta.admin.produce import (
    FixedPartitionSelector,
    Pacer,
    SendFailedError,
    file_messages,
    line_messages,
    send_all,
)
from meta.client import Message, Partition, ReceivedMessage, SendResult
from meta.errors import ClientError, NoPartitionError, OperationTimeoutError

# --- sources ---------------------------------------------------------------------------------


def test_lines_lose_only_their_newline():
    stream = io.BytesIO(b"a\r\n\n\xff\xfe\nlast")
    assert list(line_messages(stream, 100)) == [b"a\r", b"", b"\xff\xfe", b"last"]


def test_a_line_longer_than_the_largest_message_is_named_by_its_number():
    stream = io.BytesIO(b"ok\n" + b"x" * 11 + b"\n")
    messages = line_messages(stream, 10)
    assert next(messages) == b"ok"
    with pytest.raises(UsageError, match="line 2 of stdin is longer than .* 10 bytes"):
        next(messages)


def test_a_line_of_exactly_the_largest_size_is_a_message():
    assert list(line_messages(io.BytesIO(b"x" * 10 + b"\n"), 10)) == [b"x" * 10]


def test_each_file_is_one_message_with_its_bytes_as_they_are(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    first.write_bytes(b"line 1\nline 2\n")
    second.write_bytes(b"\x00\xff")
    assert list(file_messages([str(first), str(second)], 100)) == [
        b"line 1\nline 2\n",
        b"\x00\xff",
    ]


def test_a_file_larger_than_the_largest_message_is_named(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 11)
    with pytest.raises(UsageError, match=f"file {path} is larger"):
        list(file_messages([str(path)], 10))


# --- pacing and selection --------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_pacer_spaces_calls_by_one_over_the_rate():
    fake = FakeTime()
    pacer = Pacer(4.0, fake.clock, fake.sleep)
    for _ in range(5):
        pacer.wait()
    assert fake.sleeps == [0.25] * 4
    assert fake.now == pytest.approx(101.0)


def test_the_pacer_does_not_make_up_for_a_slow_call_with_a_burst():
    fake = FakeTime()
    pacer = Pacer(2.0, fake.clock, fake.sleep)
    pacer.wait()
    fake.now += 1.2  # the send after the first call took longer than two intervals
    pacer.wait()
    pacer.wait()
    assert fake.sleeps == [pytest.approx(0.5)]  # the third still waits one interval


def test_no_rate_never_sleeps():
    fake = FakeTime()
    pacer = Pacer(None, fake.clock, fake.sleep)
    for _ in range(3):
        pacer.wait()
    assert fake.sleeps == []


def test_the_fixed_selector_chooses_its_partition():
    selector = FixedPartitionSelector(Partition(2, 1))
    partitions = [Partition(1, 0), Partition(2, 1)]
    assert selector.get_partition("t", partitions, Message("t", b"")) == Partition(2, 1)


def test_the_fixed_selector_refuses_a_partition_not_published_now():
    selector = FixedPartitionSelector(Partition(3, 0))
    with pytest.raises(NoPartitionError, match=r"partition 3-0 of topic t .*published: 1-0"):
        selector.get_partition("t", [Partition(1, 0)], Message("t", b""))


# --- the send loop ---------------------------------------------------------------------------


class FakeProducer:
    """Answers ``send_message_async`` from a list: a ``SendResult``, or an exception that
    fails the future. A future completes only when it is awaited: ``sent_before_first_wait``
    is how many puts the producer had sent when the first answer was read."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.sent: list[Message] = []
        self.sent_before_first_wait: int | None = None
        self.resent: list[Message] = []
        self.resent_answers: list = []

    def send_message_async(self, message: Message, timeout_s: float = 3.0) -> Future:
        self.sent.append(message)
        return AnsweredWhenAwaited(self, len(self.sent) - 1)

    def send_message(self, message: Message, timeout_s: float = 3.0) -> SendResult:
        """A resend: answered by ``resent_answers``, in order."""
        self.resent.append(message)
        answer = self.resent_answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class AnsweredWhenAwaited(Future):
    """The future of put ``index`` of a ``FakeProducer``, answered at its first ``result``."""

    def __init__(self, producer: FakeProducer, index: int) -> None:
        super().__init__()
        self.producer = producer
        self.index = index

    def result(self, timeout: float | None = None) -> SendResult:
        if not self.done():
            if self.producer.sent_before_first_wait is None:
                self.producer.sent_before_first_wait = len(self.producer.sent)
            answer = self.producer.answers[self.index]
            if isinstance(answer, Exception):
                self.set_exception(answer)
            else:
                self.set_result(answer)
        return super().result(timeout)


def ok(partition: str = "1-0") -> SendResult:
    return SendResult(True, Partition.parse(partition), 0, None, 1)


def test_send_all_counts_stored_messages_per_partition_with_the_attribute():
    producer = FakeProducer([ok("2-0"), ok("1-0"), ok("10-0"), ok("1-0")])
    sent: dict[str, int] = {}
    send_all(producer, "t", "eu", [b"a", b"b", b"c", b"d"], Pacer(None), sent)
    assert sent == {"1-0": 2, "2-0": 1, "10-0": 1}
    assert [(m.topic, m.data, m.attribute) for m in producer.sent] == [
        ("t", b"a", "eu"),
        ("t", b"b", "eu"),
        ("t", b"c", "eu"),
        ("t", b"d", "eu"),
    ]


def test_a_refused_send_stops_the_run_naming_the_message_and_the_reason():
    producer = FakeProducer([ok(), ok(), SendResult.failure("403"), ok()])
    sent: dict[str, int] = {}
    with pytest.raises(SendFailedError) as raised:
        send_all(producer, "t", None, [b"a", b"b", b"c", b"d"], Pacer(None), sent)
    assert sent == {"1-0": 2}
    text = str(raised.value)
    assert text.startswith("message 3 not sent: the broker refused it: 403")
    assert text.endswith("(2 message(s) sent, none after message 3)")
    assert raised.value.exit_status == 1
    assert len(producer.sent) == 3  # nothing after the refused one


def test_a_failed_send_stops_the_run_with_the_client_error():
    producer = FakeProducer([OperationTimeoutError("no reply to the put within 3.0 s")])
    with pytest.raises(SendFailedError, match="message 1 not sent: no reply to the put"):
        send_all(producer, "t", None, iter([b"a", b"b"]), Pacer(None), {})


def test_a_window_keeps_that_many_puts_in_flight_before_the_first_answer_is_read():
    """Goal: with ``window=W`` the loop sends W puts before it reads any answer, then one
    more per answer, and the partitions get them in the order read. Method: a producer
    whose answers exist only once awaited, counting its puts at the first wait."""
    producer = FakeProducer([ok("1-0") for _ in range(10)])
    sent: dict[str, int] = {}
    messages = [b"%d" % n for n in range(10)]
    send_all(producer, "t", None, messages, Pacer(None), sent, window=4)
    assert producer.sent_before_first_wait == 4
    assert [m.data for m in producer.sent] == messages
    assert sent == {"1-0": 10}


def test_a_put_whose_broker_failed_in_flight_is_sent_again_when_the_producer_chooses():
    """Goal: with ``resend`` (no ``--partition``), a put failed by its broker in flight is
    sent again through ``send_message`` (which avoids that broker) and counted where it
    went; a refused put is not sent again; a resend that fails too is reported. Method: a
    window of four, put 2 lost with its connection, put 3 refused, put 4 timed out and its
    resend failing as well."""
    answers = [ok(), ClientError("connection to 127.0.0.1:1 lost"), SendResult.failure("500 x")]
    answers += [OperationTimeoutError("no reply to the put within 3.0 s")]
    producer = FakeProducer(answers)
    producer.resent_answers = [ok("2-0"), ClientError("no broker left")]
    sent: dict[str, int] = {}
    with pytest.raises(SendFailedError) as raised:
        send_all(producer, "t", None, [b"1", b"2", b"3", b"4"], Pacer(None), sent, 4, True)
    assert [m.data for m in producer.resent] == [b"2", b"4"]
    assert sent == {"1-0": 1, "2-0": 1}
    assert str(raised.value) == (
        "message 3 not sent: the broker refused it: 500 x; "
        "message 4 not sent: no broker left (2 message(s) sent, none after message 4)"
    )


def test_without_resend_a_put_whose_broker_failed_is_a_failure():
    producer = FakeProducer([ClientError("connection to 127.0.0.1:1 lost")])
    with pytest.raises(SendFailedError, match="message 1 not sent: connection to"):
        send_all(producer, "t", None, [b"1"], Pacer(None), {}, 4, False)
    assert producer.resent == []


def test_window_one_reads_each_answer_before_the_next_send():
    producer = FakeProducer([ok(), ok()])
    send_all(producer, "t", None, [b"a", b"b"], Pacer(None), {}, window=1)
    assert producer.sent_before_first_wait == 1


def test_a_failure_in_the_middle_of_a_window_names_its_line_and_awaits_the_rest():
    """Goal: when put 5 of a window of 4 fails, the error names message 5 (not the one read
    when it was noticed), every put already in flight is still awaited and counted, and
    nothing more is sent. Method: ten lines, answer 5 refused, answer 7 a client error."""
    answers = [ok(), ok(), ok(), ok(), SendResult.failure("500 disk"), ok()]
    answers += [OperationTimeoutError("no reply to the put within 3.0 s"), ok(), ok(), ok()]
    producer = FakeProducer(answers)
    sent: dict[str, int] = {}
    messages = [b"%d" % n for n in range(1, 11)]
    with pytest.raises(SendFailedError) as raised:
        send_all(producer, "t", None, messages, Pacer(None), sent, window=4)
    # When answer 5 is read, puts 6, 7 and 8 are in flight: awaited, 7 failed, 6 and 8 stored.
    assert len(producer.sent) == 8
    assert sent == {"1-0": 6}
    assert str(raised.value) == (
        "message 5 not sent: the broker refused it: 500 disk; "
        "message 7 not sent: no reply to the put within 3.0 s "
        "(6 message(s) sent, none after message 8)"
    )


def test_a_refused_line_still_counts_every_put_in_flight():
    """Goal: when the source refuses a line mid-window, the puts already sent are awaited and
    counted before the error reaches the caller. Method: a source that raises after three."""

    def source():
        yield from (b"a", b"b", b"c")
        raise UsageError("line 4 of stdin is longer than the largest message, 10 bytes")

    producer = FakeProducer([ok(), ok(), ok()])
    sent: dict[str, int] = {}
    with pytest.raises(UsageError, match="line 4"):
        send_all(producer, "t", None, source(), Pacer(None), sent, window=8)
    assert sent == {"1-0": 3}


# --- output ----------------------------------------------------------------------------------


def received(data: bytes, attribute: str | None = None) -> Message:
    return Message("t", data, attribute, None, 42, Partition(1, 0), 99)


def test_text_is_the_payload_as_it_is_plus_a_newline():
    assert format_message(received(b"\xff\r\x00"), "text") == b"\xff\r\x00\n"


def test_hex_is_the_payload_in_hex():
    assert format_message(received(b"\x00\xabA"), "hex") == b"00ab41\n"


def test_json_gives_utf8_payloads_as_text():
    line = format_message(received("héllo".encode(), "eu"), "json")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "topic": "t",
        "partition": "1-0",
        "offset": 99,
        "msg_id": 42,
        "attribute": "eu",
        "payload": "héllo",
        "payload_encoding": "utf-8",
    }


def test_json_gives_other_payloads_as_base64_and_says_so():
    document = json.loads(format_message(received(b"\xff\x00"), "json"))
    assert document["payload_encoding"] == "base64"
    assert base64.b64decode(document["payload"]) == b"\xff\x00"
    assert document["attribute"] is None


def test_output_stops_at_its_limit():
    stream = io.BytesIO()
    output = Output(stream, "text", 2)
    output.write(received(b"a"))
    assert not output.full
    output.write(received(b"b"))
    assert output.full and output.count == 2
    assert stream.getvalue() == b"a\nb\n"


class BrokenStream(io.BytesIO):
    def write(self, data) -> int:
        raise BrokenPipeError(32, "Broken pipe")


class FullStream(io.BytesIO):
    def write(self, data) -> int:
        raise OSError(28, "No space left on device")


def test_a_failed_write_is_an_admin_error_and_not_counted():
    output = Output(FullStream(), "text", None)
    with pytest.raises(AdminError, match="cannot write to stdout: No space left on device"):
        output.write(received(b"a"))
    assert output.count == 0


def test_a_closed_pipe_is_told_apart_from_other_write_errors_and_not_counted():
    output = Output(BrokenStream(), "text", None)
    with pytest.raises(BrokenPipeError):
        output.write(received(b"a"))
    assert output.count == 0


# --- the group listener ----------------------------------------------------------------------


def delivered(data: bytes) -> ReceivedMessage:
    return ReceivedMessage("t", data, None, None, 1, Partition(1, 0), 0)


def test_the_group_printer_prints_up_to_the_limit_and_fails_the_rest():
    stream = io.BytesIO()
    printer = GroupPrinter(Output(stream, "text", 2))
    messages = [delivered(b"a"), delivered(b"b"), delivered(b"c")]
    for message in messages:
        printer(message)
    assert stream.getvalue() == b"a\nb\n"
    assert [m.rollback_only for m in messages] == [False, False, True]
    assert printer.finished.is_set()


def test_the_group_printer_prints_nothing_after_stop():
    stream = io.BytesIO()
    printer = GroupPrinter(Output(stream, "text", None))
    printer.stop()
    message = delivered(b"a")
    printer(message)
    assert stream.getvalue() == b""
    assert message.rollback_only
    assert not printer.finished.is_set()


@pytest.mark.parametrize(
    ("stream", "error"), [(FullStream, AdminError), (BrokenStream, BrokenPipeError)]
)
def test_the_group_printer_fails_a_message_it_could_not_write_and_keeps_the_error(stream, error):
    printer = GroupPrinter(Output(stream(), "text", None))
    first, second = delivered(b"a"), delivered(b"b")
    printer(first)
    printer(second)
    assert first.rollback_only and second.rollback_only
    assert printer.finished.is_set()
    assert isinstance(printer.error, error)


# --- options ---------------------------------------------------------------------------------


def test_consume_starts_from_the_beginning_by_default():
    from meta.admin.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["consume", "t"]).from_end is False
    assert parser.parse_args(["consume", "t", "--from-end"]).from_end is True
    assert parser.parse_args(["consume", "t", "--from-beginning"]).from_end is False
