"""Sans-I/O decoder and encoder of the Metamorphosis text protocol.

``Decoder.receive_data(bytes)`` only buffers; ``Decoder.next_command()`` returns one frozen
command from ``meta.protocol.commands``, a ``BodyTooLarge`` event, or ``NEED_DATA``.
``encode(command)`` (``meta.protocol.encoding``, re-exported here) returns the exact bytes a
Java peer sends. Broker, client, slave and the Spark reader share this one codec.

Strategy: headers end at the first CR LF; tokens are split like Java's ``split(" ")``
(inner and leading empty tokens kept, trailing ones dropped). Dispatch looks at the first
character only, as the Java decoder does, so ``vxyz`` is a version request and any ``q...``
quits. A malformed command raises ``LocalProtocolError`` and leaves the decoder broken: the
caller must close the connection (Java sends nothing either).

Limits (constructor arguments, docs/compatibility.md): a header line longer than
``header_bytes_max`` is a protocol error; a body longer than ``body_bytes_max`` yields
``BodyTooLarge`` and is discarded as it arrives, never buffered whole.

Large bodies (the client's ``value`` replies, up to a fetch size of MiBs): once a header
announcing a body of at least ``BODY_PARTS_BYTES_MIN`` bytes is decoded and the body is not
all buffered, the body is no longer appended to the buffer: ``receive_data`` keeps the
caller's chunks themselves (``bytes`` objects are immutable, so no copy; small chunks and
other buffer types are copied into a ``bytearray`` part) until the announced length is in,
and the body is built with one ``b"".join``. So each body byte is copied once after the
socket read instead of three times (into the buffer, a ``bytearray`` slice, ``bytes``), and
the decoder allocates one body-sized block per frame (fresh pages cost page faults: they,
not the copies, dominated the slave's replay profile). With ``value_in_place`` (the slave's
connections) a large ``value`` body is instead received into one ``bytearray`` of its
announced length, which the ``Data`` carries: ``body_space`` gives the caller its unfilled
rest to ``recv_into`` directly (then ``body_received``), so no byte is copied after the
kernel's copy (fed chunks are copied into it once). The decoder keeps the last
``IN_PLACE_BLOCKS_KEPT`` such blocks and reuses one of the same length once nothing else
references it (``in_place.BlockPool``): a body handed out is never overwritten while anyone
can still read it, and a steady replay allocates (and page-faults) no fresh memory.

Invariants: the decoder never holds more than one partial header plus one partial body plus
the unread tail of what the caller fed in. Not thread-safe: one decoder per connection.
"""

from __future__ import annotations

from collections.abc import Callable
from re import Match
from typing import Any, cast

from meta.errors import LocalProtocolError
from meta.protocol.commands import (
    LONG_MAX,
    TRANSACTION_TYPES,
    BodyTooLarge,
    Command,
    Put,
    Result,
    Transaction,
)
from meta.protocol.encoding import encode, encode_result, encode_value_header
from meta.protocol.headers import INT_MAX, INT_MIN, LONG_MIN, parse_header, split_header
from meta.protocol.in_place import BlockPool
from meta.protocol.patterns import (
    FAST_PUT,
    FAST_RESULT,
    FAST_TRANSACTION,
    PUT_RUN,
    RESULT_RUN,
    SYNC_RUN,
)
from meta.protocol.transaction_key import CANONICAL_LOCAL_KEY_BYTES, parse_transaction_key

__all__ = [
    "BODY_PARTS_BYTES_MIN",
    "HEADER_BYTES_MAX",
    "NEED_DATA",
    "Decoder",
    "PutFields",
    "SyncFields",
    "decode_all",
    "encode",
    "encode_result",
    "encode_value_header",
]


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedData()
"""Returned by ``next_command`` when more bytes are needed."""

HEADER_BYTES_MAX = 4096
BODY_PARTS_BYTES_MIN = 64 * 1024
"""A pending body at least this long is collected as the caller's chunks (see above)."""
PART_BYTES_MIN = 16 * 1024
"""A ``bytes`` chunk at least this long is kept as a body part as it is; a shorter one is
copied into a ``bytearray`` part (bounds the per-part overhead of byte-at-a-time input)."""
IN_PLACE_BLOCKS_KEPT = 8
"""In-place value bodies kept for reuse (a slave holds about four at once)."""
CRLF = b"\r\n"

