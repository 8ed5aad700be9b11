"""Where an add's server time goes, phase by phase (the profile behind the add goal of
``shard.py``).

    python benchmarks/add_profile.py [--adds 3000] [--smoke]

A copy of the Lua scripts gets checkpoints between the phases of ``add.lua`` and of the request
protocol around it (``lib/requests.lua``). A checkpoint reads the server's clock (``TIME``) and
adds the time since the previous checkpoint to a hash; what a checkpoint itself costs is measured
the same way (two back to back) and taken off every phase. The same adds (a ~560-byte message
into a 1000-message window, as in ``shard.py``) run through the plain scripts and the instrumented
ones in alternating blocks on one private server; the table sets the phases against the plain
script's time (``INFO commandstats``). The scripts run as the function library. Runs on Redis 7
where one is installed: Valkey's ``TIME`` stands still inside a script, so there every phase
reads 0 and only the whole add's time is measured.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from fleet import redis7
from shard import _body, _fill

import contextstore as cs
from contextstore.drivers import scripts

from _common import redis_binary, redis_server, server_version, table

PROF = """
-- add_profile.py's checkpoint: the time since the previous one, added to the hash 'prof' (a field
-- of F, not a local: the library's load step allows Lua 200 locals, and uses them all)
F.PROF = function(label)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if F.PROF_LAST and label then redis.call('HINCRBY', 'prof', label, now - F.PROF_LAST) end
  t = redis.call('TIME')
  F.PROF_LAST = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""
CHECK = "(a checkpoint)"
#: (file, text, the same text with checkpoints): each text must occur once in its file
CHECKPOINTS: list[tuple[str, str, str]] = [
    ("lib/requests.lua", "  begin_call(keys, args)\n  if REQUEST == ''",
     f"  begin_call(keys, args)\n  F.PROF(nil)\n  F.PROF('{CHECK}')\n  if REQUEST == ''"),
    ("lib/requests.lua", "  local seen, prior = guarded(replay, rid, fp)\n",
     "  local seen, prior = guarded(replay, rid, fp)\n  F.PROF('request: parse, replay check (HGET)')\n"),
    ("add.lua", "local cfg = read_config()\n",
     "local cfg = read_config()\nF.PROF('config and counters (HMGET)')\n"),
    ("add.lua", "\nlocal plan = {", "\nF.PROF('arguments: conditions, replace, items')\nlocal plan = {"),
    ("add.lua", "\napply(cfg, plan, dropping.removal)\nreturn reply(items, plan)",
     "\nF.PROF('plan: eviction, compaction, fit')\napply(cfg, plan, dropping.removal)\nF.PROF('turn lease, seq, ttl')\n"
     "local out, record = reply(items, plan)\nF.PROF('reply and its record')\nreturn out, record"),
    ("lib/items.lua", "  store_item(it, json, before)\n  count_added(it)\n",
     "  store_item(it, json, before)\n  F.PROF('writes: item, attrs, order, fifo')\n  count_added(it)\n"
     "  F.PROF('counters, item_added event (XADD)')\n"),
    ("lib/requests.lua",
     "  flush_meta()\n  if WROTE then record_request(rid, fp, record or {r = reply}) end\n"
     "  return with_counters(reply)",
     "  F.PROF('usage check')\n  flush_meta()\n  F.PROF('counters written (HSET meta)')\n"
     "  if WROTE then record_request(rid, fp, record or {r = reply}) end\n"
     "  F.PROF('exactly-once record (HSET, RPUSH, PEXPIRE x2)')\n"
     "  local answer = with_counters(reply)\n  F.PROF('reply with counters')\n  return answer"),
]  # fmt: skip


def instrumented(dst: Path) -> Path:
    """A copy of the scripts in ``dst`` with the checkpoints (an error names a text not found)."""
    shutil.copytree(scripts.lua_dir(), dst)
    core = dst / "lib" / "core.lua"
    core.write_text(core.read_text(encoding="utf-8") + PROF, encoding="utf-8")
    for name, old, new in CHECKPOINTS:
        path = dst / name
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise SystemExit(f"add_profile.py: {name} no longer has {old!r} once: move its checkpoint")
        path.write_text(text.replace(old, new), encoding="utf-8")
    return dst


@contextmanager
def lua_from(path: Path) -> Iterator[None]:
    """Assemble the scripts from ``path`` inside the block (``scripts.lua_dir`` pointed there)."""
    orig = scripts.lua_dir
    scripts.lua_dir = lambda: path  # type: ignore[assignment]
    try:
        yield
    finally:
        scripts.lua_dir = orig


