"""Whether a Twisted TCP transport has nothing buffered, read from its private buffers.

``meta.server.protocol`` writes a reply straight to the socket when the transport holds no
bytes yet (``send_now``). Twisted keeps those bytes in ``FileDescriptor``'s private
attributes (``_tempDataBuffer``, ``dataBuffer``, ``offset``): ``fd_buffer_empty`` reads them,
and an import-time probe (``fd_buffer_layout_known``) checks that this Twisted keeps them
there; ``FD_BUFFER_LAYOUT_KNOWN`` holds its answer. The probe defines a class inside a
function, so this module stays interpreted in the compiled build (``meta.build``).

Reactor thread only (the probe runs at import, on no reactor).
"""

from __future__ import annotations

from twisted.internet import abstract


def fd_buffer_empty(transport) -> bool:
    """Whether a Twisted TCP transport has nothing buffered (False for other transports).

    Reads ``FileDescriptor``'s private write buffers (``_tempDataBuffer``, ``dataBuffer``,
    ``offset``); used only when ``fd_buffer_layout_known`` found them as expected.
    """
    try:
        return not transport._tempDataBuffer and transport.offset >= len(transport.dataBuffer)
    except AttributeError:
        return False


def buffer_never_empty(transport) -> bool:
    """The fallback: every reply goes through ``transport.write`` (one more reactor turn)."""
    return False


class _ProbeReactor:
    """Just enough of a reactor for a ``FileDescriptor`` that is never connected to one."""

    def addWriter(self, writer: object) -> None:
        pass

    def removeWriter(self, writer: object) -> None:
        pass


def fd_buffer_layout_known(descriptor_class: type = abstract.FileDescriptor) -> bool:
    """Whether ``descriptor_class`` buffers writes the way ``fd_buffer_empty`` reads them.

    A feature check rather than a version check: a probe descriptor (no socket, no reactor)
    must look empty when new, not empty after ``write``, and empty again once ``doWrite``
    has sent everything. Any other outcome, or a missing attribute, means this Twisted keeps
    its buffers elsewhere, and the protocol falls back to plain ``transport.write``.
    """

    class Probe(descriptor_class):  # type: ignore[misc, valid-type]
        connected = 1

        def writeSomeData(self, data: bytes) -> int:
            return len(data)

    try:
        probe = Probe(reactor=_ProbeReactor())
        if not fd_buffer_empty(probe):
            return False
        probe.write(b"probe")
        if fd_buffer_empty(probe):
            return False
        probe.doWrite()
        return fd_buffer_empty(probe)
    except Exception:  # noqa: BLE001 - any failure means the layout is not the known one
        return False


FD_BUFFER_LAYOUT_KNOWN = fd_buffer_layout_known()
