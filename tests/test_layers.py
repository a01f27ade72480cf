"""The layering of STYLE.md, checked on the source: lower layers never import higher ones,
and no modules import each other in a cycle.

Every module under ``src/replog`` is parsed with ``ast`` (nothing is imported). From the
bottom: ``protocol``, ``storage`` and ``replog/config.py``; ``zk``; ``replication``;
``controller``; ``coordinator`` and other broker services; ``server``; then ``cluster``,
``cli``, ``spark`` and ``demo``. A module may import its own layer or any layer below.

* Layering counts every import: at module level, inside functions, and under
  ``if TYPE_CHECKING:`` (a type from a higher layer is still a dependency on it).
* Cycles count every import except those under ``if TYPE_CHECKING:``, which never run.
  An import inside a function counts: deferring it hides a cycle, it does not remove it.

An edge goes to the most specific module named: ``from replog.zk import data`` is an edge
to ``replog.zk.data``, ``from replog.zk.data import BrokerInfo`` one to ``replog.zk.data``.
A package's ``__init__`` is a module of its own, reached only when imported by name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "replog"

# Top-level package (or module) of replog -> its layer, from the bottom.
LAYERS: dict[str, int] = {
    "protocol": 0,
    "storage": 0,
    "config": 0,
    "security": 0,
    "zk": 1,
    "replication": 2,
    "controller": 3,
    "coordinator": 4,
    "server": 5,
    "cluster": 6,
    "cli": 6,
    "spark": 6,
    "demo": 6,
    "console": 6,
}

# Upward imports being removed by work in progress elsewhere, as exact
# (importer, imported) module pairs; each entry says why it is tolerated. Only
# src/replog/replication/ and src/replog/storage/ may appear here. An entry that no
# longer matches an import fails the test: delete it when the import goes.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

# Cycles being broken elsewhere, as frozensets of the modules forming them (same rules).
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {
    _module_name(path): path for path in sorted((SRC / PACKAGE).rglob("*.py"))
}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # the replog package itself
        return 0
    return LAYERS[parts[1]]


def _resolve(name: str) -> str | None:
    """The longest known module that ``name`` starts with (``name`` may end in an
    attribute: ``replog.zk.data.BrokerInfo`` -> ``replog.zk.data``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of every node inside an ``if TYPE_CHECKING:`` body."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for statement in node.body:
                inside.update(id(n) for n in ast.walk(statement))
    return inside


def _imports(module: str, path: Path) -> Iterator[tuple[str, bool]]:
    """``(imported replog module, only under TYPE_CHECKING)`` for each import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    type_checking = _type_checking_nodes(tree)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package[: len(package) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            resolved = _resolve(target)
            if resolved is not None and resolved != module:
                yield resolved, id(node) in type_checking


def _graph(include_type_checking: bool) -> dict[str, set[str]]:
    return {
        module: {
            imported
            for imported, only_typing in _imports(module, path)
            if include_type_checking or not only_typing
        }
        for module, path in MODULES.items()
    }


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative; only components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_every_top_level_package_has_a_layer() -> None:
    unplaced = sorted(
        {m.split(".")[1] for m in MODULES if "." in m} - LAYERS.keys(),
    )
    assert not unplaced, f"add these to LAYERS (and to STYLE.md's Layers): {unplaced}"


def test_the_import_graph_is_read() -> None:
    """Guards against a parser that sees nothing and lets every check pass."""
    graph = _graph(include_type_checking=True)
    assert "replog.controller.controller" in graph["replog.server.broker"]
    assert "replog.zk.data" in graph["replog.controller.controller"]  # `from replog.zk import data`
    assert "replog.zk.fencing" in graph["replog.zk.client"]


def test_no_module_imports_a_higher_layer() -> None:
    graph = _graph(include_type_checking=True)
    upward = {
        (importer, imported)
        for importer, imports in graph.items()
        for imported in imports
        if _layer(imported) > _layer(importer)
    }
    for importer, _ in ALLOWED_UPWARD:
        assert importer.startswith(("replog.replication.", "replog.storage.")), importer
    violations = sorted(upward - ALLOWED_UPWARD.keys())
    assert not violations, "imports of a higher layer:\n" + "\n".join(
        f"  {a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})" for a, b in violations
    )
    stale = sorted(ALLOWED_UPWARD.keys() - upward)
    assert not stale, f"allowlisted imports that are gone; remove them: {stale}"


def test_no_import_cycles() -> None:
    graph = _graph(include_type_checking=False)
    cycles = [frozenset(c) for c in _strongly_connected(graph)]
    for members in ALLOWED_CYCLES:
        assert all(m.startswith(("replog.replication.", "replog.storage.")) for m in members)
    violations = [c for c in cycles if c not in ALLOWED_CYCLES]
    assert not violations, "import cycles:\n" + "\n".join(
        "  " + ", ".join(f"{a} -> {b}" for a in sorted(c) for b in sorted(graph[a]) if b in c)
        for c in violations
    )
    stale = [c for c in ALLOWED_CYCLES if c not in cycles]
    assert not stale, f"allowlisted cycles that are gone; remove them: {stale}"


def test_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _strongly_connected(graph) == [{"a", "b", "c"}]