def add_runner(r: redis.Redis, functions: bool) -> Callable[[list[str], list[Any]], Any]:
    """Run the add of the scripts ``scripts.lua_dir`` gives now: an FCALL or an EVALSHA."""
    if functions:
        source, names = scripts.library.__wrapped__()  # type: ignore[attr-defined]
        r.function_load(source, replace=True)
        return lambda keys, argv: r.execute_command("FCALL", names["add"], len(keys), *keys, *argv)
    sha = r.script_load(scripts.sources.__wrapped__()["add"])  # type: ignore[attr-defined]
    return lambda keys, argv: r.execute_command("EVALSHA", sha, len(keys), *keys, *argv)


def captured_add(url: str, messages: int) -> tuple[list[str], list[Any]]:
    """Fill a window with ``messages`` messages, then the keys and arguments of one more add."""
    seen: list[tuple[list[str], list[Any]]] = []
    run = scripts.ScriptRegistry.run

    def spy(self: Any, name: str, keys: list[str], argv: list[Any]) -> Any:
        if name == "add":
            seen.append((list(keys), list(argv)))
        return run(self, name, keys, argv)

    with cs.ContextStore.from_url(url, prefix="profile", item_limit=100_000) as store:
        w = store.window("adds", max_items=100_000)
        _fill(w, messages, random.Random(3))
        scripts.ScriptRegistry.run = spy  # type: ignore[method-assign]
        try:
            w.add(_body(random.Random(4)), role="user")
        finally:
            scripts.ScriptRegistry.run = run  # type: ignore[method-assign]
    return seen[-1]


def profile(url: str, adds: int, messages: int = 1000) -> dict[str, Any]:
    """The plain add's script time and the instrumented add's phases, µs per add."""
    r = redis.Redis.from_url(url)
    functions = int(r.info("server")["redis_version"].split(".")[0]) >= 7
    keys, argv = captured_add(url, messages)
    fingerprint = str(argv[0]).split("|", 1)[1]
    plain = add_runner(r, functions)
    with tempfile.TemporaryDirectory() as tmp, lua_from(instrumented(Path(tmp) / "lua")):
        profiled = add_runner(r, functions)
    command = "cmdstat_fcall" if functions else "cmdstat_evalsha"
    plain_us, n, block = 0.0, 0, 100
    for start in range(0, adds, block):
        for run in (plain, profiled):
            r.config_resetstat()
            for _ in range(start, min(start + block, adds)):
                n += 1
                reply = run(keys, [f"profile-{n}|{fingerprint}", *argv[1:]])
                assert reply[0][0] == b"ok", reply
            if run is plain:
                plain_us += float(r.info("commandstats")[command]["usec"])
    prof = {k.decode(): int(v) / adds for k, v in r.hgetall("prof").items()}
    check = prof.pop(CHECK)
    phases = {k: max(0.0, v - check) for k, v in prof.items()}
    r.close()
    return {"plain_us": plain_us / adds, "phases": phases, "checkpoint_us": check, "functions": functions}


#: the phases in the order an add runs them
PHASES = (
    "request: parse, replay check (HGET)", "config and counters (HMGET)", "arguments: conditions, replace, items",
    "plan: eviction, compaction, fit", "writes: item, attrs, order, fifo", "counters, item_added event (XADD)",
    "turn lease, seq, ttl", "reply and its record", "usage check", "counters written (HSET meta)",
    "exactly-once record (HSET, RPUSH, PEXPIRE x2)", "reply with counters",
)  # fmt: skip


def report(version: str, p: dict[str, Any]) -> None:
    unknown = set(p["phases"]) - set(PHASES)
    if unknown:
        raise SystemExit(f"add_profile.py: checkpoints missing from PHASES: {sorted(unknown)}")
    rows = [[label, f"{p['phases'][label]:.1f}"] for label in PHASES if label in p["phases"]]
    inside = sum(p["phases"].values())
    rows.append(["the call's entry and exit (the rest: plain script time minus the phases)",
                 f"{max(0.0, p['plain_us'] - inside):.1f}"])  # fmt: skip
    rows.append(["**the plain add, script time (INFO commandstats)**", f"{p['plain_us']:.1f}"])
    how = "FCALL (function library)" if p["functions"] else "EVALSHA"
    print(f"\n### Redis {version}: an add's server time by phase, {how}\n")
    print(table(["phase", "µs per add"], rows))
    print(f"\n(each checkpoint's own {p['checkpoint_us']:.1f} µs taken off every phase)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--adds", type=int, default=3000)
    ap.add_argument("--smoke", action="store_true", help="a few hundred adds, one server only")
    args = ap.parse_args()
    adds = 200 if args.smoke else args.adds
    # Valkey's TIME stands still inside a script (every phase would read 0): Redis 7, where one is
    # installed; else the embedded default's server, whose phases then read 0 (said below)
    binaries = [redis7() or redis_binary()]
    for binary in dict.fromkeys(b for b in binaries if b):
        os.environ["CONTEXTSTORE_BENCH_REDIS"] = binary
        with redis_server() as url:
            report(server_version(url), profile(url, adds, messages=100 if args.smoke else 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
