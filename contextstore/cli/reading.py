"""The reading verbs of one window: ``show``, ``get``, ``stats``, ``build``, ``snapshot``,
``verify`` and ``events`` (and the old names ``items``, ``markdown``). None of them creates a
window: a missing one is an error (exit 1). Listing windows: ``cli/listing.py``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal, cast

import click
from rich.console import Console

from .. import Prices, WindowNotFoundError
from ..core import parts
from ..events import KINDS as EVENT_KINDS
from ..render.select import build_key
from ..types import CHAT_FORMATS, BuildOptions, ChatFormat, ContextItem, ItemType
from .app import BadInput, CommandFailed, Env, cli, emit_json, json_option, pass_env, prices_option, window_argument
from .views import (
    CONTENT_WIDTH,
    event_line,
    item_view,
    items_lines,
    items_table,
    json_array,
    json_text,
    stats_json,
    stats_view,
    turn_lines,
    visible,
)

TYPE_NAMES = [t.value for t in ItemType]
#: the width of ``show``'s table when stdout is no terminal (a pipe, a file): rows are not cut
#: to 80 columns, the content column shows the first line up to ``PIPED_CONTENT`` characters
PIPED_WIDTH, PIPED_CONTENT = 400, 200
#: ``show`` on a terminal reads a screen's worth: its height less the table's frame and the lines
#: under it, and never fewer rows than this
SCREEN_OTHER_LINES, SCREEN_MIN_ROWS = 9, 5
Order = Literal["sections", "priority", "arrival"]


def _types_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--type", "types", multiple=True, type=click.Choice(TYPE_NAMES), help="only items of this type (repeatable)"
    )(fn)


@cli.command("show")
@window_argument
@click.option(
    "--order",
    type=click.Choice(["arrival", "build"]),
    default="arrival",
    show_default=True,
    help="arrival: the order items came in, which a chat build keeps for the conversation; build: "
    "type rank, then priority, then arrival (the order of a text build's sections)",
)
@_types_option
@click.option("--limit", type=click.IntRange(min=0), help="only the N most recent items (arrival order)")
@click.option(
    "--all", "every", is_flag=True, help="every item on a terminal too (by default it shows a screen's worth)"
)
@json_option
@pass_env
def show(
    env: Env, window: str, order: str, types: tuple[str, ...], limit: int | None, every: bool, as_json: bool
) -> None:
    """Show a window's items as a table, in arrival order unless asked for build order.

    Columns: id, type, priority, tokens, pinned, group, age and the first line of content. On a
    terminal, in arrival order, it reads and shows the most recent screen's worth (--all: every
    item); piped, or with --json, every item."""
    win = env.window(window)
    console, content = Console(), CONTENT_WIDTH
    if not console.is_terminal:  # piped: as wide as the rows need, never 80 columns
        console, content = Console(width=PIPED_WIDTH), PIPED_CONTENT
    screen = None
    if console.is_terminal and not (as_json or every) and limit is None and order == "arrival":
        screen = max(SCREEN_MIN_ROWS, console.height - SCREEN_OTHER_LINES)
    wanted = list(types) or None
    found: Iterable[ContextItem]
    if order == "arrival" and limit is None and screen is None:
        found = win.iter_items(wanted)  # every item, read page by page as it is written out
    elif order == "arrival" or limit is not None:
        found = win.items(types=wanted, limit=limit if limit is not None else screen)
        if order == "build":
            found.sort(key=build_key)
    else:
        found = win.ordered_items(types=wanted)
    if as_json:
        for part in json_array(found):
            click.echo(part, nl=False)
        click.echo()
        return
    title = f"{window} ({order} order)"
    if not console.is_terminal:  # piped: plain lines, as wide as the rows need
        for line in items_lines(found, title, content):
            click.echo(line)
    else:
        console.print(items_table(list(found), title=title, width=console.width, content_width=content))
    on_screen = len(found) if isinstance(found, list) and screen is not None else -1  # a screen's worth read
    if on_screen == screen and (held := win.stats().total_items) > on_screen and not types:
        console.print(
            f"the last {on_screen} of {held} items: --all lists every one, --limit N the last N",
            markup=False,
            highlight=False,
        )
    for line in turn_lines(win.turn_status()):
        console.print(line, markup=False)
    if console.is_terminal and (lineage := win.lineage()).parent:
        console.print(visible(f"forked from {lineage.parent} at {lineage.fork_point}"), markup=False, highlight=False)


def _write_part(item: ContextItem, n: int | None, out: Path | None) -> None:
    """``get --part N --out FILE``: the part's data to FILE (a text part's text may go to stdout)."""
    if n is None:
        raise BadInput("--out needs --part N (the content part to write)")
    held = [] if isinstance(item.content, str) else item.content
    if n >= len(held):
        raise BadInput(f"item {item.id!r} has {len(held)} content part(s); --part {n} is not one")
    chosen = held[n]
    data, media_type = parts.data_of(chosen)
    if chosen["type"] == "text":
        data = chosen["text"].encode()
    if data is None:
        raise CommandFailed(f"part {n} holds no data of its own (a URL or a file id): {parts.label(chosen, sha=True)}")
    if out is None:
        if chosen["type"] != "text":
            raise BadInput(f"part {n} is {media_type or chosen['type']} data: give --out FILE to write it")
        click.echo(visible(chosen["text"]))
        return
    out.write_bytes(data)
    click.echo(f"wrote {len(data)} bytes of part {n} ({parts.label(chosen, sha=True)}) to {out}")


@cli.command("get")
@window_argument
@click.argument("item_id")
@click.option("--part", type=click.IntRange(min=0), help="only content part N (0: the first), its data decoded")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="write --part to this file")
@json_option
@pass_env
def get(env: Env, window: str, item_id: str, part: int | None, out: Path | None, as_json: bool) -> None:
    """Show one item whole: every field and its full content (a part that is not text as a
    label, e.g. ``[image/png 1280x800 312 KB]``). With --part N --out FILE, write that part's
    data (an image's bytes, a text part's text) to FILE."""
    item = env.window(window).get(item_id)
    if item is None:
        raise CommandFailed(f"no item {item_id!r} in window {window!r}")
    if part is not None or out is not None:
        _write_part(item, part, out)
        return
    if as_json:
        emit_json(item)
    else:
        Console(soft_wrap=True).print(item_view(item))


@cli.command("items", hidden=True)
@window_argument
@_types_option
@click.option("--limit", type=click.IntRange(min=0), help="only the N most recent items")
@json_option
@click.pass_context
def items(ctx: click.Context, window: str, types: tuple[str, ...], limit: int | None, as_json: bool) -> None:
    """A window's items in arrival order (the old name of ``show --order arrival``)."""
    ctx.invoke(show, window=window, order="arrival", types=types, limit=limit, as_json=as_json)


