"""The ``contextstore`` command: a demo of the main job, and inspection without redis-cli.

Exit codes: 0 success, 1 an error (Redis unreachable, a missing window, a broken window,
a refused operation), 2 a usage error (a bad option or argument). An expected failure prints
one line on stderr, never a traceback; ``-v`` shows the library's log on stderr.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import random
import sys
import time
from collections import Counter
from typing import Any, NoReturn

import msgspec

from . import __version__
from .embedded import EmbeddedServer
from .errors import ContextStoreError, ContextWindowFullError
from .sync import ContextStore, ContextWindow
from .types import BuildOptions, ContextWindowStats, ItemType

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

_TOPICS = ["the flaky integration test", "the cache invalidation bug", "the Q3 migration plan",
           "the retry policy", "the failing deploy", "the memory leak in the parser"]


def _store(args: argparse.Namespace) -> ContextStore:
    if args.url:
        return ContextStore.from_url(args.url, prefix=args.prefix)
    if args.path:
        return ContextStore.embedded(args.path, prefix=args.prefix)
    return ContextStore.from_env(prefix=args.prefix)


def _existing(store: ContextStore, window_id: str) -> ContextWindow:
    """The window's handle; ``WindowNotFoundError`` if it does not exist (never creates it)."""
    return store.window(window_id, create=False)


# -- demo ------------------------------------------------------------------------------------

_round_barrier: Any = None


def _init_worker(barrier: Any) -> None:
    global _round_barrier
    _round_barrier = barrier


def _demo_turn(win: ContextWindow, rng: random.Random, worker: int, turn: int) -> None:
    topic = rng.choice(_TOPICS)
    kind = rng.random()
    source = f"worker-{worker}"
    if kind < 0.45:
        win.add(f"Worker {worker} asks: what is the status of {topic}? (turn {turn})",
                type=ItemType.USER_MESSAGE, role="user", priority=rng.randint(30, 70), source_ref=source)
    elif kind < 0.8:
        win.add(f"Worker {worker} answers: {topic} is being handled; next step is a fix and a "
                f"regression test (turn {turn}).", type=ItemType.ASSISTANT_MESSAGE, role="assistant",
                priority=rng.randint(30, 70), source_ref=source)
    else:
        numbers = " ".join(str(rng.randint(0, 999)) for _ in range(40))
        win.add(f"tool output for {topic}: {numbers}", type=ItemType.TOOL_RESULT,
                priority=rng.randint(0, 40), source_ref=source)


def _demo_worker(url: str, prefix: str, window_id: str, worker: int, n: int, seed: int) -> tuple[int, int]:
    """One worker process: ``n`` adds to the shared window. Returns (added, refused as too big)."""
    rng = random.Random(seed)
    added = refused = 0
    with ContextStore.from_url(url, prefix=prefix) as store:
        win = store.window(window_id)
        for turn in range(n):
            if _round_barrier is not None:
                _round_barrier.wait(60)  # workers take their turns in rounds, so they interleave
            try:
                _demo_turn(win, rng, worker, turn)
                added += 1
            except ContextWindowFullError:
                refused += 1  # an item bigger than what the window can make room for
    return added, refused


def _run_workers(url: str, args: argparse.Namespace) -> tuple[int, int, float]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.workers)
    t0 = time.perf_counter()
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(barrier,)) as pool:
        results = pool.starmap(_demo_worker, [(url, args.prefix, args.window, w, args.items, 1000 + w)
                                              for w in range(args.workers)])
    return sum(a for a, _ in results), sum(r for _, r in results), time.perf_counter() - t0


def cmd_demo(args: argparse.Namespace) -> int:
    """Several worker processes add to one window while it compacts; then build and stats."""
    server = None
    url = args.url
    if not url:
        server = EmbeddedServer(args.path)
        server.ensure_running()
        url = server.url
        print(f"embedded redis-server at {server.path} ({url})")
    with ContextStore.from_url(url, prefix=args.prefix) as store:
        store.window(args.window).delete()
        win = store.window(args.window, max_tokens=args.max_tokens, compaction_threshold=85.0)
        win.add("You are a helpful engineering assistant shared by several agent workers.",
                type=ItemType.SYSTEM_PROMPT, pinned=True, priority=100)
        win.add("Answer briefly and cite the tool output you rely on.", type=ItemType.INSTRUCTION,
                pinned=True, priority=90)
        added, refused, elapsed = _run_workers(url, args)
        ok = _demo_report(store, win, args, added, refused, elapsed)
    if server is not None:
        print(f"\nthe embedded server keeps running for other processes; inspect it with "
              f"`redis-cli -s {server.socket_path}`, stop it with `contextstore server stop`")
    return EXIT_OK if ok else EXIT_ERROR


