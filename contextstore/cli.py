"""The ``contextstore`` command: a demo of the main job, and redis-cli-free inspection."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
from collections import Counter
from typing import Any

import msgspec

from .embedded import EmbeddedServer
from .errors import ContextStoreError
from .sync import ContextStore
from .types import BuildOptions, ItemType

_TOPICS = ["the flaky integration test", "the cache invalidation bug", "the Q3 migration plan",
           "the retry policy", "the failing deploy", "the memory leak in the parser"]


def _store(args: argparse.Namespace) -> ContextStore:
    if args.url:
        return ContextStore.from_url(args.url, prefix=args.prefix)
    if args.path:
        return ContextStore.embedded(args.path, prefix=args.prefix)
    return ContextStore.from_env(prefix=args.prefix)


def _demo_worker(url: str, prefix: str, window_id: str, worker: int, n: int, seed: int) -> int:
    rng = random.Random(seed)
    added = 0
    with ContextStore.from_url(url, prefix=prefix) as store:
        win = store.window(window_id)
        for i in range(n):
            topic = rng.choice(_TOPICS)
            kind = rng.random()
            if kind < 0.45:
                win.add(f"Worker {worker} asks: what is the status of {topic}? (turn {i})",
                        type=ItemType.USER_MESSAGE, role="user", priority=rng.randint(30, 70))
            elif kind < 0.8:
                win.add(f"Worker {worker} answers: {topic} is being handled; next step is a fix "
                        f"and a regression test (turn {i}).",
                        type=ItemType.ASSISTANT_MESSAGE, role="assistant", priority=rng.randint(30, 70))
            else:
                win.add(f"tool output for {topic}: " + " ".join(str(rng.randint(0, 999)) for _ in range(40)),
                        type=ItemType.TOOL_RESULT, priority=rng.randint(0, 40))
            added += 1
    return added


def cmd_demo(args: argparse.Namespace) -> int:
    """Several worker processes add to one window while it compacts; then build and stats."""
    if args.url:
        url = args.url
    else:
        server = EmbeddedServer(args.path)
        server.ensure_running()
        url = server.url
        print(f"embedded redis-server at {server.path} ({url})")
    store = ContextStore.from_url(url, prefix=args.prefix)
    wid = args.window
    store.window(wid).delete()
    win = store.window(wid, max_tokens=args.max_tokens, compaction_threshold=85.0)
    win.add("You are a helpful engineering assistant shared by several agent workers.",
            type=ItemType.SYSTEM_PROMPT, pinned=True, priority=100)
    win.add("Answer briefly and cite the tool output you rely on.", type=ItemType.INSTRUCTION,
            pinned=True, priority=90)
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        results = pool.starmap(_demo_worker, [(url, args.prefix, wid, w, args.items, 1000 + w)
                                              for w in range(args.workers)])
    elapsed = time.perf_counter() - t0
    items = win.items()
    stats = win.stats()
    ids = [i.id for i in items]
    seqs = [i.seq for i in items]
    report = win.verify()
    ok = (report.ok and len(ids) == len(set(ids)) and seqs == sorted(seqs)
          and stats.current_tokens <= (stats.max_tokens or 0))
    built = win.build_structured(BuildOptions(reserve_for_response=200, max_history_items=6))
    print(f"\n{args.workers} workers added {sum(results)} items in {elapsed:.2f}s "
          f"({sum(results) / elapsed:.0f} adds/s over the embedded server)\n")
    print("=== built prompt " + "=" * 60)
    print(built.content)
    print("=" * 77)
    print(f"included {len(built.included_item_ids)} items, {built.total_tokens} tokens "
          f"(budget {args.max_tokens} - 200 reserved); {len(built.excluded_item_ids)} excluded\n")
    _print_stats(stats)
    events = Counter(e for e in _event_kinds(store, win))
    print("events: " + ", ".join(f"{k}={v}" for k, v in sorted(events.items())))
    print(f"verify(): {'OK' if report.ok else 'BROKEN: ' + '; '.join(report.problems)}; "
          f"within budget: {'yes' if stats.current_tokens <= (stats.max_tokens or 0) else 'NO'}")
    if not args.url:
        print(f"\nthe embedded server keeps running for other processes; inspect it with "
              f"`redis-cli -s {server.socket_path}`, stop it with `contextstore server stop`")
    store.close()
    return 0 if ok else 1


def _event_kinds(store: ContextStore, win: Any) -> list[str]:
    key = win._state.keys.events
    entries = store._client.xrange(key)
    return [fields.get(b"event", b"?").decode() for _, fields in entries]


def _print_stats(s: Any) -> None:
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
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _store(args) as store:
        s = store.window(args.window).stats()
        if args.json:
            print(msgspec.json.encode(s).decode())
        else:
            _print_stats(s)
    return 0


def cmd_items(args: argparse.Namespace) -> int:
    with _store(args) as store:
        for it in store.window(args.window).items(types=args.types or None, limit=args.limit):
            pin = "*" if it.pinned else " "
            text = it.content.replace("\n", " ")
            print(f"{pin}{it.id:>10} seq={it.seq:<6} {it.type.value:<18} p={it.priority:<3} "
                  f"tok={it.token_count:<5} {text[:70]}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    with _store(args) as store:
        opts = BuildOptions(max_tokens=args.max_tokens, reserve_for_response=args.reserve)
        print(store.window(args.window).build(opts))
    return 0


def cmd_markdown(args: argparse.Namespace) -> int:
    with _store(args) as store:
        sys.stdout.write(store.window(args.window).to_markdown(language=args.language))
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    with _store(args) as store:
        print(msgspec.json.encode(store.window(args.window).snapshot()).decode())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when the window is consistent, 1 when verify() found problems or it is missing."""
    with _store(args) as store:
        win = _existing(store, args.window)
        if win is None:
            print(f"window {args.window!r} does not exist under prefix {args.prefix!r}", file=sys.stderr)
            return 1
        report = win.verify()
        if args.json:
            print(msgspec.json.encode(report).decode())
        elif report.ok:
            print(f"OK: window {report.window_id}: {report.items} items, {report.tokens} tokens, "
                  "every invariant holds")
        else:
            print(f"BROKEN: window {report.window_id}: {len(report.problems)} problem(s)")
            for problem in report.problems:
                print(f"  - {problem}")
        return 0 if report.ok else 1


