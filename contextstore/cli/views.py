"""Rich renderables of the ``contextstore`` command: the item table, the usage bar and per-type
breakdown, the list of windows and event lines. ``show``, ``stats``, ``ls``, ``events`` and
``watch`` draw with these, so every view of a window looks the same."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from itertools import chain, islice
from typing import Any

import msgspec
from rich import box
from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .. import Prices
from ..core import jsontext
from ..core.parts import text_of
from ..turns import TurnStatus
from ..types import ContextItem, ContextWindowStats, ItemType

#: how much of an item's first line the item table shows
CONTENT_WIDTH = 60
#: the item table's columns
ITEM_COLUMNS = ("id", "type", "role", "pri", "tokens", "pin", "group", "age", "content")
#: the colour of a type's name, by its rank (system text, documents, memory, tool output,
#: the user, the assistant); errors are red whatever their rank
RANK_STYLES = {0: "magenta", 1: "magenta", 2: "cyan", 3: "blue", 4: "yellow", 5: "green", 6: "bright_white"}


def type_text(kind: ItemType) -> Text:
    """An item type's name in its rank's colour."""
    return Text(kind.value, style="red" if kind is ItemType.ERROR else RANK_STYLES.get(kind.rank, ""))


def age(at: datetime | None, now: datetime) -> str:
    """How long ago ``at`` was, in its largest unit (``42s``, ``5m``, ``3h``, ``2d``)."""
    if at is None:
        return "-"
    seconds = max(0, int((now - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def first_line(content: str, width: int = CONTENT_WIDTH) -> str:
    """The first non-blank line of ``content``, cut to ``width`` characters."""
    line = next((ln.strip() for ln in content.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 3] + "..."


def summary_of(item: ContextItem) -> str:
    """What the content column says of an item: its text, or for an assistant message that
    calls tools, the calls (``calls weather(city=Paris)``) before any text it has."""
    calls = (item.metadata or {}).get("tool_calls") if item.type is ItemType.ASSISTANT_MESSAGE else None
    if not isinstance(calls, list) or not calls:
        return text_of(item.content, sha=True)
    named = []
    for call in calls:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = " ".join(str(function.get("arguments", "")).split())
        named.append(f"{function.get('name', '?')}({arguments[:40]})")
    text = first_line(text_of(item.content, sha=True))
    return "calls " + ", ".join(named) + (f": {text}" if text else "")


#: what a terminal would act on instead of showing: C0 controls but tab and newline, DEL, C1, and
#: the bidirectional overrides and isolates (text that reads other than it is stored)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``, ``\\x9b``,
    ``\\u202e``), tabs and newlines kept: stored text never drives the terminal (an OSC 52
    sequence would write the clipboard, ``ESC[2J`` clear the screen)."""
    return _UNSAFE.sub(lambda m: ascii(m.group())[1:-1], text)


def json_text(value: object) -> str:
    """``value`` as JSON with C0 and C1 controls escaped (``\\u009b``): safe on a terminal
    (``jsontext``, the rule every JSON the project writes follows)."""
    return jsontext.encode(value).decode()


def json_array(values: Iterable[object]) -> Iterator[str]:
    """``json_text`` of a list of ``values``, in parts as they come (their concatenation is the
    whole list's JSON): a window of any size is written out in bounded memory."""
    yield "["
    for n, value in enumerate(values):
        yield ("," if n else "") + json_text(value)
    yield "]"


def plain(value: str, style: str = "") -> Text:
    """Stored text as it is shown: never read as Rich markup (``[/x]`` or ``[b]`` in a message),
    its control characters escaped (``visible``)."""
    return Text(visible(value), style=style)


def item_row(item: ContextItem, now: datetime, content_width: int) -> tuple[str, ...]:
    """The cells of ``item``'s row (``ITEM_COLUMNS``), as stored: not yet escaped."""
    return (
        item.id or "",
        item.type.value,
        item.role or "",
        str(item.priority),
        str(item.token_count),
        "yes" if item.pinned else "",
        (item.group or "")[:16],
        age(item.added_at, now),
        first_line(summary_of(item), content_width),
    )


#: the columns ``items_table`` and ``items_lines`` align right
RIGHT_COLUMNS = ("pri", "tokens", "age")


def column_widths(rows: Sequence[Sequence[str]]) -> list[int]:
    """The width of each of ``ITEM_COLUMNS``: its name's, or its widest cell's."""
    return [max([len(name), *(len(r[i]) for r in rows)]) for i, name in enumerate(ITEM_COLUMNS)]


