"""``BrokerTransport``: the TCP transport of the broker's client connections.

What lives here: a ``twisted.internet.tcp.Server`` subclass that the broker's listening port
builds for each accepted connection (``use_broker_transport``: the port's ``transport``
attribute, the seam Twisted documents for another kind of transport), and that port hook.
Most reads of a broker with many producers carry one request each, so the fixed cost of a
read counts as much as the request's own handling. This transport removes two layers from it:

* ``doRead`` receives and hands the bytes to the protocol itself, where ``tcp.Connection``
  calls ``_dataReceived`` in between; an empty read is the peer's FIN and a failed one a lost
  connection, as in Twisted, and the reactor's event handling (``_doReadOrWrite``,
  ``_disconnectSelectable``: half-close, errors, exceptions of the protocol) is Twisted's.
  A ``BrokerProtocol`` names itself to its transport when it connects (``broker_protocol``,
  typed), so that the compiled build calls its ``dataReceived`` directly; the transport
  forgets it when the connection is lost, as Twisted forgets ``protocol``. Any other
  protocol is called through ``protocol``. ``meta.server.protocol`` imports this module, so
  this one names ``BrokerProtocol`` for the type checker only (no import at run time).
* ``send_now`` writes a reply straight to the socket when the transport holds no bytes yet,
  as ``meta.server.protocol.send_now`` does through ``writeSomeData``, without the
  ``memoryview`` slice and ``untilConcludes`` around ``socket.send`` (Python retries a send
  interrupted by a signal itself, PEP 475). Whether the transport holds bytes is read from
  ``FileDescriptor``'s private buffers; where the import-time probe of ``fd_buffers`` does
  not find them where this Twisted keeps them, ``send_now`` sends nothing and every reply
  goes through ``write``, as before. A failed send also sends nothing: the caller then
  writes through ``write``, and Twisted's ``doWrite`` meets the error and closes the
  connection, as it does after ``writeSomeData``.

Every other behaviour (writes, producers, ``loseConnection``, half-close, aborts) is
``tcp.Server``'s. The module is one of the compiled build's (``meta.compiled``): it runs once
per read and once per reply. Reactor thread only.
"""

from __future__ import annotations

from errno import EWOULDBLOCK
from typing import TYPE_CHECKING, Any

from twisted.internet import main, tcp
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.python.failure import Failure

from meta.server.fd_buffers import FD_BUFFER_LAYOUT_KNOWN

if TYPE_CHECKING:  # a type only: ``meta.server.protocol`` imports this module
    from meta.server.protocol import BrokerProtocol

__all__ = ["BrokerTransport", "use_broker_transport"]


class BrokerTransport(tcp.Server):
    """A broker client connection's transport (see the module doc).

    Attributes:
        broker_protocol: the connection's protocol while connected, when it is a
            ``BrokerProtocol`` (it sets this in ``connectionMade``); else None.
    """

    broker_protocol: BrokerProtocol | None = None

    def doRead(self) -> ConnectionLost | ConnectionDone | None:  # noqa: N802 - Twisted's
        """Receive up to ``bufferSize`` bytes and hand them to the protocol.

        Returns None, ``CONNECTION_DONE`` (the peer's FIN) or ``CONNECTION_LOST`` (the
        receive failed), what ``tcp.Connection.doRead`` returns in each case.
        """
        try:
            data = self.socket.recv(self.bufferSize)
        except OSError as error:
            if error.args[0] == EWOULDBLOCK:
                return None
            return main.CONNECTION_LOST
        if not data:
            return main.CONNECTION_DONE
        broker_protocol = self.broker_protocol
        if broker_protocol is not None:
            broker_protocol.dataReceived(data)  # typed: a direct call when compiled
            return None
        protocol: Any = self.protocol  # an ``IProtocol``, whose stubs name no ``self``
        protocol.dataReceived(data)
        return None

    def connectionLost(self, reason: Failure) -> None:  # noqa: N802 - Twisted's
        """Twisted's, after forgetting ``broker_protocol`` (Twisted forgets ``protocol``)."""
        self.broker_protocol = None
        super().connectionLost(reason)

    def send_now(self, data: bytes) -> int:
        """Send ``data`` to the socket at once when nothing is buffered; return bytes sent.

        0 when bytes are buffered (they go first), when the socket takes none, when the send
        fails, or when this Twisted's buffers are not where ``fd_buffers`` looks for them.
        The caller writes the rest through ``write``.
        """
        if not FD_BUFFER_LAYOUT_KNOWN or self._tempDataBuffer:
            return 0
        if self.offset < len(self.dataBuffer):
            return 0
        try:
            return self.socket.send(data)
        except OSError:
            return 0


def use_broker_transport(port: object) -> bool:
    """Have a listening ``tcp.Port`` build a ``BrokerTransport`` for every connection it
    accepts from now on; return whether it will. A port whose ``transport`` is not Twisted's
    ``tcp.Server`` (another reactor's, a test's fake) is left as it is."""
    if getattr(port, "transport", None) is not tcp.Server:
        return False
    port.transport = BrokerTransport  # type: ignore[attr-defined]
    return True
