"""Reply values shared by the command handlers (``handlers``, ``tx_handlers``).

A handler returns encoded bytes, a ``FileReply``, None (no reply) or ``PENDING``. Pure
definitions; reactor thread only by use.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileReply:
    """A value frame whose body is ``length`` bytes of ``segment`` from ``position``."""

    header: bytes
    segment: object
    position: int
    length: int


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()
"""A handler's answer when it will call ``connection.respond`` later."""

Reply = bytes | FileReply | None | _Pending
