"""The broker's advertised address: Java's local-address rule, and a warning for loopback.

In-process, on a ``MemoryReactorClock``: nothing is bound (a broker without ``hostName``
would listen on every interface).
"""

from __future__ import annotations

import logging
import socket

from twisted.internet.testing import MemoryReactorClock

from meta import local_address
from meta.config import ZkConfig
from meta.server import broker as broker_module
from meta.server.broker import Broker, advertised_host
from tests.server.memory_broker import closing_broker
from tests.store.conftest import broker_config, topic_config

TABLE = {"lo": [(socket.AF_INET, "127.0.0.1")], "eth0": [(socket.AF_INET, "192.0.2.2")]}


def config(tmp_path, host_name: str = ""):
    return broker_config(
        str(tmp_path),
        topics=(topic_config("test", str(tmp_path), num_partitions=1),),
        zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False),
        host_name=host_name,
    )


def started(tmp_path, monkeypatch, table, host_name: str = "") -> Broker:
    monkeypatch.setattr(local_address, "interface_addresses", lambda: table)
    reactor = MemoryReactorClock()
    broker = closing_broker(Broker(config(tmp_path, host_name), reactor), reactor)
    broker.start(listen=True)
    return broker


def test_without_host_name_the_first_interface_address_is_advertised(tmp_path, monkeypatch):
    """The resolver says 127.0.1.1 for our name (Debian's /etc/hosts); Java, like us, walks the
    interfaces instead."""
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(2, 1, 6, "", ("127.0.1.1", 0))])
    broker = started(tmp_path, monkeypatch, TABLE)
    assert broker.uri.startswith("meta://192.0.2.2:")


def test_host_name_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(local_address, "interface_addresses", lambda: TABLE)
    assert advertised_host(config(tmp_path, "broker1.example")) == "broker1.example"


def test_a_loopback_address_on_every_interface_is_warned_about(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger=broker_module.log.name):
        started(tmp_path, monkeypatch, {"lo": TABLE["lo"]})
    (warning,) = [r for r in caplog.records if "loopback" in r.getMessage()]
    assert "meta://127.0.0.1:" in warning.getMessage() and "set hostName" in warning.getMessage()


def test_no_warning_with_a_routable_address_or_a_host_name(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger=broker_module.log.name):
        started(tmp_path / "a", monkeypatch, TABLE)
        started(tmp_path / "b", monkeypatch, {"lo": TABLE["lo"]}, host_name="127.0.0.1")
    assert not [r for r in caplog.records if "loopback" in r.getMessage()]
