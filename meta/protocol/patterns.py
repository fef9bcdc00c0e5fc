"""The regular expressions of ``meta.protocol.codec``'s fast paths (bytes patterns).

Each accepts a subset of what the general header parser (``meta.protocol.headers``) takes, and
the decoder builds from a match exactly the command the general parser would build; anything
the pattern does not take goes to the general parser, which decodes or refuses it. Pure data.
"""

from __future__ import annotations

import re

# put <topic> <partition> <len> <flag> [<checksum>] [<TX:|XID: key>] <opaque>, ASCII digits
# only (bytes \d).
FAST_PUT = re.compile(
    rb"put ([^ ]+) (-?\d{1,10}) (\d{1,10}) (-?\d{1,10}) (?:(-?\d{1,10}) )?"
    rb"(?:((?:TX|XID):[^ ]+) )?(-?\d{1,10})"
)
FAST_TRANSACTION = re.compile(
    rb"transaction ((?:TX|XID):[!-~]{1,1024}) ([!-~]{1,1024}) ([A-Z_]{1,32}) "
    rb"(?:([0-9]{1,9}) )?(0|-?[1-9][0-9]{0,8})"
)
FAST_RESULT = re.compile(rb"result (\d{1,9}) (\d{1,9}) (-?\d{1,10})")
# The broker's put runs (``Decoder.next_put_run``): puts to a legal topic name (ASCII,
# compatibility.md) whose partition and opaque are written canonically (no sign on 0, no leading
# zero, at most 9 digits, so always in range) and whose length and flag have at most 9 digits,
# with or without a ``TX:``/``XID:`` key of printable ASCII (its grammar is checked by
# ``parse_transaction_key``). Such a header is always shorter than the codec's
# ``HEADER_BYTES_MAX``.
# Anything else is left to ``next_command``.
# Its repeats are possessive (``{m,n}+``: no backtracking into them), which accepts exactly
# what the plain ones would: each repeats a class that excludes the byte that must follow it
# (a space, or the CR), so a match can only end a repeat at its longest run. sre matches a
# header with less bookkeeping so (a one-put read's match: 5.4k instructions before, 4.75k).
PUT_RUN = re.compile(
    rb"put ([A-Za-z0-9_.-]{1,255}+) (0|[1-9][0-9]{0,8}+) ([0-9]{1,9}+) (-?[0-9]{1,9}+) "
    rb"(?:(-?[0-9]{1,10}+) )?(?:((?:TX|XID):[!-~]{1,1024}+) )?(0|-?[1-9][0-9]{0,8}+)\r\n"
)
RESULT_RUN = re.compile(rb"result ([0-9]{1,9}) ([0-9]{1,9}) (-?[0-9]{1,10})\r\n")
# A gregor slave's sync runs (``Decoder.next_sync_run``): Java's 7- and 8-token ``sync`` to a
# legal topic name, partition and opaque written canonically as in ``PUT_RUN``, a canonical
# message id of at most 19 digits and a checksum of at most 10 (both range checked).
SYNC_RUN = re.compile(
    rb"sync ([A-Za-z0-9_.-]{1,255}) (0|[1-9][0-9]{0,8}) ([0-9]{1,9}) (-?[0-9]{1,9}) "
    rb"(0|-?[1-9][0-9]{0,18}) (?:(-?[0-9]{1,10}) )?(0|-?[1-9][0-9]{0,8})\r\n"
)
