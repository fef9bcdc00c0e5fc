"""Sans-I/O decoder and encoder of the Metamorphosis text protocol (wire spec §1-§2).

``Decoder.receive_data(bytes)`` only buffers; ``Decoder.next_command()`` returns one frozen
command from ``meta.protocol.commands``, a ``BodyTooLarge`` event, or ``NEED_DATA``.
``encode(command)`` returns the exact bytes a Java peer sends. Broker, client, slave and the
Spark reader share this one codec.

Strategy: headers end at the first CR LF; tokens are split like Java's ``split(" ")``
(inner and leading empty tokens kept, trailing ones dropped). Dispatch looks at the first
character only, as the Java decoder does, so ``vxyz`` is a version request and any ``q...``
quits. A malformed command raises ``LocalProtocolError`` and leaves the decoder broken: the
caller must close the connection (Java sends nothing either).

Limits (constructor arguments, DECISIONS 8): a header line longer than
``header_bytes_max`` is a protocol error; a body longer than ``body_bytes_max`` yields
``BodyTooLarge`` and is discarded as it arrives, never buffered whole.

Invariants: the buffer never holds more than one partial header plus one partial body plus
the unread tail of what the caller fed in. Not thread-safe: one decoder per connection.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from meta.errors import LocalProtocolError
from meta.protocol.commands import (
    OPAQUE_DEFAULT,
    TRANSACTION_TYPES,
    BodyTooLarge,
    Command,
    Data,
    Get,
    Offset,
    Put,
    Quit,
    Result,
    Stats,
    Sync,
    Transaction,
    Version,
)
from meta.protocol.transaction_key import parse_transaction_key


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()
"""Returned by ``next_command`` when more bytes are needed."""

HEADER_BYTES_MAX = 4096
CRLF = b"\r\n"
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DIGITS = re.compile(r"[0-9]*")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# A parsed header: the command to return (or, with a body, a factory taking the body),
# the body length (None: no body), and the BodyTooLarge event to emit if it is too long.
_Header = tuple[Command | Callable[[bytes], Command], int | None, BodyTooLarge | None]


def _int(token: str, what: str, low: int = INT_MIN, high: int = INT_MAX) -> int:
    """Parse like Java ``Integer.parseInt`` / ``Long.parseLong``: sign, ASCII digits, range."""
    if _INTEGER.fullmatch(token) is None:
        raise LocalProtocolError(f"{what} is not a number: {token!r}")
    value = int(token)
    if not low <= value <= high:
        raise LocalProtocolError(f"{what} out of range: {token}")
    return value


def _long(token: str, what: str) -> int:
    return _int(token, what, LONG_MIN, LONG_MAX)


def _body_length(token: str) -> int:
    length = _int(token, "body length")
    if length < 0:
        raise LocalProtocolError(f"negative body length {length}")
    return length


def _split(line: str) -> list[str]:
    tokens = line.split(" ")
    while tokens and tokens[-1] == "":
        tokens.pop()
    if not tokens or not tokens[0]:
        raise LocalProtocolError("empty command")
    return tokens


def _parse_put(tokens: list[str]) -> _Header:
    count = len(tokens)
    if count not in (6, 7, 8):
        raise LocalProtocolError(f"put has {count} tokens; expected 6, 7 or 8")
    if tokens[0] != "put":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    topic = tokens[1]
    partition = _int(tokens[2], "partition")
    length = _body_length(tokens[3])
    flag = _int(tokens[4], "flag")
    checksum: int | None = None
    tx_key: str | None = None
    if count == 7:
        if not tokens[5]:
            raise LocalProtocolError("empty sixth token in put")
        if tokens[5][0].isdigit() or tokens[5][0] == "-":
            checksum = _int(tokens[5], "checksum")
        else:
            tx_key = tokens[5]
    elif count == 8:
        checksum = _int(tokens[5], "checksum")
        tx_key = tokens[6]
    if tx_key is not None:
        parse_transaction_key(tx_key)
    opaque = _int(tokens[-1], "opaque")

    def build(body: bytes) -> Put:
        return Put(topic, partition, body, flag, opaque, checksum, tx_key)

    return build, length, BodyTooLarge("put", length, opaque, topic, partition)


def _parse_sync(tokens: list[str]) -> _Header:
    count = len(tokens)
    if tokens[0] != "sync":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if count not in (7, 8):
        raise LocalProtocolError(f"sync has {count} tokens; expected 7 or 8")
    topic = tokens[1]
    partition = _int(tokens[2], "partition")
    length = _body_length(tokens[3])
    flag = _int(tokens[4], "flag")
    msg_id = _long(tokens[5], "message id")
    checksum = _int(tokens[6], "checksum") if count == 8 else None
    opaque = _int(tokens[-1], "opaque")

    def build(body: bytes) -> Sync:
        return Sync(topic, partition, body, flag, msg_id, opaque, checksum)

    return build, length, BodyTooLarge("sync", length, opaque, topic, partition)


def _parse_get(tokens: list[str]) -> _Header:
    if tokens[0] != "get":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if len(tokens) < 7:
        raise LocalProtocolError(f"get has {len(tokens)} tokens; expected 7")
    max_wait_ms = None
    # DECISIONS 16: one optional token after the opaque; Java ignores extra tokens, so an
    # extra token that is not a non-negative number is ignored here too.
    if len(tokens) > 7 and _DIGITS.fullmatch(tokens[7]) and tokens[7]:
        max_wait_ms = min(int(tokens[7]), INT_MAX)
    command = Get(
        tokens[1],
        tokens[2],
        _int(tokens[3], "partition"),
        _long(tokens[4], "offset"),
        _int(tokens[5], "max size"),
        _int(tokens[6], "opaque"),
        max_wait_ms,
    )
    return command, None, None


def _parse_offset(tokens: list[str]) -> _Header:
    if tokens[0] != "offset":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if len(tokens) < 6:
        raise LocalProtocolError(f"offset has {len(tokens)} tokens; expected 6")
    command = Offset(
        tokens[1],
        tokens[2],
        _int(tokens[3], "partition"),
        _long(tokens[4], "offset"),
        _int(tokens[5], "opaque"),
    )
    return command, None, None


def _parse_v(tokens: list[str]) -> _Header:
    if tokens[0] == "value":
        if len(tokens) < 3:
            raise LocalProtocolError(f"value has {len(tokens)} tokens; expected 3")
        length = _long(tokens[1], "value length")
        if length < 0:
            raise LocalProtocolError(f"negative value length {length}")
        opaque = _int(tokens[2], "opaque")
        return (lambda body: Data(body, opaque)), length, BodyTooLarge("value", length, opaque)
    opaque = _int(tokens[1], "opaque") if len(tokens) > 1 else OPAQUE_DEFAULT
    return Version(opaque), None, None


def _parse_s(tokens: list[str]) -> _Header:
    if tokens[0] != "stats":
        return _parse_sync(tokens)
    item = tokens[1] if len(tokens) > 1 else ""
    opaque = _int(tokens[2], "opaque") if len(tokens) > 2 else OPAQUE_DEFAULT
    return Stats(item, opaque), None, None


def _parse_result(tokens: list[str]) -> _Header:
    if tokens[0] != "result":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if len(tokens) < 4:
        raise LocalProtocolError(f"result has {len(tokens)} tokens; expected 4")
    code = _int(tokens[1], "result code")
    length = _body_length(tokens[2])
    opaque = _int(tokens[3], "opaque")
    return (lambda body: Result(code, body, opaque)), length, BodyTooLarge("result", length, opaque)


def _parse_transaction(tokens: list[str]) -> _Header:
    count = len(tokens)
    if tokens[0] != "transaction":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if count not in (5, 6, 7):
        raise LocalProtocolError(f"transaction has {count} tokens; expected 5, 6 or 7")
    tx_key, session_id, type_ = tokens[1], tokens[2], tokens[3]
    parse_transaction_key(tx_key)
    if type_ not in TRANSACTION_TYPES:
        raise LocalProtocolError(f"unknown transaction type {type_!r}")
    timeout = 0
    unique_qualifier = None
    if count == 7:
        timeout = _int(tokens[4], "transaction timeout")
        unique_qualifier = tokens[5]
    elif count == 6:
        # commons-lang isNumeric: digits only, and the empty string counts as numeric.
        if _DIGITS.fullmatch(tokens[4]):
            timeout = _int(tokens[4], "transaction timeout")
        else:
            unique_qualifier = tokens[4]
    opaque = _int(tokens[-1], "opaque")
    command = Transaction(tx_key, session_id, type_, opaque, timeout, unique_qualifier)
    return command, None, None


def _parse_quit(tokens: list[str]) -> _Header:
    return Quit(), None, None


def _parse_unknown(tokens: list[str]) -> _Header:
    raise LocalProtocolError(f"unknown command {tokens[0][:64]!r}")


_DISPATCH: dict[str, Callable[[list[str]], _Header]] = {
    "p": _parse_put,
    "g": _parse_get,
    "t": _parse_transaction,
    "r": _parse_result,
    "v": _parse_v,
    "s": _parse_s,
    "o": _parse_offset,
    "q": _parse_quit,
}


class Decoder:
    """Incremental decoder for one connection.

    Args:
        header_bytes_max: longest header line accepted (without CR LF).
        body_bytes_max: longest put/sync/result/value body accepted; longer bodies produce
            ``BodyTooLarge`` and are discarded.
    """

    def __init__(self, header_bytes_max: int = HEADER_BYTES_MAX, body_bytes_max: int = 2**31 - 1):
        assert header_bytes_max > 0
        assert body_bytes_max >= 0
        self.header_bytes_max = header_bytes_max
        self.body_bytes_max = body_bytes_max
        self._buffer = bytearray()
        self._position = 0
        self._skip_bytes = 0
        # A decoded header whose body has not fully arrived: (build, body length). The body
        # starts at ``self._position``.
        self._pending: tuple[Callable[[bytes], Command], int] | None = None
        self._error: LocalProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet consumed (for memory accounting and tests)."""
        return len(self._buffer) - self._position

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes from the peer; a body being skipped is dropped here, not buffered."""
        if self._skip_bytes and self._position == len(self._buffer):
            dropped = min(self._skip_bytes, len(data))
            self._skip_bytes -= dropped
            data = data[dropped:]
        if self._position:
            del self._buffer[: self._position]
            self._position = 0
        self._buffer += data

    def next_command(self) -> Command | BodyTooLarge | _NeedData:
        """Return the next complete command, a ``BodyTooLarge`` event, or ``NEED_DATA``.

        Raises:
            LocalProtocolError: the input is malformed; every later call raises it again.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except LocalProtocolError as error:
            self._error = error
            raise

    def _next(self) -> Command | BodyTooLarge | _NeedData:
        buffer = self._buffer
        if self._skip_bytes:
            dropped = min(self._skip_bytes, len(buffer) - self._position)
            self._skip_bytes -= dropped
            self._position += dropped
            if self._skip_bytes:
                return NEED_DATA
        if self._pending is not None:
            return self._take_body(*self._pending)
        end = buffer.find(CRLF, self._position)
        if end < 0:
            if len(buffer) - self._position > self.header_bytes_max:
                raise LocalProtocolError(f"header line longer than {self.header_bytes_max} bytes")
            return NEED_DATA
        if end - self._position > self.header_bytes_max:
            raise LocalProtocolError(f"header line longer than {self.header_bytes_max} bytes")
        try:
            line = buffer[self._position : end].decode("utf-8")
        except UnicodeDecodeError:
            raise LocalProtocolError("header line is not UTF-8") from None
        tokens = _split(line)
        command, length, too_large = _DISPATCH.get(tokens[0][0], _parse_unknown)(tokens)
        self._position = end + 2
        if length is None:
            return command
        if length > self.body_bytes_max:
            self._skip_bytes = length
            return self._next_skip(too_large)
        return self._take_body(command, length)

    def _next_skip(self, event: BodyTooLarge | None) -> BodyTooLarge:
        assert event is not None
        dropped = min(self._skip_bytes, len(self._buffer) - self._position)
        self._skip_bytes -= dropped
        self._position += dropped
        return event

    def _take_body(self, build: Callable[[bytes], Command], length: int) -> Command | _NeedData:
        start = self._position
        if len(self._buffer) - start < length:
            self._pending = (build, length)
            return NEED_DATA
        self._pending = None
        body = bytes(self._buffer[start : start + length])
        self._position = start + length
        return build(body)


