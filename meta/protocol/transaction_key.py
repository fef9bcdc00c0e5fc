"""Transaction keys of the wire protocol, as Java's.

Grammar::

    null
    TX:<sessionId>:<n>                                   n: 32-bit int
    XID:<formatId>:<gtridHex>:<bqualHex>:<uniqueQualifier>

Parsing follows the Java rules exactly (trailing empty parts dropped for ``TX:``, kept for
``XID:``; hex either case, an odd trailing digit ignored, written back lower case). Pure
functions; thread-safe.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from meta.errors import LocalProtocolError

_INTEGER = re.compile(r"[+-]?[0-9]+")
_HEX = re.compile(r"[0-9A-Fa-f]*")
# A local key as Java writes it back: a session id without ":" and a number in canonical
# form of at most 9 digits (always a 32-bit int). Such a key parses, and is its own
# canonical form.
CANONICAL_LOCAL_KEY = re.compile(r"TX:[^:]*:(?:0|-?[1-9][0-9]{0,8})")
CANONICAL_LOCAL_KEY_BYTES = re.compile(CANONICAL_LOCAL_KEY.pattern.encode())
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True, slots=True)
class LocalTransactionId:
    session_id: str
    number: int

    def key(self) -> str:
        return f"TX:{self.session_id}:{self.number}"


@dataclass(frozen=True, slots=True)
class XATransactionId:
    format_id: int
    global_transaction_id: bytes
    branch_qualifier: bytes
    unique_qualifier: str

    def key(self) -> str:
        return (
            f"XID:{self.format_id}:{self.global_transaction_id.hex()}:"
            f"{self.branch_qualifier.hex()}:{self.unique_qualifier}"
        )


TransactionId = LocalTransactionId | XATransactionId | None


def _int32(text: str, what: str) -> int:
    if not _INTEGER.fullmatch(text) or not INT_MIN <= int(text) <= INT_MAX:
        raise LocalProtocolError(f"invalid {what} {text!r} in transaction key")
    return int(text)


def _hex_bytes(text: str, what: str) -> bytes:
    if not _HEX.fullmatch(text):
        raise LocalProtocolError(f"invalid {what} {text!r} in transaction key: not hex")
    return bytes.fromhex(text[: len(text) - len(text) % 2])


@functools.lru_cache(maxsize=4096)  # a transaction's key comes in every one of its frames
def parse_transaction_key(text: str) -> TransactionId:
    """Parse a transaction key; ``null`` gives None.

    Raises:
        LocalProtocolError: the key matches no form; the connection must be closed.
    """
    if text == "null":
        return None
    if text.startswith("TX:"):
        parts = text.split(":")
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) != 3:
            raise LocalProtocolError(f"invalid local transaction key {text!r}")
        return LocalTransactionId(parts[1], _int32(parts[2], "transaction number"))
    if text.startswith("XID:"):
        parts = text.split(":")
        if len(parts) != 5:
            raise LocalProtocolError(f"invalid XA transaction key {text!r}")
        return XATransactionId(
            _int32(parts[1], "format id"),
            _hex_bytes(parts[2], "global transaction id"),
            _hex_bytes(parts[3], "branch qualifier"),
            parts[4],
        )
    raise LocalProtocolError(f"invalid transaction key {text!r}")
