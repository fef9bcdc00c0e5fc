"""``meta.config`` sits below every other layer: it imports only ``meta.errors``, the protocol's
constants and itself, at module level or inside functions, so the store, the server and the
slave can import it without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONFIG_DIR = Path(__file__).resolve().parents[2] / "meta" / "config"
ALLOWED = ("meta.config", "meta.errors", "meta.protocol.commands")
MODULES = sorted(CONFIG_DIR.glob("*.py"))


def imported_meta_modules(path: Path) -> set[str]:
    """Every ``meta`` module the file imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {name for name in found if name == "meta" or name.startswith("meta.")}


def test_the_config_package_is_found():
    assert (CONFIG_DIR / "__init__.py").is_file() and len(MODULES) > 1


@pytest.mark.parametrize("path", MODULES, ids=[path.name for path in MODULES])
def test_config_imports_no_higher_layer(path: Path):
    above = sorted(
        name
        for name in imported_meta_modules(path)
        if not any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED)
    )
    assert not above, f"meta/config/{path.name} imports {above}"
