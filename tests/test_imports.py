"""The import graph of ``meta/`` has no cycle (STYLE 16, 27: arrows point down the layers).

The graph is built with ``ast`` from every module under ``meta/``. An edge ``a -> b`` means
module ``a`` imports module ``b`` when it runs: at module level or inside a function (a
function-local import still runs, only later, and hiding a cycle behind one is exactly what
this test exists to catch). Imports under ``if TYPE_CHECKING:`` are left out: they never run,
so they cannot make an import order fail, and annotations legitimately name types of layers
above (a callback's owner, say) without any runtime dependency.

``from package import name`` is an edge to ``package.name`` when that is a module, else to
``package``. Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``; those
implicit edges are left out, because a package's ``__init__`` is its public face that
re-exports its submodules, and counting them would make every submodule of such a package
part of a cycle through its own face.

Layers are checked too: inside every package, its children (subpackages and modules, each
subpackage standing for everything under it) must import each other without a cycle, so
``meta.slave`` importing ``meta.server`` while ``meta.server`` imports ``meta.slave`` fails
even when no single module cycle exists.

"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = REPO_ROOT / "meta"


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """The dotted name of the module at ``path`` under ``root`` (``__init__`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, skipping ``if TYPE_CHECKING:`` bodies."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for orelse in child.orelse:
                found.extend(_runtime_imports(ast.Module(body=[orelse], type_ignores=[])))
        else:
            found.extend(_runtime_imports(child))
    return found


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module ``node`` imports from (resolving ``from . import x``)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_edges(path: Path, modules: set[str], root: Path) -> set[str]:
    """The modules of ``modules`` that the module at ``path`` imports at run time."""
    importer = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in _runtime_imports(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        source = _absolute(node, importer, path.name == "__init__.py")
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            targets.add(submodule if submodule in modules else source)
    return {target for target in targets if target in modules and target != importer}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module name -> the modules it imports at run time, for every module in the package."""
    root = package_dir.parent
    paths = sorted(package_dir.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    return {module_name(path, root): import_edges(path, modules, root) for path in paths}


def child_of(package: str, module: str) -> str | None:
    """The child of ``package`` holding ``module``; ``package`` for its own ``__init__``."""
    if module == package:
        return package
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1 :].split(".")[0]


def layer_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The imports between ``package``'s children, from the module graph ``graph``."""
    layers: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        source = child_of(package, importer)
        if source is None:
            continue
        layers.setdefault(source, set())
        for target in targets:
            destination = child_of(package, target)
            if destination is not None and destination != source:
                layers[source].add(destination)
    return layers


def all_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every module cycle and every cycle between the children of a package, as text."""
    packages = sorted(name for name in graph if (REPO_ROOT / name.replace(".", "/")).is_dir())
    found = [" -> ".join(cycle) for cycle in find_cycles(graph)]
    for package in packages:
        found += [f"[in {package}] " + " -> ".join(cycle)
                  for cycle in find_cycles(layer_graph(graph, package))]  # fmt: skip
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path of module names) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; meta/ is far below the recursion limit.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first member of ``component`` (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its component")


def test_an_import_cycle_is_found_and_named(tmp_path: Path):
    """The checker itself: a cycle through a function-local import is reported by name."""
    package = tmp_path / "meta"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import meta.b\n")
    (package / "b.py").write_text("def f():\n    from meta import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import meta.b\nfrom . import a\n"
    )
    assert find_cycles(import_graph(package)) == [["meta.a", "meta.b", "meta.c", "meta.a"]]


def test_type_checking_imports_are_not_edges(tmp_path: Path):
    package = tmp_path / "meta"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import meta.b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from meta.a import x\n"
    )
    graph = import_graph(package)
    assert graph["meta.b"] == set()
    assert find_cycles(graph) == []


CLIENT_LAYERS = [
    "http", "factory", "produce", "consume", "zk", "local", "transact", "fetch", "net", "message",
    "cluster",
]  # fmt: skip
"""``meta.client``'s children from the top down (README, Architecture): each imports only
children listed after it; the package's ``__init__`` (its public face) may import any."""


@pytest.fixture(scope="module")
def meta_graph() -> dict[str, set[str]]:
    """The import graph of ``meta/``, built once for the tests that only read it."""
    return import_graph(PACKAGE_DIR)


def test_the_client_layers_import_only_downwards(meta_graph):
    layers = layer_graph(meta_graph, "meta.client")
    rank = {f"meta.client.{name}": index for index, name in enumerate(CLIENT_LAYERS)}
    assert set(layers) - {"meta.client"} == set(rank), "CLIENT_LAYERS must list every child"
    upward = [
        f"{source} -> {target}"
        for source, targets in layers.items()
        if source != "meta.client"
        for target in targets
        if rank[target] <= rank[source]
    ]
    assert not upward, "client layers importing upwards: " + "; ".join(sorted(upward))


def test_layers_of_a_package_are_checked():
    graph = {
        "meta.server.handlers": {"meta.slave.plan"},
        "meta.slave.plan": set(),
        "meta.slave.replicator": {"meta.server.reload"},
        "meta.server.reload": set(),
    }
    assert find_cycles(graph) == []
    assert find_cycles(layer_graph(graph, "meta")) == [["meta.server", "meta.slave", "meta.server"]]


def test_meta_has_no_import_cycle(meta_graph):
    cycles = find_cycles(meta_graph)
    assert not cycles, "import cycles in meta/: " + "; ".join(" -> ".join(c) for c in cycles)


def test_packages_have_no_import_cycle_between_their_children(meta_graph):
    cycles = all_cycles(meta_graph)
    assert not cycles, "import cycles in meta/: " + "; ".join(cycles)