Chunk = bytes | bytearray | memoryview
"""What ``Decoder.receive_data`` takes: a chunk of the peer's bytes."""

PutFields = tuple[bytes, bytes, int, int | None, bytes, bytes | bytearray]
"""One put of a run: topic, partition and opaque as their (canonical) header bytes, flag,
checksum (None when absent) and the body (the decoder's are ``bytearray``, an HTTP put's
``bytes``)."""

SyncFields = tuple[bytes, bytes, int, int | None, bytes, bytes | bytearray, int]
"""One sync of a run: ``PutFields``' layout (topic, partition, flag, checksum, opaque, body),
then the master's message id."""


def _sync_fields(
    found: Match[bytes], buffer: bytes | bytearray, available: int, body_max: int
) -> SyncFields | None:
    """The ``SyncFields`` of one ``patterns.SYNC_RUN`` match ``found`` in ``buffer`` (whose
    first ``available`` bytes are received), or None when its body is not all there, is
    larger than ``body_max``, or a field is out of the range ``next_command`` takes (a
    checksum beyond an int, an id beyond a long): ``next_command`` then decides.

    The one rule of a sync taken without a ``Sync`` object (``Decoder.next_sync_run``,
    ``Decoder.one_sync``): every field equals what ``next_command`` would have put in it.
    """
    topic, partition, length, flag, msg_id, checksum, opaque = found.groups()
    body_start = found.end()
    body_end = body_start + int(length)
    if body_end > available or body_end - body_start > body_max:
        return None
    if checksum is not None:
        checksum = int(checksum)
        if not INT_MIN <= checksum <= INT_MAX:
            return None
    msg_id = int(msg_id)
    if not LONG_MIN <= msg_id <= LONG_MAX:
        return None
    return (topic, partition, int(flag), checksum, opaque, buffer[body_start:body_end], msg_id)