def _existing(store: ContextStore, window_id: str) -> Any:
    """The window's handle if it exists (``store.window`` would create a missing one)."""
    from .keys import validate_window_id, window_keys

    if not store._client.exists(window_keys(store._settings.prefix, validate_window_id(window_id)).meta):
        return None
    return store.window(window_id)


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
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="contextstore", description=__doc__)
    p.add_argument("--url", default=None, help="Redis URL (default: $CONTEXTSTORE_URL, else the embedded server)")
    p.add_argument("--path", default=None, help="data directory of the embedded server")
    p.add_argument("--prefix", default="ctx", help="key prefix (default: ctx)")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="several worker processes share one window; prints the prompt and stats")
    d.add_argument("--workers", type=int, default=4)
    d.add_argument("--items", type=int, default=50, help="items per worker")
    d.add_argument("--window", default="demo")
    d.add_argument("--max-tokens", type=int, default=1500)
    d.set_defaults(fn=cmd_demo)
    sub.add_parser("windows", help="list window ids").set_defaults(fn=cmd_windows)
    s = sub.add_parser("stats", help="a window's counters")
    s.add_argument("window")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_stats)
    i = sub.add_parser("items", help="a window's items in arrival order")
    i.add_argument("window")
    i.add_argument("--types", nargs="*")
    i.add_argument("--limit", type=int)
    i.set_defaults(fn=cmd_items)
    b = sub.add_parser("build", help="print the built prompt")
    b.add_argument("window")
    b.add_argument("--max-tokens", type=int)
    b.add_argument("--reserve", type=int, default=1000)
    b.set_defaults(fn=cmd_build)
    m = sub.add_parser("markdown", help="print seed 003's markdown")
    m.add_argument("window")
    m.add_argument("--language")
    m.set_defaults(fn=cmd_markdown)
    sn = sub.add_parser("snapshot", help="print a JSON snapshot")
    sn.add_argument("window")
    sn.set_defaults(fn=cmd_snapshot)
    v = sub.add_parser("verify", help="check a window's keys against every invariant (exit 1 if broken)")
    v.add_argument("window")
    v.add_argument("--json", action="store_true")
    v.set_defaults(fn=cmd_verify)
    sv = sub.add_parser("server", help="manage the embedded redis-server")
    sv.add_argument("action", choices=["start", "stop", "status"])
    sv.set_defaults(fn=cmd_server)
    args = p.parse_args(argv)
    try:
        return int(args.fn(args))
    except ContextStoreError as exc:
        print(f"contextstore: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