def decode_all(data: bytes, **limits: int) -> list[Command | BodyTooLarge]:
    """Decode every complete command in ``data`` (a convenience for tests and tools)."""
    decoder = Decoder(**limits)
    decoder.receive_data(data)
    commands: list[Command | BodyTooLarge] = []
    while (command := decoder.next_command()) is not NEED_DATA:
        commands.append(command)
    return commands


# --- encoding ------------------------------------------------------------------------------


def encode_result(code: int, body: bytes, opaque: int) -> bytes:
    """``result <code> <len> <opaque>\\r\\n<body>`` (hot path for put replies)."""
    return b"result %d %d %d\r\n%s" % (code, len(body), opaque, body)


def encode_value_header(length: int, opaque: int) -> bytes:
    """The header of a value frame; the caller streams ``length`` body bytes after it."""
    return b"value %d %d\r\n" % (length, opaque)


def _encode_put(command: Put) -> bytes:
    fields = [command.topic, command.partition, len(command.data), command.flag]
    if command.checksum is not None:
        fields.append(command.checksum)
    if command.tx_key is not None:
        fields.append(command.tx_key)
    fields.append(command.opaque)
    return ("put " + " ".join(map(str, fields)) + "\r\n").encode() + command.data


def _encode_sync(command: Sync) -> bytes:
    fields = [command.topic, command.partition, len(command.data), command.flag, command.msg_id]
    if command.checksum is not None:
        fields.append(command.checksum)
    fields.append(command.opaque)
    return ("sync " + " ".join(map(str, fields)) + "\r\n").encode() + command.data


