"""The slave's seam (``meta.slave.services``) is what the broker really offers.

``typing.Protocol`` is structural and nothing checks it at run time, so this test compares
each protocol member with the implementing class: same kind (property or method) and the
same parameter names, so a rename on either side fails here rather than in a slave.
"""

from __future__ import annotations

import inspect

import pytest

from meta.server.broker import Broker
from meta.server.registry import BrokerRegistry
from meta.slave.services import SlaveBroker, SlaveRegistry, SlaveStore
from meta.store.manager import StoreManager

INSTANCE_ATTRIBUTES = {"config", "store", "registry"}
"""``Broker`` members set in ``__init__`` rather than declared on the class."""


def members(protocol: type) -> dict[str, object]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [(SlaveBroker, Broker), (SlaveStore, StoreManager), (SlaveRegistry, BrokerRegistry)],
    ids=["broker", "store", "registry"],
)
def test_every_protocol_member_exists_with_the_same_parameters(protocol, implementation):
    assert members(protocol)
    for name, member in members(protocol).items():
        if isinstance(member, property):
            assert name in INSTANCE_ATTRIBUTES or isinstance(
                getattr(implementation, name, None), property
            ), f"{implementation.__name__}.{name}"
            continue
        actual = getattr(implementation, name, None)
        assert callable(actual), f"{implementation.__name__} has no {name}"
        assert parameters(actual) == parameters(member), f"{implementation.__name__}.{name}"


def test_the_broker_sets_its_config_store_and_registry_in_init():
    source = inspect.getsource(Broker.__init__)
    for name in INSTANCE_ATTRIBUTES:
        assert f"self.{name} =" in source
