"""Header grammar of the text protocol: one parser per command.

Each parser takes the tokens of one header line (split like Java's ``split(" ")``) and
returns a ``Header``. ``parse_header`` dispatches on the first character only, as the Java
decoder does. Every malformed header raises ``LocalProtocolError``. Pure; used by
``meta.protocol.codec``. Thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from meta.errors import LocalProtocolError
from meta.protocol.commands import (
    LONG_MAX,
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

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DIGITS = re.compile(r"[0-9]*")
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN = -(2**63)

# A parsed header: the command to return (or, with a body, a factory taking the body),
# the body length (None: no body), and the BodyTooLarge event to emit if it is too long.
Header = tuple[Command | Callable[[bytes], Command], int | None, BodyTooLarge | None]


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


def split_header(line: str) -> list[str]:
    """Tokens of a header line, split like Java (trailing empty tokens dropped)."""
    tokens = line.split(" ")
    while tokens and tokens[-1] == "":
        tokens.pop()
    if not tokens or not tokens[0]:
        raise LocalProtocolError("empty command")
    return tokens


def _parse_put(tokens: list[str]) -> Header:
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


def _parse_sync(tokens: list[str]) -> Header:
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


def _parse_get(tokens: list[str]) -> Header:
    if tokens[0] != "get":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if len(tokens) < 7:
        raise LocalProtocolError(f"get has {len(tokens)} tokens; expected 7")
    max_wait_ms = None
    # Long polling: one optional token after the opaque; Java ignores extra tokens, so an
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


def _parse_offset(tokens: list[str]) -> Header:
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


def _parse_v(tokens: list[str]) -> Header:
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


def _parse_s(tokens: list[str]) -> Header:
    if tokens[0] != "stats":
        return _parse_sync(tokens)
    item = tokens[1] if len(tokens) > 1 else ""
    opaque = _int(tokens[2], "opaque") if len(tokens) > 2 else OPAQUE_DEFAULT
    return Stats(item, opaque), None, None


def _parse_result(tokens: list[str]) -> Header:
    if tokens[0] != "result":
        raise LocalProtocolError(f"unknown command {tokens[0]!r}")
    if len(tokens) < 4:
        raise LocalProtocolError(f"result has {len(tokens)} tokens; expected 4")
    code = _int(tokens[1], "result code")
    length = _body_length(tokens[2])
    opaque = _int(tokens[3], "opaque")
    return (lambda body: Result(code, body, opaque)), length, BodyTooLarge("result", length, opaque)


def _parse_transaction(tokens: list[str]) -> Header:
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


def _parse_quit(tokens: list[str]) -> Header:
    return Quit(), None, None


def _parse_unknown(tokens: list[str]) -> Header:
    raise LocalProtocolError(f"unknown command {tokens[0][:64]!r}")


_DISPATCH: dict[str, Callable[[list[str]], Header]] = {
    "p": _parse_put,
    "g": _parse_get,
    "t": _parse_transaction,
    "r": _parse_result,
    "v": _parse_v,
    "s": _parse_s,
    "o": _parse_offset,
    "q": _parse_quit,
}


def parse_header(tokens: list[str]) -> Header:
    """Parse one header by the first character of its first token (Java's dispatch)."""
    return _DISPATCH.get(tokens[0][0], _parse_unknown)(tokens)