def _encode_get(command: Get) -> bytes:
    text = (
        f"get {command.topic} {command.group} {command.partition} {command.offset} "
        f"{command.max_size} {command.opaque}"
    )
    if command.max_wait_ms is not None:
        text += f" {command.max_wait_ms}"
    return (text + "\r\n").encode()


def _encode_transaction(command: Transaction) -> bytes:
    fields = [command.tx_key, command.session_id, command.type]
    qualifier = command.unique_qualifier or None
    # A qualifier that looks numeric would be read back as a timeout, so the timeout is
    # then written even when it is 0 ("none").
    if command.timeout or (qualifier is not None and _DIGITS.fullmatch(qualifier)):
        fields.append(str(command.timeout))
    if qualifier is not None:
        fields.append(qualifier)
    fields.append(str(command.opaque))
    return ("transaction " + " ".join(fields) + "\r\n").encode()


def encode(command: Command) -> bytes:
    """Encode a command or frame exactly as a Java peer would send it."""
    match command:
        case Put():
            return _encode_put(command)
        case Result(code, body, opaque):
            return encode_result(code, body, opaque)
        case Data(data, opaque):
            return encode_value_header(len(data), opaque) + data
        case Get():
            return _encode_get(command)
        case Offset(topic, group, partition, offset, opaque):
            return f"offset {topic} {group} {partition} {offset} {opaque}\r\n".encode()
        case Version(opaque):
            return f"version {opaque}\r\n".encode()
        case Stats(item, opaque):
            return f"stats {item} {opaque}\r\n".encode()
        case Quit():
            return b"quit\r\n"
        case Transaction():
            return _encode_transaction(command)
        case Sync():
            return _encode_sync(command)
    raise TypeError(f"cannot encode {command!r}")
