"""Dependencies point down: no import cycle among contextstore's modules, counting every import
statement (at the top, inside functions, and under ``if TYPE_CHECKING:``). The loops that drive
plans outside the stores (``_streaming``, ``_listing``, ``_compacting``) and the turns take the
small driver interfaces they declare, not the store classes. No Redis needed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "contextstore"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path, known: dict[str, Path], node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package's modules one import statement of module ``name`` names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    if node.level:
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    found = {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement it holds."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        statements = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]
        graph[name] = set().union(*(imported(name, path, known, s) for s in statements))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_holds_every_kind_of_import_statement():
    graph = import_graph()
    assert "contextstore.plans.build" in graph["contextstore.sync"]  # from .plans import build as build_plans
    assert "contextstore.errors" in graph["contextstore.plans.build"]  # from ..errors import ...
    assert "contextstore.keys" in graph["contextstore.streams"]  # an import inside a function
    assert sum(len(targets) for targets in graph.values()) > 200


def test_no_import_cycle():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    "graph",
    [{"a": {"b"}, "b": {"a"}}, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}],
)
def test_the_cycle_finder_finds_a_cycle(graph):
    assert len(cycles(graph)) == 1


def test_what_the_stores_use_imports_no_store_class():
    graph = import_graph()
    for helper in ("_streaming", "_listing", "_compacting", "turns", "compactor", "streams", "topology", "plans.base"):
        assert not graph[f"contextstore.{helper}"] & {"contextstore.sync", "contextstore.aio"}, helper
