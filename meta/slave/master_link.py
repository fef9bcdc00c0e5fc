"""``MasterLink``: one blocking connection from a slave to its master for ``stats`` requests.

The replicator asks its master ``stats offsets`` once per poll (the master's partition ends,
for the lag, ``meta.slave.lag``) and ``stats config`` when ``autoSyncMasterConfig`` is set and
``master_config_checksum`` changed (as Java's slave does: the reply body is the master's
``server.ini``). The connection is opened on first use, kept, and opened again when the
master's address changes or a request fails. Every socket operation is bounded by the
timeout.

Thread affinity: blocking; run it off the reactor (``threads.deferToThread``), one call at a
time (the replicator serialises its polls). ``close`` may be called from any thread once no
call runs.
"""

from __future__ import annotations

from meta.client.cluster import BrokerAddress
from meta.client.net.connection import BrokerConnection
from meta.errors import MetaError
from meta.protocol.commands import Data, Stats


class MasterLinkError(MetaError):
    """The master could not be asked (the text names its address and why)."""


class MasterLink:
    """Args: timeout_s: bound on connecting and on each reply."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._connection: BrokerConnection | None = None
        self._address: BrokerAddress | None = None

    def stats(self, address: BrokerAddress, item: str) -> tuple[int, bytes]:
        """Send ``stats <item>`` to the master at ``address``; return ``(code, body)``.

        Raises:
            MasterLinkError: not connected, no reply in time, or not a ``result`` frame.
        """
        connection = self._connect(address)
        try:
            reply = connection.request(Stats(item, connection.next_opaque()))
        except (OSError, MetaError) as error:
            self.close()
            raise MasterLinkError(f"stats {item} to master {address.uri} failed: {error}") from None
        if isinstance(reply, Data):
            self.close()
            raise MasterLinkError(f"master {address.uri} answered stats {item} with data")
        return reply.code, reply.body

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _connect(self, address: BrokerAddress) -> BrokerConnection:
        if self._connection is not None and self._address == address:
            return self._connection
        self.close()
        try:
            self._connection = BrokerConnection(address.host, address.port, self._timeout_s)
        except OSError as error:
            raise MasterLinkError(f"cannot connect to master {address.uri}: {error}") from None
        self._address = address
        return self._connection
