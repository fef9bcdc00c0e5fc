"""The open-file limit at start-up: raised to the hard limit, a WARNING when still low."""

from __future__ import annotations

import logging
import resource
from types import SimpleNamespace

from meta.server.descriptor_limit import (
    RESERVED_DESCRIPTORS,
    descriptors_needed,
    raise_descriptor_limit,
)


class Limits:
    """A stand-in for the ``resource`` module holding one RLIMIT_NOFILE pair."""

    RLIMIT_NOFILE = resource.RLIMIT_NOFILE
    RLIM_INFINITY = resource.RLIM_INFINITY

    def __init__(self, soft: int, hard: int, refuse: bool = False) -> None:
        self.pair = (soft, hard)
        self.refuse = refuse

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == self.RLIMIT_NOFILE
        return self.pair

    def setrlimit(self, which: int, pair: tuple[int, int]) -> None:
        if self.refuse:
            raise ValueError("not allowed")
        self.pair = pair


def config(partitions: tuple[int, ...] = (4, 8), connections_max: int = 1000, dashboard=-1):
    topics = tuple(SimpleNamespace(num_partitions=count) for count in partitions)
    return SimpleNamespace(
        topics=topics,
        connections_max=connections_max,
        http_connections_max=300,
        dashboard_connections_max=50,
        dashboard_http_port=dashboard,
        total_connections_max=0,
    )


def test_descriptors_needed_counts_partitions_connections_and_a_reserve():
    assert descriptors_needed(config()) == 12 + 1000 + RESERVED_DESCRIPTORS


def test_descriptors_needed_counts_every_listening_port():
    assert descriptors_needed(config(dashboard=8120), http=True) == (
        12 + 1000 + 300 + 50 + RESERVED_DESCRIPTORS
    )


def test_the_warning_names_every_port_cap(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    raise_descriptor_limit(config(dashboard=0), Limits(1100, 1100), http=True)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "maxHttpConnections=300" in warning and "maxDashboardConnections=50" in warning


def test_the_soft_limit_is_raised_to_the_hard_limit():
    limits = Limits(1024, 65536)
    assert raise_descriptor_limit(config(), limits) == 65536
    assert limits.pair == (65536, 65536)


def test_a_limit_below_the_need_is_logged_as_a_warning(caplog):
    caplog.set_level(logging.INFO, "meta.server")
    assert raise_descriptor_limit(config(connections_max=4096), Limits(1024, 1024)) == 1024
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "RLIMIT_NOFILE) is 1024" in warnings[0] and "maxConnections=4096" in warnings[0]


def test_a_limit_that_suffices_logs_no_warning(caplog):
    raise_descriptor_limit(config(connections_max=10), Limits(1024, 1024))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_refused_raise_is_logged_and_the_soft_limit_stays(caplog):
    limits = Limits(256, 4096, refuse=True)
    assert raise_descriptor_limit(config(connections_max=10), limits) == 256
    assert "cannot raise the open-file limit from 256 to 4096" in caplog.text
