"""Seed 003: context-to-string — the markdown format, byte for byte, and its known limitations."""

from __future__ import annotations

import pytest

import contextstore as cs


def test_seed_example_byte_exact_with_lisp(store):
    w = store.window("s003-main")
    w.add("(defun foo () 42)", type="code", metadata={"filename": "src/example.lisp", "start_line": 10, "end_line": 12})
    w.add("ERROR: Division by zero", type="error")
    w.add("This is a note", type="text")
    assert w.to_markdown(language="lisp") == (
        "## Context\n\n"
        "### Code (from src/example.lisp:10-12)\n```lisp\n(defun foo () 42)\n```\n\n"
        "### Error\n```lisp\nERROR: Division by zero\n```\n\n"
        "### Text\n```lisp\nThis is a note\n```\n\n"
    )


def test_empty_context(store):
    assert store.window("s003-empty").to_markdown(language="lisp") == "## Context\n\n"


def test_mixed_metadata(store):
    w = store.window("s003-mixed")
    w.add("(defun with-lines () ...)", metadata={"filename": "src/example.lisp", "start-line": 10, "end-line": 15})
    w.add("(defun filename-only () ...)", metadata={"filename": "src/other.lisp"})
    w.add("(defun no-metadata () ...)")
    assert w.to_markdown(language="lisp") == (
        "## Context\n\n"
        "### Code (from src/example.lisp:10-15)\n```lisp\n(defun with-lines () ...)\n```\n\n"
        "### Code (from src/other.lisp)\n```lisp\n(defun filename-only () ...)\n```\n\n"
        "### Code\n```lisp\n(defun no-metadata () ...)\n```\n\n"
    )


def test_manual_inspection_block(store):
    w = store.window("s003-manual")
    w.add("(+ 1 2)", type="code", metadata={"filename": "test.lisp", "start_line": 5, "end_line": 5})
    out = w.to_markdown(language="lisp")
    for part in ("## Context", "### Code", "(from test.lisp:5-5)", "```lisp", "(+ 1 2)"):
        assert part in out


def test_headings_for_every_type(store):
    w = store.window("s003-headings")
    for t in cs.ItemType:
        w.add("x", type=t)
    headings = [line for line in w.to_markdown().splitlines() if line.startswith("### ")]
    assert headings[:2] == ["### System-Prompt", "### Instruction"]
    assert "### Repl-History" in headings and "### Custom" in headings and "### Code" in headings


@pytest.mark.parametrize(
    "content",
    [
        "Example: ```code here```",
        "````\nfour\n````",
        "```",
        "a `single` and ``double`` and ```````seven",
    ],
)
def test_fence_cannot_be_broken(store, content):
    w = store.window("s003-fence")
    w.clear()
    w.add(content, type="text")
    out = w.to_markdown(language="lisp")
    body = out[len("## Context\n\n### Text\n") :]
    fence_line = body.split("\n", 1)[0]
    fence = fence_line[: len(fence_line) - len("lisp")]
    assert set(fence) == {"`"} and len(fence) >= 3
    longest = max(len(run) for run in content.replace("`", " ` ").split() if set(run) == {"`"}) if "`" in content else 0
    assert len(fence) > max(longest, 2)
    # the content sits verbatim between the opening and the closing fence, and only there
    assert body == f"{fence}lisp\n{content}\n{fence}\n\n"
    assert (f"\n{fence}\n") not in f"\n{content}\n"


def test_language_from_metadata_or_extension(store):
    w = store.window("s003-lang")
    w.add("print(1)", metadata={"filename": "a.py"})
    w.add("SELECT 1", metadata={"language": "sql"})
    w.add("plain", type="text")
    out = w.to_markdown()
    assert "```py\nprint(1)\n```" in out
    assert "```sql\nSELECT 1\n```" in out
    assert "### Text\n```\nplain\n```" in out


def test_filtered_like_items(store):
    w = store.window("s003-filter")
    for i in range(4):
        w.add(f"e{i}", type="error")
        w.add(f"c{i}", type="code")
    out = w.to_markdown(types=["error"], limit=2, language="lisp")
    assert out == "## Context\n\n### Error\n```lisp\ne2\n```\n\n### Error\n```lisp\ne3\n```\n\n"


def test_bad_language_is_typed(store):
    w = store.window("s003-badlang")
    with pytest.raises(cs.InvalidOptionsError):
        w.to_markdown(language="li sp")
