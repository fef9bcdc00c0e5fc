"""``SegmentSender``: the body of a get's 200, sent from its segment file (STYLE 13).

The region is sent with ``os.sendfile`` while the socket takes it (``ProtocolChannel.
send_file``: no copy through Python, as the TCP get's ``FileReply``); when the socket is
full or the transport has bytes buffered, one chunk of at most ``CHUNK_BYTES`` is read and
written instead, which fills the transport's buffer: the transport then pauses this
producer and resumes it once the buffer is sent. A segment closed by retention under the
response (or shorter than the region) cuts the body short, so the connection is closed.

Reactor thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from meta.errors import StoreError

log = logging.getLogger("meta.server.http")

CHUNK_BYTES = 256 * 1024


class SegmentSender:
    """Streams ``length`` bytes of a segment into a response, pausing with the transport.

    ``request`` is a twisted.web request on a ``ProtocolChannel`` whose status and headers
    are set (``Content-Length`` is ``length``).
    """

    def __init__(self, request: Any, segment: Any, position: int, length: int) -> None:
        self._request = request
        self._segment = segment
        self._position = position
        self._remaining = length
        self._paused = False
        self._sending = False

    def start(self) -> None:
        request = self._request
        if request.method == b"HEAD":
            request.finish()
            return
        request.write(b"")  # the status line and headers, sent with the first body bytes
        request.registerProducer(self, True)
        self._send()

    def _send(self) -> None:
        if self._sending:
            return  # resumed from inside our own write
        request = self._request
        if request.channel is None:
            self._remaining = -1  # the connection was lost (twisted.web drops the channel)
            return
        self._sending = True
        try:
            while self._remaining > 0 and not self._paused:
                sent = request.channel.send_file(self._segment, self._position, self._remaining)
                if sent == 0:
                    size = min(self._remaining, CHUNK_BYTES)
                    chunk = self._segment.read(self._position, size)
                    if len(chunk) != size:
                        raise StoreError(f"segment {self._segment} shrank while streaming")
                    request.write(chunk)
                    sent = size
                self._position += sent
                self._remaining -= sent
        except StoreError as error:
            # Retention closed the segment under this reply: the body is cut short, so the
            # connection is closed (the client sees fewer bytes than Content-Length).
            log.warning("closing an HTTP get: %s", error)
            self._remaining = -1
            request.unregisterProducer()
            request.channel.transport.loseConnection()
            return
        finally:
            self._sending = False
        if self._remaining == 0:
            self._remaining = -1
            request.unregisterProducer()
            request.finish()

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        if self._remaining > 0:
            self._send()

    def stopProducing(self) -> None:
        self._remaining = -1
