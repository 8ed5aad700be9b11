"""The reading verbs of ``contextstore`` (windows, stats, items, build, markdown, snapshot,
verify) and ``server``. They never create a window."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from ..embedded import EmbeddedServer
from ..sync import ContextStore, ContextWindow
from ..types import BuildOptions, ContextWindowStats

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A usage error found after parsing (exit 2)."""


def open_store(args: argparse.Namespace, **helpers: Any) -> ContextStore:
    """The store the global options name: --url, else --path, else $CONTEXTSTORE_URL or the
    embedded server (``helpers``: its summarizer / relevance scorer, if any)."""
    if args.url:
        return ContextStore.from_url(args.url, prefix=args.prefix, **helpers)
    if args.path:
        return ContextStore.embedded(args.path, prefix=args.prefix, **helpers)
    return ContextStore.from_env(prefix=args.prefix, **helpers)


def _existing(store: ContextStore, window_id: str) -> ContextWindow:
    """The window's handle; ``WindowNotFoundError`` if it does not exist (never creates it)."""
    return store.window(window_id, create=False)


def format_stats(s: ContextWindowStats) -> str:
    """A window's stats in three lines."""
    by = ", ".join(
        f"{t.value}={n} ({s.tokens_by_type.get(t, 0)} tok)"
        for t, n in sorted(s.items_by_type.items(), key=lambda kv: kv[0].rank)
    )
    return (
        f"window {s.window_id}: {s.total_items} items ({s.pinned_items} pinned), "
        f"{s.current_tokens}/{s.max_tokens} tokens ({s.usage_percent:.1f}%), max_items={s.max_items}\n"
        f"compactions: {s.compaction_count}, tokens freed: {s.total_tokens_freed}, "
        f"threshold {s.compaction_threshold}%, strategy {s.default_strategy.value}\n"
        f"by type: {by}"
    )


def cmd_windows(args: argparse.Namespace) -> int:
    """`contextstore windows`: the window ids under the prefix."""
    with open_store(args) as store:
        for wid in store.windows():
            print(wid)
    return EXIT_OK


def _show(args: argparse.Namespace, value: object, text: str) -> None:
    """Print ``value`` as JSON with ``--json``, else ``text``."""
    print(msgspec.json.encode(value).decode() if args.json else text)


def cmd_stats(args: argparse.Namespace) -> int:
    """`contextstore stats W`: the window's counters (text or JSON)."""
    with open_store(args) as store:
        stats = _existing(store, args.window).stats()
    _show(args, stats, format_stats(stats))
    return EXIT_OK


def cmd_items(args: argparse.Namespace) -> int:
    """`contextstore items W`: one line per item, arrival order."""
    with open_store(args) as store:
        for it in _existing(store, args.window).items(types=args.types or None, limit=args.limit):
            pin = "*" if it.pinned else " "
            text = it.content.replace("\n", " ")
            print(
                f"{pin}{it.id:>10} seq={it.seq:<6} {it.type.value:<18} p={it.priority:<3} "
                f"tok={it.token_count:<5} {text[:70]}"
            )
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    """`contextstore build W`: the prompt a build gives (or the whole result as JSON)."""
    with open_store(args) as store:
        win = _existing(store, args.window)
        limit = args.max_tokens if args.max_tokens is not None else win.stats().max_tokens
        if limit is not None and args.reserve >= limit:
            raise UsageError(
                f"--reserve {args.reserve} leaves no room for a prompt within {limit} tokens "
                f"(window {args.window!r}): pass --reserve N with N < {limit}, or a larger --max-tokens"
            )
        opts = BuildOptions(
            max_tokens=args.max_tokens, reserve_for_response=args.reserve, max_history_items=args.max_history
        )
        built = win.build_structured(opts)
    _show(args, built, built.content)
    return EXIT_OK


def cmd_markdown(args: argparse.Namespace) -> int:
    """`contextstore markdown W`: the window as markdown."""
    with open_store(args) as store:
        sys.stdout.write(_existing(store, args.window).to_markdown(language=args.language))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    """`contextstore snapshot W`: a JSON snapshot."""
    with open_store(args) as store:
        print(msgspec.json.encode(_existing(store, args.window).snapshot()).decode())
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """`contextstore verify W`: exit 0 when the window is consistent, 1 when verify() found
    problems or it is missing."""
    with open_store(args) as store:
        report = _existing(store, args.window).verify()
    if report.ok:
        text = f"OK: window {report.window_id}: {report.items} items, {report.tokens} tokens, every invariant holds"
    else:
        lines = [f"BROKEN: window {report.window_id}: {len(report.problems)} problem(s)"]
        text = "\n".join(lines + [f"  - {problem}" for problem in report.problems])
    _show(args, report, text)
    return EXIT_OK if report.ok else EXIT_ERROR


def cmd_server(args: argparse.Namespace) -> int:
    """`contextstore server start|stop|status`: the embedded redis-server."""
    server = EmbeddedServer(args.path)
    if args.action == "start":
        server.start()
        print(f"running at {server.url} (data in {server.path})")
    elif args.action == "stop":
        server.stop()
        print("stopped")
    else:
        print(f"{'running' if server.running else 'stopped'}: {server.url} (data in {server.path})")
    return EXIT_OK
