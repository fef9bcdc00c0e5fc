"""XA constants and the wire form of XA errors, as Java's.

The broker answers an XA failure with ``result 500`` and the body
``XAException:code=<errorCode>,msg=<message>`` (the message may be ``null``). The codes are the
standard JTA ``javax.transaction.xa`` values. Pure functions and constants; thread-safe.
"""

from __future__ import annotations

import re

from meta.errors import XAError

# Return values of prepare.
XA_OK = 0
XA_RDONLY = 3

# Heuristic outcomes.
XA_HEURMIX = 5
XA_HEURRB = 6
XA_HEURCOM = 7
XA_HEURHAZ = 8

# Rollback codes.
XA_RBROLLBACK = 100
XA_RBCOMMFAIL = 101
XA_RBOTHER = 104
XA_RBPROTO = 105
XA_RBTIMEOUT = 106

# Errors.
XAER_RMERR = -3
XAER_NOTA = -4
XAER_INVAL = -5
XAER_PROTO = -6
XAER_RMFAIL = -7
XAER_DUPID = -8

# Flags of start / end / recover / commit.
TMNOFLAGS = 0
TMJOIN = 0x00200000
TMENDRSCAN = 0x00800000
TMSTARTRSCAN = 0x01000000
TMSUSPEND = 0x02000000
TMSUCCESS = 0x04000000
TMRESUME = 0x08000000
TMFAIL = 0x20000000
TMONEPHASE = 0x40000000

XA_ERROR_PREFIX = "XAException:"
_XA_ERROR = re.compile(r"XAException:code=(-?[0-9]+),msg=(.*)", re.DOTALL)


def format_xa_error(error_code: int, message: str | None) -> bytes:
    """The body of a ``result 500`` carrying an XA error (``null`` for no message)."""
    return f"{XA_ERROR_PREFIX}code={error_code},msg={message}".encode()


def parse_xa_error(body: bytes) -> XAError | None:
    """The ``XAError`` a reply body carries, or None when the body is not an XA error."""
    match = _XA_ERROR.fullmatch(body.decode("utf-8", "replace"))
    if match is None:
        return None
    message = match.group(2)
    return XAError(int(match.group(1)), None if message == "null" else message)
