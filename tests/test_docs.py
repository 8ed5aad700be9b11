"""The docs stand on their own and say what the code does: links stay inside the repository,
no internal jargon, and the redis-cli examples match what a real server prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import contextstore as cs

from support import key

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(doc):
    text = doc.read_text()
    assert "shared/" not in text and "contract.md" not in text
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to a missing file: {target}"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.name != "CHANGELOG.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_jargon(doc):
    text = doc.read_text()
    assert not re.search(r"\bseed \d|§|\bthe contract\b", text, re.I), doc.name


def test_public_docstrings_exist_and_carry_no_jargon():
    for name in cs.__all__:
        doc = getattr(cs, name).__doc__ or ""
        assert doc.strip(), f"{name} has no docstring"
        assert not re.search(r"\bseed \d|§|contract", doc, re.I), f"{name}: {doc}"


def test_the_architecture_map_names_every_module_and_helper_file():
    """docs/architecture.md is the map: every module of the package and every Lua helper file is
    named in it (a new one that the map does not name fails here)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = {p.stem for p in (ROOT / "contextstore").rglob("*.py") if not p.stem.startswith("__")}
    helpers = {p.stem for p in (ROOT / "lua" / "lib").glob("*.lua")}
    unnamed = sorted(m for m in modules | helpers if not re.search(rf"\b_?{m}\b", text))
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"


def test_the_guides_error_table_names_every_exception_class():
    """docs/guide.md's Errors table has a row for every exception class a call may raise."""
    import contextstore.errors as errors

    text = (ROOT / "docs" / "guide.md").read_text()
    table = text[text.index("## Errors") :].split("\n\n")[1]
    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.ContextStoreError)}
    assert classes and not {c for c in classes if f"| `{c}`" not in table}


def test_the_event_table_names_every_kind_and_its_fields():
    """docs/observability.md's table of events has a row for every kind, naming each field the
    event carries besides those every event has."""
    import msgspec

    import contextstore.events as events

    rows = [line for line in (ROOT / "docs" / "observability.md").read_text().splitlines() if line.startswith("| `")]
    tagged = events.AnyEvent.__args__
    assert len(tagged) == len(events.KINDS) > 20
    for cls in tagged:
        tag = f"`{cls.__struct_config__.tag}`"
        row = next((r for r in rows if tag in r.split("|")[1]), None)
        assert row is not None, f"no row for {tag}"
        fields = {f.name for f in msgspec.structs.fields(cls)} - {"id", "window_id", "at"}
        assert not {f for f in fields if f"`{f}`" not in row}, (tag, row)


def test_the_metric_table_names_every_instrument():
    """docs/observability.md's table of metrics (their one record) has a row for every
    instrument ``metrics.py`` creates."""
    import contextstore.metrics as metrics

    text = (ROOT / "docs" / "observability.md").read_text()
    names = set(re.findall(r'"(agents\.context\.[a-z_]+)"', Path(metrics.__file__).read_text()))
    assert len(names) >= 11
    assert not sorted(n for n in names if f"| `{n}` |" not in text)


#: logging's method for each level -> the level as the log table names it
LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "error": "ERROR"}


def test_the_log_table_names_every_message():
    """docs/observability.md's table of log messages has a row for every message ``logs.py``
    writes (its text up to the first placeholder)."""
    import ast

    import contextstore.logs as logs

    rows = [line for line in (ROOT / "docs" / "observability.md").read_text().splitlines() if line.startswith("| ")]
    tree = ast.parse(Path(logs.__file__).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") in LEVELS]
    assert len(calls) >= 10
    for call in calls:
        assert isinstance(call.args[0], ast.Constant), ast.unparse(call)
        lead = call.args[0].value.split("%")[0].strip()
        level = LEVELS[call.func.attr]  # type: ignore[attr-defined]
        assert any(r.startswith(f"| {level} | `{lead}") for r in rows), (level, lead)


def test_the_layout_page_names_every_key_and_meta_field():
    """docs/redis-layout.md names every key of a window and every field of its ``:meta`` hash
    (a per-type counter as ``tokens:<type>``)."""
    from contextstore.core.keys import KEY_NAMES
    from contextstore.core.layout import Meta

    text = (ROOT / "docs" / "redis-layout.md").read_text()
    fields = [v for n, v in vars(Meta).items() if n.isupper() and isinstance(v, str)]
    assert len(fields) > 30
    assert not [k for k in KEY_NAMES if f":{k}" not in text]
    assert not [f for f in fields if f"`{f}`" not in text and f"`{f}<type>`" not in text]


def test_the_docs_name_every_public_method_and_property():
    """Every public method and property of the stores and windows is named somewhere in the docs
    or the README (the reference pages render docstrings, but a reader finds a name by the pages)."""
    text = "\n".join(p.read_text() for p in DOCS if p.name != "CHANGELOG.md")
    shells = (cs.ContextStore, cs.ContextWindow, cs.AsyncContextStore, cs.AsyncContextWindow)
    names = {n for shell in shells for n in dir(shell) if not n.startswith("_")}
    assert len(names) > 50
    assert not sorted(n for n in names if not re.search(rf"[`.]{n}\b", text))


def test_the_hgetall_example_numbers_fields_as_redis_cli_does(store, r, prefix):
    """docs/redis-layout.md shows `HGETALL ctx:{agent-7}:meta` with redis-cli's numbering."""
    text = (ROOT / "docs" / "redis-layout.md").read_text()
    block = text.split("HGETALL 'ctx:{agent-7}:meta'", 1)[1].split("\n\n", 1)[0]
    shown = {int(n): field for n, field in re.findall(r"(\d+)\) \"([a-z_:]+)\"", block)}
    assert len(shown) >= 6
    w = store.window("agent-7", max_tokens=8192)
    w.add("Is this safe?", type="user_message", role="user")
    flat = [x.decode() for pair in r.hgetall(key(prefix, "agent-7", "meta")).items() for x in pair]
    for n, field in shown.items():
        assert flat[n - 1] == field, f"redis-cli would print {flat[n - 1]!r} at {n}), the doc says {field!r}"
