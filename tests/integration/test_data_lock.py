"""Two broker processes on one dataPath: the second refuses to start; kill -9 frees it."""

from __future__ import annotations

import pytest

from meta.protocol.commands import Data
from tests.integration.broker_process import BrokerProcess


def test_a_second_broker_on_the_same_data_path_refuses_to_start(tmp_path):
    """Goal: a slave or second broker given the master's dataPath must not append to its
    segment files. Method: start one broker, then another with its own port and the same
    dataPath; it must exit naming the directory, and the first must keep serving. After a
    kill -9 of the first, the kernel lock is gone and the second starts."""
    first = BrokerProcess(tmp_path / "first")
    second = BrokerProcess(tmp_path / "second", system={"dataPath": first.data_path})
    try:
        first.start()
        with pytest.raises(RuntimeError, match="broker exited") as refused:
            second.start()
        assert f"data directory {first.data_path} is in use by another broker" in str(refused.value)
        assert f"pid {first.process.pid}" in str(refused.value)
        with first.connect() as connection:
            connection.send_bytes(b"put test 0 2 0 1\r\nok")
            assert connection.receive().code == 200
        first.kill()
        second.start()
        with second.connect() as connection:
            connection.send_bytes(b"get test g 0 0 1024 2\r\n")
            served = connection.receive()  # the first broker's message, from its files
            assert isinstance(served, Data) and served.data.endswith(b"ok")
    finally:
        second.stop()
        first.stop()
