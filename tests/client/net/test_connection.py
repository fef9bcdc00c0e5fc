"""``BrokerConnection.reply_ready`` (and the HTTP client's idle check, which shares
``readable_within``) in a process whose sockets are numbered 1024 and up.

Goal: a client in a process with many open files waits for replies as any other. ``select``
refuses a descriptor numbered 1024 or more (``ValueError``); a test suite that leaves many
files open ran into it. Method: the low descriptors are taken by duplicates of one pipe end,
so the connection's socket gets a number above 1024; a plain listening socket on 127.0.0.1
plays the broker (the kernel completes the connect before any ``accept``).
"""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from meta.client.net.connection import BrokerConnection, readable_within

HIGH_FD = 1100


@pytest.fixture
def low_fds_taken() -> Iterator[None]:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH_FD + 16:
        pytest.skip(f"the open-file limit ({soft}) leaves no descriptor above {HIGH_FD}")
    read_end, write_end = os.pipe()
    taken = [read_end, write_end]
    try:
        while taken[-1] < HIGH_FD:
            taken.append(os.dup(read_end))
        yield
    finally:
        for fd in taken:
            os.close(fd)


def test_a_reply_is_seen_on_a_socket_numbered_above_1024(low_fds_taken):
    with socket.create_server(("127.0.0.1", 0)) as server:
        connection = BrokerConnection("127.0.0.1", server.getsockname()[1], timeout_s=5.0)
        try:
            assert connection._socket.fileno() > 1024
            assert not connection.reply_ready(0.05)
            peer, _ = server.accept()
            with peer:
                peer.sendall(b"result 200 0 1\r\n")
                assert connection.reply_ready(5.0)
        finally:
            connection.close()


def test_readable_within_sees_the_peers_close_at_once(low_fds_taken):
    left, right = socket.socketpair()
    with left, right:
        assert left.fileno() > 1024
        assert not readable_within(left, 0.0)
        right.close()
        assert readable_within(left, 0.0)