@cli.command("stats")
@window_argument
@prices_option
@json_option
@pass_env
def stats(env: Env, window: str, prices: Prices | None, as_json: bool) -> None:
    """Show usage, counters and tokens per type (with --prices, what the reported usage cost)."""
    found = env.window(window).stats()
    if as_json:
        emit_json(stats_json(found, prices))
    else:
        Console().print(stats_view(found, prices))


@cli.command("build")
@window_argument
@click.option("--max-tokens", type=click.IntRange(min=1), help="token limit of this build (default: the window's)")
@click.option(
    "--reserve", type=click.IntRange(min=0), default=1000, show_default=True, help="tokens kept free for the response"
)
@click.option(
    "--max-history",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="most recent user/assistant messages to consider",
)
@click.option(
    "--order",
    type=click.Choice(["sections", "priority", "arrival"]),
    default="sections",
    show_default=True,
    help="how the prompt is ordered",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown", *CHAT_FORMATS]),
    default="text",
    show_default=True,
    help="a prompt string, the window as markdown, or chat messages",
)
@click.option("--language", help="with --format markdown: the language word on every code fence")
@json_option
@pass_env
def build(
    env: Env,
    window: str,
    max_tokens: int | None,
    reserve: int,
    max_history: int,
    order: str,
    fmt: str,
    language: str | None,
    as_json: bool,
) -> None:
    """Print the prompt or chat messages a build gives.

    --format text or markdown prints a prompt; openai or anthropic the chat messages (JSON)."""  # fmt: skip
    win = env.window(window)
    if fmt == "markdown":
        text = win.to_markdown(language=language)
        if as_json:
            emit_json({"markdown": text})
        else:
            sys.stdout.write(visible(text))
        return
    limit = max_tokens if max_tokens is not None else win.stats().max_tokens
    if limit is not None and reserve >= limit:
        raise BadInput(
            f"--reserve {reserve} leaves no room for a prompt within {limit} tokens (window {window!r}): "
            f"pass --reserve N with N < {limit}, or a larger --max-tokens"
        )
    opts = BuildOptions(
        max_tokens=max_tokens, reserve_for_response=reserve, max_history_items=max_history, order=cast(Order, order)
    )
    if fmt == "text":
        built = win.build_structured(opts)
        if as_json:
            emit_json(built)
        else:
            click.echo(visible(built.content))
        return
    messages = win.build_messages_structured(opts, format=cast(ChatFormat, fmt))
    emit_json(messages if as_json else messages.messages)


