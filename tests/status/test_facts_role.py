"""The role a broker reports (``/api/v1/broker``, ``stats json:``, ``metaq_broker_info``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from meta.status.facts import broker_role


@pytest.mark.parametrize(
    ("slave_id", "sync", "role"),
    [
        (-1, None, "master"),
        (0, None, "async_slave"),
        (-1, SimpleNamespace(role="samsa"), "sync_master"),
        (-1, SimpleNamespace(role="gregor"), "sync_slave"),
    ],
)
def test_each_ha_role_is_named(slave_id, sync, role):
    assert broker_role(SimpleNamespace(slave_id=slave_id, sync=sync)) == role


def test_a_broker_without_a_sync_attribute_is_a_master():
    assert broker_role(SimpleNamespace(slave_id=-1)) == "master"
