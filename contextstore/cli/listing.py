"""The verbs that list windows: ``ls`` (``--tree``: forks under their parents) and its old name
``windows``. A window that does not read is listed, marked, never hiding the others."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from .. import ContextStore, CorruptWindowError
from .app import Env, cli, emit_json, json_option, pass_env
from .views import windows_table


@cli.command("ls")
@click.option("--tree", is_flag=True, help="each fork under the window it was made from (--json: with its parent)")
@click.option(
    "--verify", "check", is_flag=True,
    help="read each window whole, its blobs too (verify()), and show what is wrong with it",
)  # fmt: skip
@json_option
@pass_env
def ls(env: Env, tree: bool, check: bool, as_json: bool) -> None:
    """List windows with items, tokens and usage (--verify: and what verify() finds)."""
    store = env.store()
    ids = store.windows()
    parents = {wid: _parent(store, wid) for wid in ids} if tree else {}
    rows = []
    for wid, depth in tree_order(ids, parents) if tree else [(wid, 0) for wid in ids]:
        row = _window_row(store, wid)
        if check:
            row["problems"] = _problems(store, wid)
        rows.append({**row, "parent": parents[wid], "depth": depth} if tree else row)
    if as_json:
        emit_json(rows)
    else:
        Console().print(windows_table(rows))


def _parent(store: ContextStore, window_id: str) -> str | None:
    """The window a window was forked from (None: none, or a window that does not read)."""
    try:
        return store.handle(window_id).lineage().parent
    except CorruptWindowError:
        return None


def _problems(store: ContextStore, window_id: str) -> list[str]:
    """What ``verify()`` finds wrong with a window (what makes it unreadable, if it is)."""
    try:
        return store.handle(window_id).verify().problems
    except CorruptWindowError as exc:
        return [str(exc)]


def _window_row(store: ContextStore, window_id: str) -> dict[str, Any]:
    """``ls``'s row of a window: its counts, or (a corrupt window) what is wrong with it, so that
    one window that does not read never hides the others."""
    try:
        stats = store.handle(window_id).stats()
    except CorruptWindowError as exc:
        return {"window_id": window_id, "items": None, "tokens": None, "max_tokens": None, "usage_percent": None,
                "corrupt": str(exc)}  # fmt: skip
    return {
        "window_id": window_id,
        "items": stats.total_items,
        "tokens": stats.current_tokens,
        "max_tokens": stats.max_tokens,
        "usage_percent": stats.usage_percent,
    }


def tree_order(ids: list[str], parents: dict[str, str | None]) -> list[tuple[str, int]]:
    """``ids`` as a tree: each window whose parent is not listed (sorted), then the forks made
    from it, deeper by one; with each its depth. A window no root leads to (stored lineage that
    loops) is listed as a root."""
    children: dict[str | None, list[str]] = {}
    for wid in sorted(ids):
        parent = parents.get(wid)
        children.setdefault(parent if parent in parents else None, []).append(wid)
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for root in [*children.get(None, []), *sorted(ids)]:
        todo = [(root, 0)]
        while todo:
            wid, depth = todo.pop()
            if wid in seen:
                continue
            seen.add(wid)
            out.append((wid, depth))
            todo += [(child, depth + 1) for child in reversed(children.get(wid, []))]
    return out


@cli.command("windows", hidden=True)
@pass_env
def windows(env: Env) -> None:
    """The window ids, one per line (the old name of ``ls``)."""
    for wid in env.store().windows():
        click.echo(wid)
