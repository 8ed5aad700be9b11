"""The verbs that branch a conversation: ``fork`` (a new window up to an item) and ``rewind``
(go back to an item; ``--undo`` puts back what a rewind took). Each is the library's call."""

from __future__ import annotations

import click

from .app import Env, cli, emit_json, json_option, pass_env, window_argument
from .views import visible


@cli.command("fork")
@window_argument
@click.argument("new_window")
@click.option("--at", help="the item (or a version) the fork ends at; default: now")
@json_option
@pass_env
def fork(env: Env, window: str, new_window: str, at: str | None, as_json: bool) -> None:
    """Make NEW_WINDOW with WINDOW's items up to an item, leaving WINDOW as it is.

    Refused, with nothing written, when NEW_WINDOW exists or --at is not an item or version of
    WINDOW (or would cut a tool call from its results)."""
    child = env.window(window).fork(new_window, at=at)
    lineage = child.lineage()
    if as_json:
        emit_json({"window": new_window, "parent": lineage.parent, "fork_point": lineage.fork_point})
        return
    held = child.stats().total_items
    click.echo(visible(f"forked {window} at {lineage.fork_point or '(empty)'} into {new_window}: {held} items"))


@cli.command("rewind")
@window_argument
@click.argument("target", metavar="ITEM_ID|REWIND_ID")
@click.option("--undo", is_flag=True, help="put back what rewind REWIND_ID took")
@json_option
@pass_env
def rewind(env: Env, window: str, target: str, undo: bool, as_json: bool) -> None:
    """Take WINDOW back to item ITEM_ID (everything added after it goes, kept for
    archive_ttl_seconds); with --undo, put back what rewind REWIND_ID took.

    Refused, with nothing changed, while another worker's turn holds the window."""
    win = env.window(window)
    if undo:
        restored = win.undo_rewind(target)
        if as_json:
            emit_json({"items_restored": restored})
        else:
            click.echo(f"put back {restored} items")
        return
    rewind_id = win.rewind(target)
    if as_json:
        emit_json({"rewind_id": rewind_id})
        return
    click.echo(visible(f"rewound {window} to {target} ({rewind_id}); undo: rewind {window} {rewind_id} --undo"))
