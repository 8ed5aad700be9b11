"""The tree shows the layers, and dependencies point down. No Redis needed.

- No import cycle among contextstore's modules, counting every import statement (at the top,
  inside functions, and under ``if TYPE_CHECKING:``).
- Each top-level module and subpackage says in its docstring what it may import ("May import:")
  and whether it does I/O ("no I/O"); the import graph is checked against what they say.
- At most 12 modules at the top of the package.
- No module touches a private attribute another module defines (the stores, ``drivers.store`` /
  ``sync`` / ``aio``, are one unit): the loops outside the stores and the turns take the driver
  interface of ``plans.driver``."""

from __future__ import annotations

import ast
import re
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
    assert "contextstore.plans.build" in graph["contextstore.drivers.sync"]  # from .plans import build as build_plans
    assert "contextstore.errors" in graph["contextstore.plans.build"]  # from ..errors import ...
    assert "contextstore.core.keys" in graph["contextstore.core.streams"]  # an import inside a function
    assert sum(len(targets) for targets in graph.values()) > 200


def test_no_import_cycle():
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    "graph",
    [{"a": {"b"}, "b": {"a"}}, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}],
)
def test_the_cycle_finder_finds_a_cycle(graph):
    assert len(cycles(graph)) == 1


#: what a unit that says "no I/O" must not import
IO_MODULES = {"redis", "asyncio", "subprocess", "httpx", "requests", "http", "aiohttp", "urllib.request"}
#: the units whose privates are one: the two stores and what they share
STORES = {"contextstore.drivers.store", "contextstore.drivers.sync", "contextstore.drivers.aio"}
#: namedtuple's methods, public though spelled with an underscore
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make"}


def unit_of(module: str) -> str:
    """The top-level module or subpackage a module belongs to ("contextstore" for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "contextstore"


def units() -> dict[str, Path]:
    """Each top-level module and subpackage, and the file whose docstring states its rule."""
    found = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    found.update({p.parent.name: p for p in PACKAGE.glob("*/__init__.py")})
    return found


def rule(path: Path) -> tuple[set[str], bool]:
    """What a docstring's "May import:" paragraph allows, and whether it says "no I/O"."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    match = re.search(r"May import:(.*?)(?:\n\n|$)", doc, re.S)
    assert match, f"{path}: no 'May import:' paragraph in its docstring"
    paragraph = " ".join(match.group(1).split())
    return set(re.findall(r"``([\w.]+)``", paragraph.split(";")[0])), "no I/O" in paragraph


def unit_edges() -> set[tuple[str, str]]:
    """(importer, imported) for every import between two different units."""
    graph = import_graph()
    return {(unit_of(m), unit_of(t)) for m, targets in graph.items() for t in targets if unit_of(m) != unit_of(t)}


def outside_imports(path: Path) -> set[str]:
    """The modules outside the package one file imports, by their full dotted names."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return {n for n in names if not n.startswith("contextstore")}


def is_io(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in IO_MODULES)


def test_the_top_of_the_package_holds_at_most_12_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 12, sorted(p.name for p in PACKAGE.glob("*.py"))


def test_every_unit_says_what_it_may_import():
    for path in units().values():
        rule(path)


def test_every_import_between_units_is_one_its_docstring_allows():
    rules = {name: rule(path)[0] for name, path in units().items()}
    rules["contextstore"] = set(units())  # the root re-exports the public names
    rules["__main__"] = {"cli"}
    assert sorted((a, b) for a, b in unit_edges() if b not in rules[a]) == []


def test_the_units_without_io_import_none():
    for name, path in units().items():
        if not rule(path)[1]:
            continue
        files = [path] if path.name != "__init__.py" else list(path.parent.rglob("*.py"))
        io = {(f.name, n) for f in files for n in outside_imports(f) if is_io(n)}
        assert io == set(), name


def private_reaches(path: Path, own: set[str]) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` / ``cls`` and ``_name`` is not defined in ``own``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in own and node.attr not in NAMEDTUPLE:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def defined_names(path: Path) -> set[str]:
    """Every name a module defines: functions, classes, assigned names and attributes."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def test_no_module_touches_a_private_attribute_another_module_defines():
    known = modules()
    stores = set().union(*(defined_names(known[m]) for m in STORES))
    reaches = []
    for name, path in known.items():
        own = defined_names(path) | (stores if name in STORES else set())
        reaches += private_reaches(path, own)
    assert reaches == []


def test_the_private_check_finds_a_reach_in(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f(store):\n    return store._client, self._ok, parts._replace()\n")
    assert private_reaches(path, set()) == ["m.py:2: store._client"]


def test_what_the_stores_use_imports_no_store_class():
    graph = import_graph()
    helpers = ("drivers.streaming", "drivers.listing", "drivers.compacting", "turns", "compactor", "plans.driver")
    for helper in helpers:
        assert not graph[f"contextstore.{helper}"] & {"contextstore.drivers.sync", "contextstore.drivers.aio"}, helper
