"""One blocking wire connection from ``meta-admin`` to a broker, and the tool's errors.

``AdminClient`` wraps ``meta.client.net.connection.BrokerConnection`` (the shared codec) and turns
every way a request can fail into an ``AdminError`` whose text names what is wrong: the
broker address that could not be reached, or the command the broker refused together with the
broker's own text (an ``XAException:code=N,msg=...`` body is decoded into a line such as
``XAER_NOTA (-4, unknown or finished transaction): ...``).

Exit statuses (``EXIT_STATUS_RULE``): ``BrokerRefusedError``, ``NotFoundError`` and
``RefusedError`` give 1 (the broker or the tool said no, or what the command names does not
exist); every other ``AdminError`` gives 2 (bad usage, or the broker or ZooKeeper could not be
reached or stopped answering). Offline commands follow the same rule for files.

Invariants: one request in flight at a time, and its reply must carry its opaque; every
socket operation is bounded by the client's timeout. Single-threaded (one CLI invocation).
"""

from __future__ import annotations

import os
import socket

from meta.client.net.connection import BrokerConnection
from meta.errors import MetaError
from meta.protocol import xa
from meta.protocol.commands import Command, Data, Get, Offset, Result, Stats, Transaction
from meta.protocol.xa import parse_xa_error

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2

EXIT_STATUS_RULE = (
    "Exit status: 0 done (or nothing to do); 1 refused or not found: the broker or the tool "
    "said no (an unknown topic, group, broker or message, or a check that failed, such as a "
    "live group, pending work, an offset inside a record or a data directory in use); 2 bad "
    "usage, or a broker, ZooKeeper or a file that could not be reached or read."
)
"""The one rule of every command's exit status, ending each ``--help`` and in the docs."""

DEFAULT_BROKER = "127.0.0.1:8123"
DEFAULT_TIMEOUT_S = 10.0

ADMIN_GROUP = "meta-admin"
"""The consumer group ``get`` and ``offset`` requests name (broker statistics only)."""

XA_CODE_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(xa).items()
    if name.startswith(("XA_", "XAER_")) and isinstance(value, int) and value != xa.XA_OK
}
"""Standard JTA names of the XA codes a broker can answer (0 is Java's "Invalid state")."""

XA_CODE_MEANINGS: dict[int, str] = {
    xa.XA_HEURCOM: "an operator committed this branch",
    xa.XA_HEURRB: "an operator rolled this branch back",
    xa.XA_HEURHAZ: "an operator completed this branch",
    xa.XA_HEURMIX: "partly committed, partly rolled back",
    xa.XA_RBOTHER: "rolled back",
    xa.XAER_RMERR: "broker error",
    xa.XAER_NOTA: "unknown or finished transaction",
    xa.XAER_INVAL: "invalid arguments",
    xa.XAER_PROTO: "the transaction is in the wrong state for this",
    xa.XAER_RMFAIL: "the broker's journal or store failed",
    xa.XAER_DUPID: "duplicate transaction id",
}


class AdminError(MetaError):
    """A failure the tool reports on stderr; ``exit_status`` is the process exit status."""

    exit_status = EXIT_USAGE


class UsageError(AdminError):
    """A bad argument: the text names it and says what was expected."""


class BrokerUnreachableError(AdminError):
    """The broker could not be connected to, or stopped answering within the timeout."""


class BrokerRefusedError(AdminError):
    """The broker answered and refused the command."""

    exit_status = EXIT_REFUSED


class NotFoundError(AdminError):
    """What the command names does not exist (a group, topic, broker, partition, message)."""

    exit_status = EXIT_REFUSED


class RefusedError(AdminError):
    """The tool refuses to act (e.g. a consumer group still has live members)."""

    exit_status = EXIT_REFUSED


class ZooKeeperUnreachableError(AdminError):
    """ZooKeeper could not be connected to, or stopped answering within the timeout."""