class Decoder:
    """Incremental decoder for one connection.

    Args:
        header_bytes_max: longest header line accepted (without CR LF).
        body_bytes_max: longest put/sync/result/value body accepted; longer bodies produce
            ``BodyTooLarge`` and are discarded.
        value_in_place: a ``value`` body of at least ``BODY_PARTS_BYTES_MIN`` bytes is a
            ``bytearray``, received in place (``body_space``); otherwise bodies are ``bytes``.
    """

    def __init__(
        self,
        header_bytes_max: int = HEADER_BYTES_MAX,
        body_bytes_max: int = 2**31 - 1,
        value_in_place: bool = False,
    ):
        assert header_bytes_max > 0
        assert body_bytes_max >= 0
        self.header_bytes_max = header_bytes_max
        self.body_bytes_max = body_bytes_max
        self.value_in_place = value_in_place
        self._in_place = False  # the pending body is a value body received in place
        self._blocks = BlockPool(IN_PLACE_BLOCKS_KEPT)  # in-place bodies handed out
        self._buffer = bytearray()
        self._position = 0
        self._skip_bytes = 0
        self._skip_length = 0  # the whole length of the body being skipped
        # A decoded header whose body has not fully arrived: (build, body length). The body
        # starts at ``self._position``.
        self._pending: tuple[Callable[[bytes], Command], int] | None = None
        self._error: LocalProtocolError | None = None
        # The pending body's parts while collected outside the buffer (None otherwise; in
        # place: one part of the body's length), and how many of its bytes are still to come.
        self._body_parts: list[bytes | bytearray] | None = None
        self._body_missing = 0
        self._last_key_bytes = b""
        self._last_key = ""

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet consumed (for memory accounting and tests)."""
        buffered = len(self._buffer) - self._position
        if self._body_parts is not None:
            assert self._pending is not None
            buffered += self._pending[1] - self._body_missing
        return buffered

    @property
    def pending_header_bytes(self) -> int:
        """Bytes of a header line received but not complete yet (0 while a body is due)."""
        if self._pending is not None or self._skip_bytes or self._error is not None:
            return 0
        return len(self._buffer) - self._position

    @property
    def pending_body(self) -> tuple[int, int]:
        """``(received, length)`` of the request body that is due (collected, or skipped as
        too large), else ``(0, 0)``: what the body deadline of ``meta.server.connections``
        reads. ``received`` may reach ``length`` before the command is taken."""
        pending = self._pending
        if pending is not None:
            return self.buffered_bytes, pending[1]
        if self._skip_bytes:
            return self._skip_length - self._skip_bytes, self._skip_length
        return 0, 0

    def receive_data(self, data: Chunk) -> None:
        """Buffer a chunk of the peer's bytes (``bytes``, ``bytearray`` or ``memoryview``); a
        body being skipped is dropped here, not buffered."""
        missing = self._body_missing
        if missing:  # a large body is being collected: keep the chunk itself
            if len(data) <= missing:
                self._add_part(data)
                self._body_missing = missing - len(data)
                return
            self._add_part(data[:missing])
            self._body_missing = 0
            data = data[missing:]
        if self._skip_bytes and self._position == len(self._buffer):
            dropped = min(self._skip_bytes, len(data))
            self._skip_bytes -= dropped
            data = data[dropped:]
        if self._position:
            del self._buffer[: self._position]
            self._position = 0
        self._buffer += data

    def body_space(self) -> memoryview | None:
        """The unfilled rest of a value body being received in place, else None.

        The caller may ``recv_into`` it and must then call ``body_received``.
        """
        if not (self._in_place and self._body_missing):
            return None
        assert self._body_parts is not None and self._pending is not None
        return memoryview(self._body_parts[0])[self._pending[1] - self._body_missing :]

    def body_received(self, count: int) -> None:
        """``count`` bytes were written at the start of ``body_space()``."""
        assert 0 < count <= self._body_missing and self._in_place
        self._body_missing -= count

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
        first = buffer[self._position]
        if first == 0x70:  # "p": the broker's hot path gets a lean parser
            put = self._fast_put(end)
            if put is not None:
                return put
        elif first == 0x72:  # "r": the client's hot path, likewise
            result = self._fast_result(end)
            if result is not None:
                return result
        elif first == 0x74:  # "t": a transaction's BEGIN and COMMIT, likewise
            transaction = self._fast_transaction(end)
            if transaction is not None:
                return transaction
        try:
            line = buffer[self._position : end].decode("utf-8")
        except UnicodeDecodeError:
            raise LocalProtocolError("header line is not UTF-8") from None
        tokens = split_header(line)
        command, length, too_large = parse_header(tokens)
        self._position = end + 2
        if length is None:  # a command without a body: parse_header built it
            return cast(Command, command)
        if length > self.body_bytes_max:
            self._skip_bytes = self._skip_length = length
            return self._next_skip(too_large)
        self._in_place = self.value_in_place and tokens[0] == "value"
        return self._take_body(cast(Callable[[bytes], Command], command), length)

    def _fast_transaction(self, end: int) -> Transaction | None:
        """The common ``transaction`` forms (5 tokens, or 6 with a timeout) in printable
        ASCII, with a key that parses and a known type; None leaves it to the general parser
        (which gives the same command, or the error)."""
        match = FAST_TRANSACTION.fullmatch(self._buffer, self._position, end)
        if match is None:
            return None
        key, session_id, type_, timeout, opaque = match.groups()
        key = self._checked_key(key)
        type_ = type_.decode("ascii")
        if key is None or type_ not in TRANSACTION_TYPES:
            return None
        self._position = end + 2
        timeout = 0 if timeout is None else int(timeout)
        return Transaction(key, session_id.decode("ascii"), type_, int(opaque), timeout)

    def _fast_put(self, end: int) -> Command | BodyTooLarge | _NeedData | None:
        """Decode the common put forms (6 tokens, 7 with a checksum or a ``TX:``/``XID:`` key,
        8 with both) with one regex.

        Returns None for anything unusual (a ``null`` key, a ``+`` sign, an empty token, an
        out-of-range number), which the general parser then handles or refuses.
        """
        match = FAST_PUT.fullmatch(self._buffer, self._position, end)
        if match is None:
            return None
        topic, partition, length, flag, checksum, tx_key, opaque = match.groups()
        if tx_key is not None:
            tx_key = self._checked_key(tx_key)
            if tx_key is None:
                return None
        partition = int(partition)
        length = int(length)
        flag = int(flag)
        opaque = int(opaque)
        checksum = int(checksum) if checksum is not None else None
        if not (
            INT_MIN <= partition <= INT_MAX
            and length <= INT_MAX
            and INT_MIN <= flag <= INT_MAX
            and INT_MIN <= opaque <= INT_MAX
            and (checksum is None or INT_MIN <= checksum <= INT_MAX)
        ):
            return None
        try:
            topic = topic.decode("utf-8")
        except UnicodeDecodeError:
            return None
        body_start = end + 2
        if length > self.body_bytes_max:
            self._position = body_start
            self._skip_bytes = self._skip_length = length
            return self._next_skip(BodyTooLarge("put", length, opaque, topic, partition))
        body_end = body_start + length
        if len(self._buffer) < body_end:
            return None  # let the general path park the header until the body is in
        self._position = body_end
        body = bytes(self._buffer[body_start:body_end])
        return Put(topic, partition, body, flag, opaque, checksum, tx_key)

    def _run_starts(self, verb: bytes) -> bool:
        """Whether a run of ``verb`` commands may be taken now: the decoder is healthy, skips
        no body, parks no header, and the buffer's next command starts with ``verb``."""
        return (
            self._error is None
            and not self._skip_bytes
            and self._pending is None
            and self._buffer.startswith(verb, self._position)
        )

    def next_put_run(self, limit: int) -> tuple[str | None, list[PutFields]]:
        """Decode up to ``limit`` consecutive puts from the head of the buffer, at once: plain
        puts, or puts of one transaction (the same key, byte for byte).

        The broker's batch fast path: one regex match per header and no command objects. A
        put is taken only in the forms ``patterns.PUT_RUN`` accepts (6 tokens, 7 with a numeric
        checksum or a key that parses, 8 with both) with its whole body buffered and within
        ``body_bytes_max``; the run stops before anything else, which ``next_command`` then
        decodes (or refuses) as usual. Every field equals what ``next_command`` would have put
        in the ``Put``: ``int(partition)``, ``int(opaque)``, ``topic.decode()`` and
        ``bytes(body)`` give it back.

        Returns:
            ``(key, puts)``: the transaction key as ``Put.tx_key`` has it (None for plain
            puts) and the puts in order; no puts when the head of the buffer is not such a put
            (or while a body is being skipped, a header is parked, or the decoder is broken).
        """
        puts: list[PutFields] = []
        buffer = self._buffer
        position = self._position
        if not self._run_starts(b"put "):
            return None, puts
        available = len(buffer)
        body_max = self.body_bytes_max
        match = PUT_RUN.match
        run_key = None  # the first put's key (None: plain puts)
        for _ in range(limit):
            if position == available:
                break
            found = match(buffer, position)
            if found is None:
                break
            topic, partition, length, flag, checksum, key, opaque = found.groups()
            if not puts:
                if key is not None and self._checked_key(key) is None:
                    break
                run_key = key
            elif key != run_key:
                break
            body_start = found.end()
            body_end = body_start + int(length)
            if body_end > available or body_end - body_start > body_max:
                break
            if checksum is not None:
                checksum = int(checksum)
                if not INT_MIN <= checksum <= INT_MAX:
                    break
            # ``puts.append`` itself: a list operation when compiled, not a bound-method call.
            puts.append(
                (topic, partition, int(flag), checksum, opaque, buffer[body_start:body_end])
            )
            position = body_end
        self._position = position
        return (self._last_key if run_key is not None else None), puts

    def next_sync_run(self, limit: int) -> list[SyncFields]:
        """Decode up to ``limit`` consecutive ``sync`` commands from the head of the buffer.

        A gregor slave's batch path, as ``next_put_run`` is the master's: one regex match per
        header (``patterns.SYNC_RUN``), no command objects, whole bodies within
        ``body_bytes_max`` only; the run stops before anything else, which ``next_command``
        then decodes (or refuses). Every field equals what ``next_command`` would have put in
        the ``Sync``: ``topic.decode()``, ``int(partition)``, ``int(opaque)`` and
        ``bytes(body)`` give it back.
        """
        syncs: list[SyncFields] = []
        buffer = self._buffer
        position = self._position
        if not self._run_starts(b"sync "):
            return syncs
        available = len(buffer)
        body_max = self.body_bytes_max
        match = SYNC_RUN.match
        append = syncs.append  # a list's own append: no per-sync method lookup
        for _ in range(limit):
            if position == available:  # the usual end: no match tried on nothing
                break
            found = match(buffer, position)
            if found is None:
                break
            fields = _sync_fields(found, buffer, available, body_max)
            if fields is None:
                break
            append(fields)
            position = found.end() + len(fields[5])
        self._position = position
        return syncs

    def one_sync(self, data: bytes) -> SyncFields | None:
        """The fields of ``data`` when it is exactly one whole ``sync`` frame that
        ``next_sync_run`` would take, and the decoder holds nothing; else None, having
        buffered nothing (the caller then hands ``data`` to ``receive_data``).

        A gregor slave's read of a master replicating one synchronous producer's put: the
        frame is taken with one match of ``patterns.SYNC_RUN``, its fields checked by
        ``_sync_fields`` (the rule ``next_sync_run`` applies), and its body is a slice of
        ``data``.
        """
        if (
            self._position != len(self._buffer)
            or self._error is not None
            or self._skip_bytes
            or self._pending is not None
        ):
            return None
        found = SYNC_RUN.match(data)
        if found is None:
            return None
        available = len(data)
        fields = _sync_fields(found, data, available, self.body_bytes_max)
        if fields is None or found.end() + len(fields[5]) != available:
            return None
        return fields

    def next_result_run(self, limit: int) -> list[tuple[int, int, bytes]]:
        """Decode up to ``limit`` consecutive ``result`` frames at once: ``(code, opaque, body)``.

        The client side of a put pipeline (``meta.bench``): one regex match per frame, no
        command objects. A frame is taken only when ``next_command`` would return it as the
        same ``Result`` (codes and lengths of at most 9 digits, an in-range opaque, the whole
        body buffered, within ``body_bytes_max``); the run stops before anything else.
        """
        if self._error is not None or self._skip_bytes or self._pending is not None:
            return []
        buffer = self._buffer
        position = self._position
        available = len(buffer)
        match = RESULT_RUN.match
        results: list[tuple[int, int, bytes]] = []
        for _ in range(limit):
            if position == available:  # the usual end: no match tried on nothing
                break
            found = match(buffer, position)
            if found is None:
                break
            code, length, opaque = found.groups()
            body_start = found.end()
            body_end = body_start + int(length)
            opaque = int(opaque)
            if body_end > available or body_end - body_start > self.body_bytes_max:
                break
            if not INT_MIN <= opaque <= INT_MAX:
                break
            results.append((int(code), opaque, bytes(buffer[body_start:body_end])))
            position = body_end
        self._position = position
        return results

    def _checked_key(self, raw: bytes) -> str | None:
        """The key if it parses (the last good one is remembered: a transaction repeats it)."""
        if raw == self._last_key_bytes:
            return self._last_key
        try:
            key = raw.decode("ascii")
            if CANONICAL_LOCAL_KEY_BYTES.fullmatch(raw) is None:
                parse_transaction_key(key)
        except (UnicodeDecodeError, LocalProtocolError):
            return None
        self._last_key_bytes = raw
        self._last_key = key
        return key

    def _fast_result(self, end: int) -> Result | None:
        """Decode ``result <code> <len> <opaque>`` + body when it is whole and within limits.

        Returns None otherwise; the general parser then handles it (or waits, or refuses).
        """
        match = FAST_RESULT.fullmatch(self._buffer, self._position, end)
        if match is None:
            return None
        code, length, opaque = match.groups()
        length = int(length)
        opaque = int(opaque)
        body_start = end + 2
        body_end = body_start + length
        if not INT_MIN <= opaque <= INT_MAX or length > self.body_bytes_max:
            return None
        if len(self._buffer) < body_end:
            return None
        self._position = body_end
        return Result(int(code), bytes(self._buffer[body_start:body_end]), opaque)

    def _next_skip(self, event: BodyTooLarge | None) -> BodyTooLarge:
        assert event is not None
        dropped = min(self._skip_bytes, len(self._buffer) - self._position)
        self._skip_bytes -= dropped
        self._position += dropped
        return event

    def _take_body(self, build: Callable[[bytes], Command], length: int) -> Command | _NeedData:
        parts = self._body_parts
        if parts is not None:  # collected outside the buffer
            if self._body_missing:
                return NEED_DATA
            self._pending = None
            self._body_parts = None
            # An in-place value body is the bytearray it was received into.
            return build(parts[0] if self._in_place else b"".join(parts))  # type: ignore[arg-type]
        buffer = self._buffer
        start = self._position
        if len(buffer) - start < length:
            self._pending = (build, length)
            if length >= BODY_PARTS_BYTES_MIN:
                # The buffer holds the body's start and nothing after it: it becomes the
                # first part (no copy), and the rest of the body is collected as it comes.
                del buffer[:start]
                self._body_missing = length - len(buffer)
                if self._in_place:  # one block of the body's length, filled as it comes
                    buffer = self._blocks.take(length)
                    buffer[: length - self._body_missing] = self._buffer
                self._body_parts = [buffer]
                self._buffer = bytearray()
                self._position = 0
            return NEED_DATA
        self._pending = None
        self._position = start + length
        if length >= BODY_PARTS_BYTES_MIN:
            with memoryview(buffer) as view:  # one copy, not a bytearray slice and bytes()
                body = view[start : start + length]
                if self._in_place:  # a value body, received in place: a bytearray
                    return build(bytearray(body))  # type: ignore[arg-type]
                return build(bytes(body))
        return build(bytes(buffer[start : start + length]))

    def _add_part(self, data: Chunk) -> None:
        """Append a chunk of the collected body (referenced when an immutable, large bytes)."""
        parts = self._body_parts
        assert parts is not None and self._pending is not None
        if self._in_place:
            filled = self._pending[1] - self._body_missing
            cast(bytearray, parts[0])[filled : filled + len(data)] = data
        elif type(data) is bytes and len(data) >= PART_BYTES_MIN:
            parts.append(data)
        elif type(parts[-1]) is bytearray:
            parts[-1] += data
        else:
            parts.append(bytearray(data))


def decode_all(data: bytes, **limits: Any) -> list[Command | BodyTooLarge]:
    """Decode every complete command in ``data`` (a convenience for tests and tools)."""
    decoder = Decoder(**limits)
    decoder.receive_data(data)
    commands: list[Command | BodyTooLarge] = []
    while not isinstance(command := decoder.next_command(), _NeedData):
        commands.append(command)
    return commands


def decode_result(frame: bytes) -> Result:
    """The ``result`` command that ``frame`` holds whole (a handler's reply, to be translated
    for another transport): the pattern of ``Decoder``'s fast path first, the decoder else.

    Raises:
        LocalProtocolError: ``frame`` is not exactly one ``result`` command.
    """
    end = frame.find(b"\r\n")
    match = FAST_RESULT.fullmatch(frame, 0, end) if end > 0 else None
    if match is not None:
        code, length, opaque = match.groups()
        opaque = int(opaque)
        if INT_MIN <= opaque <= INT_MAX and end + 2 + int(length) == len(frame):
            return Result(int(code), frame[end + 2 :], opaque)
    commands = decode_all(frame)
    if len(commands) != 1 or not isinstance(commands[0], Result):
        raise LocalProtocolError(f"not one result command: {frame[:80]!r}")
    return commands[0]
