"""The layering of STYLE.md, checked on the source: lower layers never import higher ones,
and neither modules nor packages import each other in a cycle.

Every module under ``src/replog`` is parsed with ``ast`` (nothing is imported). From the
bottom: ``common`` (the clock, the internal topics); ``protocol`` (with the errors and
types several layers share) and ``security``; ``storage`` and ``replog/config.py``;
``zk``; ``replication``; ``controller``; ``coordinator`` and other broker services;
``server``; then ``cluster``, ``cli``, ``spark``, ``demo`` and ``console``. A module may import its own layer or any layer
below; two packages of one layer may not both import the other.

* Layering counts every import: at module level, inside functions, and under
  ``if TYPE_CHECKING:`` (a type from a higher layer is still a dependency on it).
* Module cycles count every import except those under ``if TYPE_CHECKING:``, which never
  run. An import inside a function counts: deferring it hides a cycle, it does not
  remove it. Package cycles count every import, as layering does.
* The checks are also run on small planted trees (``tmp_path``), so that each is seen
  to fail on the bug it is there for.

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

# Top-level package (or module) of replog -> its layer, from the bottom. Packages on
# one layer may import each other in one direction only (no package cycle).
LAYERS: dict[str, int] = {
    "common": 0,  # the clock, the internal topics' names: imports nothing of replog
    "protocol": 1,  # frames, schemas, error codes and the errors and types layers share
    "security": 1,
    "storage": 2,
    "config": 2,
    "zk": 3,
    "replication": 4,
    "controller": 5,
    "coordinator": 6,
    "server": 7,
    "cluster": 8,
    "cli": 8,
    "spark": 8,
    "demo": 8,
    "console": 8,
}

# Upward imports being removed by work in progress elsewhere, as exact
# (importer, imported) module pairs; each entry says why it is tolerated. Only
# src/replog/replication/ and src/replog/storage/ may appear here. An entry that no
# longer matches an import fails the test: delete it when the import goes.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

# Cycles being broken elsewhere, as frozensets of the modules forming them (same rules).
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(src: Path) -> dict[str, Path]:
    """Every module of the ``replog`` package under ``src``, by dotted name."""
    return {_module_name(src, path): path for path in sorted((src / PACKAGE).rglob("*.py"))}


MODULES: dict[str, Path] = find_modules(SRC)


def _layer(module: str, layers: dict[str, int] = LAYERS) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # the replog package itself
        return 0
    return layers[parts[1]]


def _package(module: str) -> str:
    """The top-level package (or module) of replog that ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` starts with (``name`` may end in an
    attribute: ``replog.zk.data.BrokerInfo`` -> ``replog.zk.data``)."""
    while name and name not in modules:
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


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, bool]]:
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
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                yield resolved, id(node) in type_checking


def import_graph(
    include_type_checking: bool, modules: dict[str, Path] = MODULES
) -> dict[str, set[str]]:
    return {
        module: {
            imported
            for imported, only_typing in _imports(module, path, modules)
            if include_type_checking or not only_typing
        }
        for module, path in modules.items()
    }


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto replog's top-level packages (no self-edges)."""
    packages: dict[str, set[str]] = {}
    for importer, imports in graph.items():
        edges = packages.setdefault(_package(importer), set())
        edges.update(_package(m) for m in imports if _package(m) != _package(importer))
    return packages


def upward_imports(
    graph: dict[str, set[str]], layers: dict[str, int] = LAYERS
) -> set[tuple[str, str]]:
    """``(importer, imported)`` for every import of a higher layer."""
    return {
        (importer, imported)
        for importer, imports in graph.items()
        for imported in imports
        if _layer(imported, layers) > _layer(importer, layers)
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
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


def _describe(graph: dict[str, set[str]], cycles: list[frozenset[str]]) -> str:
    return "\n".join(
        "  " + ", ".join(f"{a} -> {b}" for a in sorted(c) for b in sorted(graph[a]) if b in c)
        for c in cycles
    )


def test_every_top_level_package_has_a_layer() -> None:
    unplaced = sorted(
        {m.split(".")[1] for m in MODULES if "." in m} - LAYERS.keys(),
    )
    assert not unplaced, f"add these to LAYERS (and to STYLE.md's Layers): {unplaced}"


def test_the_import_graph_is_read() -> None:
    """Guards against a parser that sees nothing and lets every check pass."""
    graph = import_graph(include_type_checking=True)
    assert "replog.controller.controller" in graph["replog.server.broker"]
    assert "replog.zk.data" in graph["replog.controller.controller"]  # `from replog.zk import data`
    assert "replog.zk.fencing" in graph["replog.zk.controller_znodes"]
    assert "replog.zk.controller_znodes" in graph["replog.zk.client"]
    assert "replog.protocol.records" in graph["replog.storage.log"]
    assert "replog.storage" in package_graph(graph)["replog.server"]


def test_no_module_imports_a_higher_layer() -> None:
    upward = upward_imports(import_graph(include_type_checking=True))
    for importer, _ in ALLOWED_UPWARD:
        assert importer.startswith(("replog.replication.", "replog.storage.")), importer
    violations = sorted(upward - ALLOWED_UPWARD.keys())
    assert not violations, "imports of a higher layer:\n" + "\n".join(
        f"  {a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})" for a, b in violations
    )
    stale = sorted(ALLOWED_UPWARD.keys() - upward)
    assert not stale, f"allowlisted imports that are gone; remove them: {stale}"


def test_no_import_cycles() -> None:
    graph = import_graph(include_type_checking=False)
    cycles = [frozenset(c) for c in strongly_connected(graph)]
    for members in ALLOWED_CYCLES:
        assert all(m.startswith(("replog.replication.", "replog.storage.")) for m in members)
    violations = [c for c in cycles if c not in ALLOWED_CYCLES]
    assert not violations, "import cycles:\n" + _describe(graph, violations)
    stale = [c for c in ALLOWED_CYCLES if c not in cycles]
    assert not stale, f"allowlisted cycles that are gone; remove them: {stale}"


def test_no_package_cycles() -> None:
    """Two packages never import each other, even on one layer and even only for type
    checking: that is how ``protocol`` and ``storage`` once leaned on each other."""
    graph = package_graph(import_graph(include_type_checking=True))
    cycles = [frozenset(c) for c in strongly_connected(graph)]
    assert not cycles, "package cycles:\n" + _describe(graph, cycles)


def test_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]


# --- the checks on a planted tree: each would fail on the bug it is there for ----------


def _plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return find_modules(root)


PLANTED_BASE = {
    "replog/__init__.py": "",
    "replog/protocol/__init__.py": "",
    "replog/protocol/records.py": "X = 1\n",
    "replog/storage/__init__.py": "",
    "replog/storage/log.py": "from replog.protocol.records import X\n",
    "replog/config.py": "from replog.storage import log\n",
}


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    clean = import_graph(True, _plant(tmp_path, PLANTED_BASE))
    assert upward_imports(clean) == set()
    # protocol leaning on storage, as protocol/errors.py once did (in a function, too)
    modules = _plant(
        tmp_path,
        {"replog/protocol/errors.py": "def f():\n    from replog.storage.log import Y\n"},
    )
    assert upward_imports(import_graph(True, modules)) == {
        ("replog.protocol.errors", "replog.storage.log")
    }
    # under TYPE_CHECKING it is still a dependency on the higher layer
    modules = _plant(
        tmp_path,
        {
            "replog/protocol/errors.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from replog.storage import log\n"
            )
        },
    )
    assert upward_imports(import_graph(True, modules)) == {
        ("replog.protocol.errors", "replog.storage.log")
    }


def test_a_planted_module_cycle_is_found(tmp_path: Path) -> None:
    modules = _plant(
        tmp_path,
        {
            **PLANTED_BASE,
            "replog/storage/segment.py": "from . import log\n",
            "replog/storage/log.py": "def f():\n    from replog.storage.segment import S\n",
        },
    )
    assert strongly_connected(import_graph(False, modules)) == [
        {"replog.storage.log", "replog.storage.segment"}
    ]
    # a TYPE_CHECKING import never runs: no cycle
    _plant(
        tmp_path,
        {
            "replog/storage/log.py": (
                "import typing\nif typing.TYPE_CHECKING:\n    from replog.storage import segment\n"
            )
        },
    )
    assert strongly_connected(import_graph(False, find_modules(tmp_path))) == []


def test_a_planted_package_cycle_is_found(tmp_path: Path) -> None:
    """Same layer, no module cycle, yet the packages depend on each other."""
    modules = _plant(
        tmp_path,
        {
            **PLANTED_BASE,
            "replog/security/__init__.py": "",
            "replog/security/sasl.py": "from replog.protocol.records import X\n",
            "replog/protocol/client.py": "from replog.security.sasl import M\n",
        },
    )
    graph = import_graph(True, modules)
    assert upward_imports(graph) == set()
    assert strongly_connected(graph) == []
    assert strongly_connected(package_graph(graph)) == [{"replog.protocol", "replog.security"}]
