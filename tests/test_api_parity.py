"""The sync and the asyncio API are twins: the same public names with the same signatures (the
async ones awaitable) and the same docstrings (but for the asyncio wording). The package keeps
its shape: a docstring on every public function and class, modules of at most ~350 lines,
functions of at most ~50."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import contextstore as cs

ROOT = Path(__file__).resolve().parent.parent

#: the sync window reads its numbers through properties; the async one through ``await stats()``
SYNC_ONLY_PROPERTIES = {
    "max_tokens",
    "max_items",
    "current_tokens",
    "available_tokens",
    "usage_percent",
    "item_count",
    "compaction_threshold",
    "default_strategy",
}
#: methods that do no I/O, so neither twin awaits them
NO_IO = {"handle", "turn"}  # no I/O: a handle; a context manager (its enter does the I/O)
#: the context-manager protocols differ by name (``with`` / ``async with``)
PROTOCOLS = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


def public(cls: type) -> dict[str, object]:
    return {n: getattr(cls, n) for n in dir(cls) if not n.startswith("_") or n in PROTOCOLS}


@pytest.mark.parametrize(
    ("sync", "aio"), [(cs.ContextStore, cs.AsyncContextStore), (cs.ContextWindow, cs.AsyncContextWindow)]
)
def test_same_public_names_and_signatures(sync, aio):
    s, a = public(sync), public(aio)
    assert set(s) - PROTOCOLS - SYNC_ONLY_PROPERTIES == set(a) - PROTOCOLS
    for name in sorted(set(s) & set(a) - PROTOCOLS):
        s_attr, a_attr = s[name], a[name]
        if isinstance(s_attr, property):
            assert isinstance(a_attr, property), name
            continue
        s_sig, a_sig = inspect.signature(s_attr), inspect.signature(a_attr)
        assert list(s_sig.parameters) == list(a_sig.parameters), name
        for p in s_sig.parameters:
            sp, ap = s_sig.parameters[p], a_sig.parameters[p]
            a_annotation = ap.annotation  # run_compactor(stop) takes the Event of its world
            if isinstance(a_annotation, str):
                a_annotation = a_annotation.replace("asyncio.Event", "threading.Event")
            assert (sp.kind, sp.default, sp.annotation) == (ap.kind, ap.default, a_annotation), f"{name}({p})"
        is_classmethod = isinstance(inspect.getattr_static(sync, name), classmethod)
        if not is_classmethod and name not in NO_IO:
            returns_async = str(a_sig.return_annotation).startswith("AsyncIterator[")
            assert inspect.iscoroutinefunction(a_attr) or returns_async, f"{aio.__name__}.{name} is not async"
            assert not inspect.iscoroutinefunction(s_attr), f"{sync.__name__}.{name} is async"
        twins = {
            "AsyncContextWindow": "ContextWindow",
            "AsyncContextStore": "ContextStore",
            "turns.AsyncTurn": "turns.Turn",
        }
        a_ret = twins.get(a_sig.return_annotation, a_sig.return_annotation).replace("AsyncIterator[", "Iterator[")
        assert s_sig.return_annotation == a_ret, name


#: the asyncio twins whose docstring adds a note to the sync one's (what awaiting changes)
ASYNC_NOTES = {"run_compactor"}  # summaries are awaited: the store wants an async summarizer


def said(doc: str | None) -> str:
    """A docstring without the asyncio wording (``async with``, ``await batch.ack()``), its
    lines joined: what a twin says."""
    return " ".join(re.sub(r"\b(async|await) ", "", doc or "").split())


@pytest.mark.parametrize(
    ("sync", "aio"), [(cs.ContextStore, cs.AsyncContextStore), (cs.ContextWindow, cs.AsyncContextWindow)]
)
def test_twins_say_the_same(sync, aio):
    s, a = public(sync), public(aio)
    for name in sorted(set(s) & set(a) - PROTOCOLS):
        s_doc, a_doc = said(inspect.getdoc(s[name])), said(inspect.getdoc(a[name]))
        assert s_doc, f"{sync.__name__}.{name} has no docstring"
        if name in ASYNC_NOTES:
            assert a_doc.startswith(s_doc + " ") and len(a_doc) > len(s_doc), f"{aio.__name__}.{name}"
        else:
            assert a_doc == s_doc, f"{aio.__name__}.{name} says something else than {sync.__name__}.{name}"


def _undocumented(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    missing = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = child.name
                if not name.startswith("_") and ast.get_docstring(child) is None:
                    missing.append(f"{path.relative_to(ROOT)}:{child.lineno} {where}{name}")
                if isinstance(child, ast.ClassDef) and not name.startswith("_"):
                    visit(child, f"{name}.")

    visit(tree, "")
    return missing


def test_every_public_function_and_class_has_a_docstring():
    missing = [m for p in sorted((ROOT / "contextstore").rglob("*.py")) for m in _undocumented(p)]
    assert missing == []


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 50
#: the two shells list every public method of a store and a window, a three-line call each: they
#: grow with the API, not with logic (which lives in the plans)
SHELL_MODULE_LINES = {"sync.py": 450, "aio.py": 450}


def test_modules_and_functions_stay_short():
    too_long = []
    for path in sorted((ROOT / "contextstore").rglob("*.py")):
        text = path.read_text()
        shell = path.parent.name == "drivers" and path.name in SHELL_MODULE_LINES
        if text.count("\n") > (SHELL_MODULE_LINES[path.name] if shell else MAX_MODULE_LINES):
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []
