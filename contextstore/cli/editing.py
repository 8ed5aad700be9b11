"""The verbs that change a window: ``add``, ``rm``, ``pin``, ``unpin``, ``priority``, ``compact``,
``clear``, ``delete`` and ``restore``. Each is one atomic call of the library; only ``add`` and
``restore`` create a window that does not exist yet."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec
from rich.console import Console
from rich.table import Table

from ..errors import WindowNotFoundError
from ..types import CompactionStrategy, ContextSnapshot, ItemType
from .app import BadInput, CommandFailed, Env, cli, emit_json, json_option, pass_env, window_argument
from .compactor import helper_options, helpers_of
from .views import plain, visible

STRATEGIES = [s.value for s in CompactionStrategy]


def _metadata(text: str | None) -> dict[str, Any] | None:
    """The ``--metadata`` option: a JSON object."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"--metadata is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadInput("--metadata must be a JSON object")
    return value


@cli.command("add")
@window_argument
@click.argument("content", required=False)
@click.option(
    "--type",
    "type_",
    type=click.Choice([t.value for t in ItemType]),
    default="text",
    show_default=True,
    help="the item's type",
)
@click.option(
    "--priority", type=click.IntRange(0, 100), default=50, show_default=True, help="0-100; higher stays longer"
)
@click.option("--pin", is_flag=True, help="pin it: never evicted or compacted, always in a build")
@click.option("--role", help="chat role (user, assistant, system, tool)")
@click.option("--group", help="keep it together with the other items of this group")
@click.option("--id", "item_id", help="your own id for it (a retry with the same content is safe)")
@click.option("--source-ref", help="where it came from (a file, a URL)")
@click.option("--metadata", help="a JSON object stored with it")
@json_option
@pass_env
def add(
    env: Env,
    window: str,
    content: str | None,
    type_: str,
    priority: int,
    pin: bool,
    role: str | None,
    group: str | None,
    item_id: str | None,
    source_ref: str | None,
    metadata: str | None,
    as_json: bool,
) -> None:
    """Add an item and print its id.

    The content is CONTENT, or stdin when CONTENT is - or missing. Creates the window (as a
    50-item window) when it does not exist yet."""  # fmt: skip
    text = sys.stdin.read() if content is None or content == "-" else content
    stored = (
        env.store()
        .window(window)
        .add(
            text,
            type=type_,
            priority=priority,
            pinned=pin,
            role=role,
            group=group,
            id=item_id,
            source_ref=source_ref,
            metadata=_metadata(metadata),
        )
    )
    if as_json:
        emit_json(stored)
    else:
        click.echo(visible(stored.id or ""))


def _report(done: bool, what: str, item_id: str, window: str) -> None:
    if not done:
        raise CommandFailed(f"no item {item_id!r} in window {window!r}")
    click.echo(visible(f"{what} {item_id}"))


@cli.command("rm")
@window_argument
@click.argument("item_ids", nargs=-1, required=True, metavar="ITEM_ID...")
@pass_env
def rm(env: Env, window: str, item_ids: tuple[str, ...]) -> None:
    """Remove items by id.

    Exit status 1 if one is not there (the others are still removed)."""
    win = env.window(window)
    missing = [i for i in item_ids if not win.remove(i)]
    for item_id in item_ids:
        if item_id not in missing:
            click.echo(visible(f"removed {item_id}"))
    if missing:
        raise CommandFailed(f"no item {', '.join(map(repr, missing))} in window {window!r}")


@cli.command("pin")
@window_argument
@click.argument("item_id")
@pass_env
def pin(env: Env, window: str, item_id: str) -> None:
    """Pin an item: never evicted, always built.

    A pinned item is never evicted or compacted and always goes into a build."""
    _report(env.window(window).pin(item_id), "pinned", item_id, window)


@cli.command("unpin")
@window_argument
@click.argument("item_id")
@pass_env
def unpin(env: Env, window: str, item_id: str) -> None:
    """Unpin an item."""
    _report(env.window(window).unpin(item_id), "unpinned", item_id, window)


@cli.command("priority")
@window_argument
@click.argument("item_id")
@click.argument("priority", type=click.IntRange(0, 100))
@pass_env
def priority(env: Env, window: str, item_id: str, priority: int) -> None:
    """Set an item's priority (0-100)."""
    _report(env.window(window).update_priority(item_id, priority), f"priority {priority} for", item_id, window)


def _plan_table(plan: Any) -> Table:
    table = Table(title=f"{plan.strategy.value}: would free {plan.tokens_freed} tokens, usage after "
                  f"{plan.usage_percent_after:.1f}%", title_justify="left", pad_edge=False)  # fmt: skip
    for name in ("id", "type", "tokens", "action", "frees", "group"):
        table.add_column(name, justify="right" if name in ("tokens", "frees") else "left", no_wrap=True)
    for item in plan.items:
        table.add_row(plain(item.id), item.type.value, str(item.tokens), item.action, str(item.tokens_freed),
                      plain(item.group or ""))  # fmt: skip
    return table


@cli.command("compact")
@window_argument
@click.option("--strategy", type=click.Choice(STRATEGIES), help="default: the window's default strategy")
@click.option(
    "--target", type=click.FloatRange(0, 100), default=70.0, show_default=True, help="usage percent to get down to"
)
@click.option("--dry-run", is_flag=True, help="show what would go, change nothing")
@click.option("--query", help="what matters now (the selective strategy scores items against it)")
@helper_options
@json_option
@pass_env
def compact(
    env: Env,
    /,
    window: str,
    strategy: str | None,
    target: float,
    dry_run: bool,
    query: str | None,
    as_json: bool,
    **helpers: Any,
) -> None:
    """Compact a window now, or --dry-run to see what goes."""  # fmt: skip
    store = env.store(**helpers_of(**helpers))
    win = store.window(window, create=False)
    if dry_run:
        plan = win.plan_compaction(strategy, target)
        if as_json:
            emit_json(plan)
        else:
            Console().print(_plan_table(plan))
        return
    freed = win.compact(strategy, target, query=query)
    if as_json:
        emit_json({"tokens_freed": freed})
    else:
        click.echo(f"freed {freed} tokens")


@cli.command("clear")
@window_argument
@click.option("--include-pinned", is_flag=True, help="remove pinned items too")
@pass_env
def clear(env: Env, window: str, include_pinned: bool) -> None:
    """Remove every item; keeps the window's config.

    Pinned items stay unless --include-pinned."""
    click.echo(f"removed {env.window(window).clear(include_pinned)} items")


@cli.command("delete")
@window_argument
@pass_env
def delete(env: Env, window: str) -> None:
    """Delete a window: items, config and events.

    Exit status 1 if it does not exist."""
    if not env.unread(window).delete():
        raise WindowNotFoundError(window)
    click.echo(f"deleted {window}")


def read_snapshot(path: Path) -> ContextSnapshot:
    """A snapshot file written by ``snapshot -o`` or ``export`` (a clear error if it is not one)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=ContextSnapshot)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    except msgspec.ValidationError as exc:
        raise BadInput(f"{path} is not a contextstore snapshot: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadInput(f"{path} is not JSON: {exc}") from None


@cli.command("restore")
@window_argument
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@pass_env
def restore(env: Env, window: str, file: Path) -> None:
    """Restore a snapshot file into a window.

    Replaces the window's items and config with the snapshot's, atomically; any window id, so
    a window can be copied or moved."""
    snap = read_snapshot(file)
    env.store().window(window).restore(snap)
    click.echo(f"restored {len(snap.items)} items into {window}")