def parse_broker_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 as ``[::1]:8123``) as ``(host, port)``.

    Raises:
        UsageError: no port, an empty host, or a port outside 1..65535.
    """
    host, separator, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"invalid broker address {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8123"
        )
    return host, int(port)


def describe_xa_error(body: bytes) -> str | None:
    """A readable line for an ``XAException:code=N,msg=...`` body, or None for other bodies."""
    error = parse_xa_error(body)
    if error is None:
        return None
    code = error.error_code
    name = XA_CODE_NAMES.get(code, "XA error")
    meaning = XA_CODE_MEANINGS.get(code, "invalid state" if code == 0 else "")
    detail = f"{code}, {meaning}" if meaning else f"{code}"
    message = error.message if error.message is not None else "(no message)"
    return f"{name} ({detail}): {message}"


def reply_text(body: bytes) -> str:
    """A reply body as one readable line: decoded XA errors, other text as sent."""
    described = describe_xa_error(body)
    if described is not None:
        return described
    text = body.decode("utf-8", "replace").strip()
    return text or "(empty reply)"


def admin_session_id() -> str:
    """The session id token of the tool's transaction commands (no ``:`` and no space)."""
    return f"meta-admin-{socket.gethostname().replace(':', '.').replace(' ', '_')}-{os.getpid()}"


class AdminClient:
    """A blocking connection to one broker, opened on construction.

    Args:
        address: ``(host, port)`` of the broker.
        timeout_s: bound on connecting and on every reply.

    Raises:
        BrokerUnreachableError: the connection could not be made (the text names the address).
    """

    def __init__(self, address: tuple[str, int], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.name = f"{address[0]}:{address[1]}"
        self.session_id = admin_session_id()
        try:
            self._connection = BrokerConnection(address[0], address[1], timeout_s=timeout_s)
        except OSError as error:
            raise BrokerUnreachableError(
                f"cannot connect to broker {self.name}: {_os_reason(error)}"
            ) from None
        self._timeout_s = timeout_s
        self.answers_json_stats: bool | None = None
        """Whether the broker answers ``stats json:...`` (None until asked; see ``reads``)."""

    def transaction(self, key: str, type_: str, unique_qualifier: str | None = None) -> Result:
        """Send ``transaction <key> <sid> <type> [<qualifier>] <opaque>``; return its reply."""
        opaque = self._connection.next_opaque()
        command = Transaction(key, self.session_id, type_, opaque, 0, unique_qualifier)
        return self.request(command, f"{type_} of {key}")

    def stats(self, item: str) -> Result:
        """Send ``stats <item> <opaque>``; return its reply."""
        return self.request(Stats(item, self._connection.next_opaque()), f"stats {item}")

    def get(self, topic: str, partition: int, offset: int, max_size: int) -> Result | Data:
        """Send ``get``; return the data frame or the ``result`` (301, 403, 404...)."""
        command = Get(
            topic, ADMIN_GROUP, partition, offset, max_size, self._connection.next_opaque()
        )
        return self.exchange(command, f"get {topic}-{partition}@{offset}")

    def offset(self, topic: str, partition: int, offset: int) -> Result:
        """Send ``offset``; return its reply (200 with the segment start, or 404)."""
        opaque = self._connection.next_opaque()
        command = Offset(topic, ADMIN_GROUP, partition, offset, opaque)
        return self.request(command, f"offset {topic}-{partition}@{offset}")

    def request(self, command: Command, what: str) -> Result:
        """Send one command and return its ``result`` frame, whatever its code.

        Raises:
            BrokerUnreachableError: no reply within the timeout, or the socket failed.
            BrokerRefusedError: the broker closed the connection instead of answering (a
                broker that does not know the command does that), or sent something else.
        """
        reply = self.exchange(command, what)
        if isinstance(reply, Data):
            raise BrokerRefusedError(f"broker {self.name} answered {what} with a data frame")
        return reply

    def exchange(self, command: Command, what: str) -> Result | Data:
        """Send one command and return its reply frame (``result`` or ``value``).

        Raises:
            BrokerUnreachableError, BrokerRefusedError: as ``request``.
        """
        try:
            return self._connection.request(command)
        except TimeoutError:
            raise BrokerUnreachableError(
                f"no reply to {what} from broker {self.name} within {self._timeout_s:g} s"
            ) from None
        except OSError as error:
            raise BrokerUnreachableError(
                f"connection to broker {self.name} failed during {what}: {_os_reason(error)}"
            ) from None
        except MetaError as error:
            raise BrokerRefusedError(
                f"broker {self.name} gave no reply to {what} ({error}); "
                "a broker that does not know a command closes the connection"
            ) from None

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _os_reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__
