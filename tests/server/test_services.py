"""``BrokerServices`` names what handlers use of the broker, and ``Broker`` provides it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from twisted.internet.task import Clock

from meta.config import ZkConfig
from meta.server.broker import Broker
from meta.server.services import BrokerServices
from tests.store.conftest import broker_config

SERVER_DIR = Path(__file__).resolve().parent.parent.parent / "meta" / "server"
# Modules that hold the broker itself, take the running Broker for its lifecycle (main.py and
# its start-up hooks of the replication roles, sync_roles.py), or read its whole public state
# as facts (json_stats.py, called by Broker.render_stats with itself).
NOT_HANDLERS = ("broker.py", "services.py", "main.py", "sync_roles.py", "json_stats.py")


def _members() -> set[str]:
    tree = ast.parse((SERVER_DIR / "services.py").read_text(encoding="utf-8"))
    (protocol,) = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == BrokerServices.__name__
    ]
    names = set()
    for node in protocol.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def _handler_sources() -> list[Path]:
    return [path for path in sorted(SERVER_DIR.glob("*.py")) if path.name not in NOT_HANDLERS]


def test_a_broker_has_every_member_the_handlers_may_use(tmp_path):
    config = broker_config(str(tmp_path), zookeeper=ZkConfig(connect="127.0.0.1:1", enabled=False))
    broker = Broker(config, Clock())
    members = _members()
    assert len(members) > 10
    for name in sorted(members):
        assert hasattr(broker, name), name
        if callable(getattr(BrokerServices, name, None)):
            assert callable(getattr(broker, name)), name


def test_every_member_is_used_by_a_handler_or_the_connection_protocol():
    text = "\n".join(path.read_text(encoding="utf-8") for path in _handler_sources())
    unused = [
        name for name in sorted(_members()) if not re.search(rf"\b(broker|_broker)\.{name}\b", text)
    ]
    assert unused == []


def test_every_broker_parameter_of_the_handlers_is_typed_with_the_protocol():
    untyped = []
    for path in _handler_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for argument in node.args.args + node.args.kwonlyargs:
                    annotation = argument.annotation
                    named = annotation is not None and ast.unparse(annotation)
                    if argument.arg == "broker" and named != BrokerServices.__name__:
                        untyped.append(f"{path.name}:{node.name}")
    assert untyped == []
