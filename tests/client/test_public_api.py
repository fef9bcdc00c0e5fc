"""The client's public API as a typed Python package: PEP 561 marker and annotated methods."""

from __future__ import annotations

import configparser
import inspect
from pathlib import Path

import pytest

import meta
import meta.client

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ("__init__", "__enter__", "__exit__")


def public_functions() -> list[tuple[str, object]]:
    found = []
    for name in meta.client.__all__:
        value = getattr(meta.client, name)
        if inspect.isfunction(value):
            found.append((name, value))
        elif inspect.isclass(value):
            for attribute, member in vars(value).items():
                public = not attribute.startswith("_") or attribute in HOOKS
                if public and inspect.isfunction(member) and member.__module__.startswith("meta"):
                    found.append((f"{name}.{attribute}", member))
    return found


def test_the_package_ships_its_py_typed_marker_as_package_data():
    assert (Path(meta.__file__).parent / "py.typed").is_file()
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert "py.typed" in setup["options.package_data"]["meta"].split()


@pytest.mark.parametrize(
    "name, function",
    [pytest.param(name, function, id=name) for name, function in public_functions()],
)
def test_every_public_client_function_is_annotated(name, function):
    signature = inspect.signature(function)
    named = [
        parameter
        for parameter in signature.parameters.values()
        if parameter.name not in ("self", "cls")
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    assert all(parameter.annotation is not parameter.empty for parameter in named), name
    assert signature.return_annotation is not signature.empty, name


def test_the_factory_producers_and_consumers_are_context_managers():
    for name in ("MetaMessageSessionFactory", "MessageProducer", "AsyncMessageProducer",
                 "OrderedMessageProducer", "XAMessageProducer", "MessageConsumer"):  # fmt: skip
        cls = getattr(meta.client, name)
        assert callable(getattr(cls, "__enter__", None)), name
        assert callable(getattr(cls, "__exit__", None)), name