def _demo_report(store: ContextStore, win: ContextWindow, args: argparse.Namespace, added: int,
                 refused: int, elapsed: float) -> bool:
    items = win.items()
    stats = win.stats()
    report = win.verify()
    seqs = [i.seq for i in items]
    within = stats.current_tokens <= (stats.max_tokens or 0)
    ok = report.ok and len({i.id for i in items}) == len(items) and seqs == sorted(seqs) and within
    reserve = min(200, args.max_tokens // 4)
    built = win.build_structured(BuildOptions(reserve_for_response=reserve, max_history_items=6))
    print(f"\n{args.workers} workers added {added} items in {elapsed:.2f}s "
          f"({added / elapsed:.0f} adds/s)" + (f"; {refused} refused as too big for the window" if refused else ""))
    writers = Counter(i.source_ref for i in items if i.source_ref)
    print("the window now holds items from: " + ", ".join(f"{w} ({n})" for w, n in sorted(writers.items())) + "\n")
    print("=== built prompt " + "=" * 60)
    print(built.content)
    print("=" * 77)
    print(f"included {len(built.included_item_ids)} items, {built.total_tokens} tokens (budget "
          f"{args.max_tokens} - {reserve} reserved); {len(built.excluded_item_ids)} did not fit, "
          f"{len(built.omitted_item_ids)} left out by the options (max_history_items=6)\n")
    _print_stats(stats)
    kinds = Counter(fields.get(b"event", b"?").decode() for _, fields in store._client.xrange(win._state.keys.events))
    print("events: " + ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
    print(f"verify(): {'OK' if report.ok else 'BROKEN: ' + '; '.join(report.problems)}; "
          f"within budget: {'yes' if within else 'NO'}")
    return ok


# -- inspection ------------------------------------------------------------------------------


def _print_stats(s: ContextWindowStats) -> None:
    print(f"window {s.window_id}: {s.total_items} items ({s.pinned_items} pinned), "
          f"{s.current_tokens}/{s.max_tokens} tokens ({s.usage_percent:.1f}%), max_items={s.max_items}")
    print(f"compactions: {s.compaction_count}, tokens freed: {s.total_tokens_freed}, "
          f"threshold {s.compaction_threshold}%, strategy {s.default_strategy.value}")
    by = ", ".join(f"{t.value}={n} ({s.tokens_by_type.get(t, 0)} tok)" for t, n in sorted(
        s.items_by_type.items(), key=lambda kv: kv[0].rank))
    print(f"by type: {by}")


def cmd_windows(args: argparse.Namespace) -> int:
    with _store(args) as store:
        for wid in store.windows():
            print(wid)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _store(args) as store:
        s = _existing(store, args.window).stats()
        if args.json:
            print(msgspec.json.encode(s).decode())
        else:
            _print_stats(s)
    return EXIT_OK


def cmd_items(args: argparse.Namespace) -> int:
    with _store(args) as store:
        for it in _existing(store, args.window).items(types=args.types or None, limit=args.limit):
            pin = "*" if it.pinned else " "
            text = it.content.replace("\n", " ")
            print(f"{pin}{it.id:>10} seq={it.seq:<6} {it.type.value:<18} p={it.priority:<3} "
                  f"tok={it.token_count:<5} {text[:70]}")
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    with _store(args) as store:
        win = _existing(store, args.window)
        limit = args.max_tokens if args.max_tokens is not None else win.stats().max_tokens
        if limit is not None and args.reserve >= limit:
            raise _Usage(f"--reserve {args.reserve} leaves no room for a prompt within {limit} tokens "
                         f"(window {args.window!r}): pass --reserve N with N < {limit}, or a larger --max-tokens")
        opts = BuildOptions(max_tokens=args.max_tokens, reserve_for_response=args.reserve,
                            max_history_items=args.max_history)
        built = win.build_structured(opts)
        print(msgspec.json.encode(built).decode() if args.json else built.content)
    return EXIT_OK


def cmd_markdown(args: argparse.Namespace) -> int:
    with _store(args) as store:
        sys.stdout.write(_existing(store, args.window).to_markdown(language=args.language))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    with _store(args) as store:
        print(msgspec.json.encode(_existing(store, args.window).snapshot()).decode())
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the window is consistent, 1 when verify() found problems or it is missing."""
    with _store(args) as store:
        report = _existing(store, args.window).verify()
        if args.json:
            print(msgspec.json.encode(report).decode())
        elif report.ok:
            print(f"OK: window {report.window_id}: {report.items} items, {report.tokens} tokens, "
                  "every invariant holds")
        else:
            print(f"BROKEN: window {report.window_id}: {len(report.problems)} problem(s)")
            for problem in report.problems:
                print(f"  - {problem}")
        return EXIT_OK if report.ok else EXIT_ERROR


def cmd_server(args: argparse.Namespace) -> int:
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


# -- argument parsing ------------------------------------------------------------------------


class _Usage(Exception):
    """A usage error found after parsing (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Any:
    """An argparse type: an int >= ``low`` (a clear one-line usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return parse


_positive, _non_negative = _int_at_least(1), _int_at_least(0)


def _window_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("window", help="the window id")


def _add_demo(sub: Any) -> None:
    d = sub.add_parser("demo", help="several worker processes share one window; prints the prompt and stats",
                       description="Start the embedded server (unless --url), let worker processes add "
                       "to one window while it evicts and compacts, then print the built prompt, the "
                       "stats and the verify() result.")
    d.add_argument("--workers", type=_positive, default=4, help="worker processes (default: 4)")
    d.add_argument("--items", type=_positive, default=50, help="items each worker adds (default: 50)")
    d.add_argument("--window", default="demo", help="window id to use; it is reset first (default: demo)")
    d.add_argument("--max-tokens", type=_positive, default=1500, help="the window's token limit (default: 1500)")
    d.set_defaults(fn=cmd_demo)


def _add_readers(sub: Any) -> None:
    sub.add_parser("windows", help="list window ids under the prefix").set_defaults(fn=cmd_windows)
    s = sub.add_parser("stats", help="a window's counters")
    _window_arg(s)
    s.add_argument("--json", action="store_true", help="print the stats as JSON")
    s.set_defaults(fn=cmd_stats)
    i = sub.add_parser("items", help="a window's items in arrival order")
    _window_arg(i)
    i.add_argument("--types", nargs="*", metavar="TYPE", help="only these item types (e.g. code error)")
    i.add_argument("--limit", type=_non_negative, help="only the N most recent items")
    i.set_defaults(fn=cmd_items)
    b = sub.add_parser("build", help="print the prompt a build would give")
    _window_arg(b)
    b.add_argument("--max-tokens", type=_positive, help="token limit of this build (default: the window's)")
    b.add_argument("--reserve", type=_non_negative, default=1000,
                   help="tokens kept free for the response (default: 1000)")
    b.add_argument("--max-history", type=_non_negative, default=10,
                   help="most recent user/assistant messages to consider (default: 10)")
    b.add_argument("--json", action="store_true",
                   help="print the whole result as JSON: content, tokens, included/excluded/omitted ids")
    b.set_defaults(fn=cmd_build)
    m = sub.add_parser("markdown", help="print the window as markdown (## Context, one fenced block per item)")
    _window_arg(m)
    m.add_argument("--language", help="language word on every code fence (default: from each item's metadata)")
    m.set_defaults(fn=cmd_markdown)
    sn = sub.add_parser("snapshot", help="print a JSON snapshot (restore it with ContextWindow.restore)")
    _window_arg(sn)
    sn.set_defaults(fn=cmd_snapshot)
    v = sub.add_parser("verify", help="check a window's keys against every invariant (exit 1 if broken)")
    _window_arg(v)
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(fn=cmd_verify)


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (every option has help)."""
    p = _Parser(prog="contextstore", description="Shared LLM context windows in Redis.",
                epilog="exit status: 0 ok, 1 error, 2 usage error")
    p.add_argument("--version", action="version", version=f"contextstore {__version__}")
    p.add_argument("--url", default=None, help="Redis URL (default: $CONTEXTSTORE_URL, else the embedded server)")
    p.add_argument("--path", default=None, help="data directory of the embedded server "
                   "(default: $CONTEXTSTORE_HOME, else ~/.local/share/contextstore)")
    p.add_argument("--prefix", default="ctx", help="key prefix of the windows (default: ctx)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log to stderr: -v for info, -vv for debug (retries, every item)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_demo(sub)
    _add_readers(sub)
    sv = sub.add_parser("server", help="manage the embedded redis-server")
    sv.add_argument("action", choices=["start", "stop", "status"], help="start, stop, or show its status")
    sv.set_defaults(fn=cmd_server)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    args = parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.fn(args))
    except _Usage as exc:
        print(f"contextstore {args.cmd}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ContextStoreError as exc:
        print(f"contextstore: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_ERROR
    except KeyboardInterrupt:
        print("contextstore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`contextstore items w | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