#: ``items_lines`` sets its columns' widths from this many rows (wider cells later widen their line)
LINES_WIDTH_ROWS = 500


def items_lines(
    items: Iterable[ContextItem], title: str | None = None, content_width: int = CONTENT_WIDTH
) -> Iterator[str]:
    """``items_table`` as plain lines for a pipe: a title, the column names, a rule, a line per
    item, each cell's control characters escaped (``visible``). Made line by line as ``items``
    come (``iter_items`` reads a big window page by page), the columns as wide as the first
    ``LINES_WIDTH_ROWS`` rows need: a window of any size shows in bounded memory."""
    now = datetime.now(UTC)
    rows = (tuple(visible(c).replace("\t", " ") for c in item_row(item, now, content_width)) for item in items)
    first = list(islice(rows, LINES_WIDTH_ROWS))
    widths = column_widths(first)
    right = [name in RIGHT_COLUMNS for name in ITEM_COLUMNS]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    if title:
        yield visible(title)
    yield line(ITEM_COLUMNS)
    yield "  ".join("-" * w for w in widths)
    for row in chain(first, rows):
        yield line(row)


def items_table(
    items: Sequence[ContextItem], title: str | None = None, width: int = 100, content_width: int = CONTENT_WIDTH
) -> Table:
    """One row per item, in the order given: id, type, role, priority, tokens, pinned, group, age
    and the first line of the content (a tool call: its calls), at most ``content_width``
    characters and cut so a row fits ``width`` columns. Stored text is shown as it is, never as
    markup."""
    now = datetime.now(UTC)
    rows = [item_row(item, now, content_width) for item in items]
    widths = column_widths(rows)
    room = max(10, width - sum(widths[:-1]) - 2 * len(ITEM_COLUMNS))  # a space and a divider each
    table = Table(
        title=plain(title) if title else None,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    for name, widest in zip(ITEM_COLUMNS, widths, strict=True):
        right = name in RIGHT_COLUMNS
        style = "bold yellow" if name == "pin" else None
        table.add_column(
            name, justify="right" if right else "left", no_wrap=True, min_width=min(widest, room), style=style
        )
    for item, row in zip(items, rows, strict=True):
        cells = [plain(c) for c in row[2:-1]]
        table.add_row(plain(row[0]), type_text(item.type), *cells, plain(first_line(row[-1], room)))
    return table


def item_view(item: ContextItem) -> RenderableType:
    """One item whole: every field, then its content in full (as it is, never as markup)."""
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    shown = {
        "id": item.id or "",
        "type": item.type.value,
        "role": item.role or "-",
        "priority": str(item.priority),
        "tokens": str(item.token_count),
        "pinned": "yes" if item.pinned else "no",
        "group": item.group or "-",
        "seq": str(item.seq),
        "added_at": item.added_at.isoformat() if item.added_at else "-",
        "source_ref": item.source_ref or "-",
    }
    for name, value in shown.items():
        fields.add_row(name, plain(value))
    if item.metadata:
        fields.add_row("metadata", plain(msgspec.json.encode(item.metadata).decode()))
    return Group(fields, Text(""), plain(text_of(item.content, sha=True) or summary_of(item)))


def usage_bar(stats: ContextWindowStats, width: int = 40) -> RenderableType:
    """The window's token usage as a bar with its numbers (items when it has no token limit;
    tokens as the provider counts them when usage was recorded: ``token_calibration``)."""
    calibrated = ""
    if stats.max_tokens:
        used, limit, unit, share = stats.current_tokens, stats.max_tokens, "tokens", stats.usage_percent
        if stats.token_calibration != 1.0:
            calibrated = f", x{stats.token_calibration:.2f} calibrated"
    else:
        used, limit, unit = stats.total_items, stats.max_items, "items"
        share = 100.0 * used / limit if limit else 0.0
    style = "red" if share >= stats.compaction_threshold else "yellow" if share >= 75 else "green"
    bar = ProgressBar(total=100, completed=min(share, 100), width=width, complete_style=style)
    line = Table.grid(padding=(0, 1))
    line.add_row(bar, Text(f"{used}/{limit} {unit} ({share:.1f}%{calibrated})", style=style))
    return line


def stats_lines(stats: ContextWindowStats, prices: Prices | None = None) -> list[str]:
    """The lines of text above the per-type table: the window's counters, the usage the provider
    reported (when some was) and, with ``prices``, what it cost."""
    lines = [
        f"window {stats.window_id}: {stats.total_items} items ({stats.pinned_items} pinned), "
        f"max_items {stats.max_items}, threshold {stats.compaction_threshold}%, "
        f"strategy {stats.default_strategy.value}",
        f"compactions {stats.compaction_count}, tokens freed {stats.total_tokens_freed}",
    ]
    used = stats.usage
    if used.records:
        lines.append(
            f"reported usage ({used.records} reports): input {used.input_tokens}, output {used.output_tokens}, "
            f"cache read {used.cache_read_tokens} ({100 * used.cache_read_share:.1f}% of the prompt), cache write "
            f"{used.cache_write_tokens}"
        )
    if prices is not None:
        lines.append(f"cost of the reported usage: {used.cost(prices):.6f} (prices per million tokens)")
    return lines


def stats_json(stats: ContextWindowStats, prices: Prices | None = None) -> object:
    """``stats`` as ``--json`` prints it (with ``prices``, and the reported usage's ``cost``)."""
    return stats if prices is None else {**msgspec.to_builtins(stats), "cost": stats.usage.cost(prices)}


def stats_view(stats: ContextWindowStats, prices: Prices | None = None) -> RenderableType:
    """The usage bar, ``stats_lines`` and a per-type breakdown."""
    head = Text("\n".join(stats_lines(stats, prices)))
    by_type = Table(expand=False, pad_edge=False)
    by_type.add_column("type")
    by_type.add_column("items", justify="right")
    by_type.add_column("tokens", justify="right")
    by_type.add_column("share", justify="right")
    total = stats.current_tokens or 1
    for kind, count in sorted(stats.items_by_type.items(), key=lambda kv: (kv[0].rank, kv[0].value)):
        tokens = stats.tokens_by_type.get(kind, 0)
        by_type.add_row(type_text(kind), str(count), str(tokens), f"{100.0 * tokens / total:.1f}%")
    return Group(usage_bar(stats), head, by_type)


def windows_table(rows: Iterable[dict[str, Any]]) -> Table:
    """The windows under the prefix: id, items, tokens, limit and usage ("corrupt" for a window
    that does not read: ``contextstore verify`` says why); with ``ls --verify``, a ``verify``
    column: "ok", or how many problems (``contextstore verify <window>`` names them)."""
    rows = list(rows)
    checked = any("problems" in row for row in rows)
    table = Table(expand=False, pad_edge=False)
    table.add_column("window", no_wrap=True)
    for name in ("items", "tokens", "max_tokens", "usage"):
        table.add_column(name, justify="right", no_wrap=True)
    if checked:
        table.add_column("verify")
    for row in rows:
        limit, corrupt = row["max_tokens"], "corrupt" in row
        cells: list[RenderableType] = [
            plain("  " * (row.get("depth", 1) - 1) + "└ " + row["window_id"] if row.get("depth") else row["window_id"]),
            "-" if corrupt else str(row["items"]),
            "-" if corrupt else str(row["tokens"]),
            "-" if limit is None else str(limit),
            "corrupt" if corrupt else f"{row['usage_percent']:.1f}%",
        ]
        if checked:
            found = row.get("problems") or []
            cells.append(f"{len(found)} problem{'s' * (len(found) > 1)}" if found else "ok")
        table.add_row(*cells)
    return table


def event_line(event: object) -> str:
    """One event as a line: its time, kind and fields (no item content is ever in an event)."""
    data = msgspec.to_builtins(event)
    at = getattr(event, "at", None)
    when = at.strftime("%H:%M:%S.%f")[:-3] if isinstance(at, datetime) else "-"
    kind = data.pop("kind", "?")
    for name in ("id", "window_id", "at"):
        data.pop(name, None)
    fields = " ".join(f"{k}={v}" for k, v in data.items() if v not in (None, "", [], {}))
    return visible(f"{when} {kind} {fields}".rstrip())


def turn_lines(status: TurnStatus) -> list[str]:
    """The running turn and the inputs waiting for one, a line each (none when neither)."""
    lines = []
    if status.owner:
        lines.append(
            f"turn running for {status.started_ms_ago / 1000:.1f} s by {status.owner} (policy {status.policy}, "
            f"lease {status.lease_left_ms / 1000:.1f} s left, {len(status.item_ids)} items written)"
        )
    for text in status.pending:
        first = text.splitlines()[0] if text else ""
        lines.append(f"pending input: {first[:100]!r}")
    return lines
