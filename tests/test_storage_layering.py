"""The storage package imports only itself and ``protocol``, and its modules form no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import replog.storage

STORAGE = Path(replog.storage.__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every ``replog.*`` module imported anywhere in the file, function bodies included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("replog")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("replog"):
            found.add(node.module)
    return found


def storage_graph() -> dict[str, set[str]]:
    return {
        f"replog.storage.{p.stem}": imported_modules(p)
        for p in STORAGE.glob("*.py")
        if p.stem != "__init__"
    }


def test_storage_imports_only_protocol_and_itself() -> None:
    for module, imports in storage_graph().items():
        outside = {m for m in imports if not m.startswith(("replog.storage", "replog.protocol"))}
        assert not outside, f"{module} imports higher layers: {sorted(outside)}"


def test_storage_modules_form_no_import_cycle() -> None:
    graph = storage_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycle = path[path.index(module) :] + [module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