@cli.command("markdown", hidden=True)
@window_argument
@click.option("--language", help="language word on every code fence (default: from each item's metadata)")
@click.pass_context
def markdown(ctx: click.Context, window: str, language: str | None) -> None:
    """The window as markdown (the old name of ``build --format markdown``)."""
    ctx.invoke(build, window=window, fmt="markdown", language=language)


@cli.command("snapshot")
@window_argument
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), help="write to this file instead of stdout"
)
@pass_env
def snapshot(env: Env, window: str, output: str | None) -> None:
    """Print or write a JSON snapshot of a window.

    ``restore`` takes it back, into any window id."""
    data = json_text(env.window(window).snapshot())
    if output:
        Path(output).write_text(data + "\n", encoding="utf-8")
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(data)


@cli.command("verify")
@window_argument
@json_option
@pass_env
def verify(env: Env, window: str, as_json: bool) -> int:
    """Check a window against every invariant.

    Exit status 1 when one is broken."""
    report = env.unread(window).verify()
    if not report.exists:
        raise WindowNotFoundError(window)
    if as_json:
        emit_json(report)
    elif report.ok:
        click.echo(
            f"OK: window {report.window_id}: {report.items} items, {report.tokens} tokens, every invariant holds"
        )
    else:
        click.echo(f"BROKEN: window {report.window_id}: {len(report.problems)} problem(s)")
        for problem in report.problems:
            click.echo(f"  - {visible(problem)}")
    return 0 if report.ok else 1


def kind_options(fn: click.decorators.FC) -> click.decorators.FC:
    """``--kind`` (only these event kinds) and ``--skip`` (not these), both repeatable."""
    choice = click.Choice(sorted(EVENT_KINDS))
    fn = click.option("--skip", multiple=True, type=choice, help="leave out events of this kind (repeatable)")(fn)
    return click.option("--kind", "kinds", multiple=True, type=choice, help="only events of this kind (repeatable)")(fn)


def kind_filter(kinds: tuple[str, ...], skip: tuple[str, ...]) -> Callable[[object], bool]:
    """Whether an event passes ``--kind`` / ``--skip``."""
    wanted, unwanted = set(kinds), set(skip)
    return lambda event: (
        (not wanted or getattr(event, "kind", None) in wanted) and getattr(event, "kind", None) not in unwanted
    )


@cli.command("events")
@window_argument
@click.option("--since", default="0", show_default=True, help="stream entry id to start after (0: the oldest kept)")
@click.option("-f", "--follow", is_flag=True, help="keep printing new events until interrupted")
@kind_options
@json_option
@pass_env
def events(
    env: Env, window: str, since: str, follow: bool, kinds: tuple[str, ...], skip: tuple[str, ...], as_json: bool
) -> None:
    """Print a window's events; --follow waits for more.

    One line per event, or JSON lines with --json; events never hold item content. --kind and
    --skip choose kinds (e.g. --skip built: every build writes one)."""
    win, passes = env.window(window), kind_filter(kinds, skip)
    for event in win.events(since=since, block_ms=0 if follow else None):
        if passes(event):
            click.echo(json_text(event) if as_json else event_line(event))
