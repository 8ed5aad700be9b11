"""What single calls cost the shard, each measured alone on a private server (fleet.py runs it
after the fleet and prints its goals with the fleet's).

    python benchmarks/shard.py [--messages 1000]

Per call: the server process's CPU (``used_cpu_user + used_cpu_sys`` over many calls: what the
shard really pays, network included), the script's own time where the call is one script (its
``INFO commandstats`` entry: a script's time includes the commands it runs) and the client's p50.
Side by side: an ``add`` of a ~560-byte message into a 1000-message window against a bare script
doing the same kinds of writes (ZADD, HSET, RPUSH, HSET, HINCRBY, XADD, HSET), and a bare EVALSHA
of ZADD + HSET for the round trip; the build of a window that did not change since the client's
last build; a cached worker's build after other workers' adds (its facts read, then the added
bodies); and the memory per message of a window once its exactly-once log has expired,
against the structures the design keeps at their barest (one ZADD + one HSET + one RPUSH per
message, the same bodies).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis

import contextstore as cs
from contextstore.drivers import scripts
from contextstore.plans import build_read as build_read_plans

from _common import chat_message, redis_server, server_version, summarize, table

#: the bare script with the writes of an add (item, order, list, attrs, counters, event, meta)
SAME_WRITES = """
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[4])
redis.call('HINCRBY', KEYS[5], 'total_tokens', 100)
redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'type', 'item_added', 'item_id', ARGV[2])
redis.call('HSET', KEYS[5], 'updated_at', ARGV[1])
return 1
"""
TWO_WRITES = "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]); redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]); return 1"
SCRIPT_COMMANDS = ("evalsha", "evalsha_ro", "eval", "fcall", "fcall_ro")
BODY = 560


def _cpu_us(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def _script_us(r: redis.Redis) -> tuple[int, float]:
    """(calls, µs) of the script commands since the last CONFIG RESETSTAT."""
    stats = r.info("commandstats")
    calls = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in SCRIPT_COMMANDS)
    usec = sum(float(stats.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in SCRIPT_COMMANDS)
    return calls, usec


def measured(r: redis.Redis, fn: Callable[[int], Any], n: int) -> dict[str, float]:
    """Run ``fn(i)`` ``n`` times (after a few unmeasured): CPU and script time per call, client p50."""
    for i in range(5):
        fn(-1 - i)
    r.config_resetstat()
    sent = int(r.info("stats")["total_net_output_bytes"])
    before = _cpu_us(r)
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    sent = int(r.info("stats")["total_net_output_bytes"]) - sent  # with one INFO reply: ~1 KB over n calls
    cpu = (_cpu_us(r) - before) / n
    calls, usec = _script_us(r)
    stats = {k.removeprefix("cmdstat_"): v for k, v in r.info("commandstats").items()}
    inner = {k: float(v["usec"]) / n for k, v in stats.items() if k not in SCRIPT_COMMANDS and k != "info"}
    return {
        "cpu_us": cpu,
        "script_us": usec / n,
        "script_calls": calls / n,
        "client_p50_us": summarize(times)["p50_us"],
        "sent_kib": sent / n / 1024,
        "commands_us": inner,
    }


def _fill(w: Any, n: int, rng: random.Random) -> None:
    for start in range(0, n, 200):
        w.add_many([{"content": _body(rng), "role": "user"} for _ in range(min(200, n - start))])


def _body(rng: random.Random) -> str:
    return (chat_message(rng, "user") * 8)[:BODY]


def add_costs(url: str, messages: int) -> dict[str, dict[str, float]]:
    """An add into a ``messages``-message window against the bare scripts."""
    r, rng = redis.Redis.from_url(url), random.Random(3)
    out: dict[str, dict[str, float]] = {}
    with cs.ContextStore.from_url(url, prefix="shard", item_limit=messages * 4) as store:
        w = store.window("adds", max_items=messages * 4)
        _fill(w, messages, rng)
        out["contextstore add"] = measured(r, lambda i: w.add(_body(rng), role="user"), 500)
    same, two = r.register_script(SAME_WRITES), r.register_script(TWO_WRITES)
    keys = [f"bare:{{x}}:{k}" for k in ("z", "h", "l", "a", "m", "e")]
    for i in range(messages):
        same(keys=keys, args=[i, f"m{i}", _body(rng), "100|user|50"])
    out["bare script, same writes"] = measured(
        r, lambda i: same(keys=keys, args=[messages + i + 10, f"n{i}", _body(rng), "100|user|50"]), 500
    )
    out["bare EVALSHA, ZADD + HSET"] = measured(
        r, lambda i: two(keys=keys[:2], args=[messages + i + 10, f"t{i}", _body(rng)]), 500
    )
    r.close()
    return out


def unchanged_build_costs(url: str, messages: int) -> dict[str, dict[str, float]]:
    """A build of a window that did not change since this client's last build (its cache holds
    the window), and the first build of a store that never read it (a cold worker)."""
    r, rng = redis.Redis.from_url(url), random.Random(5)
    opts = cs.BuildOptions(max_tokens=400_000, reserve_for_response=0, max_history_items=100_000)
    out: dict[str, dict[str, float]] = {}
    with cs.ContextStore.from_url(url, prefix="shard", item_limit=messages * 4) as store:
        w = store.handle("builds", max_tokens=400_000, max_items=messages * 4)
        _fill(w, messages, rng)
        w.build_messages_structured(opts)
        out["build, unchanged window"] = measured(r, lambda i: w.build_messages_structured(opts), 300)

        def read_first(i: int) -> None:  # the same build as before one-call builds: a read, then the event
            store._settings.item_cache.moving(w._state.keys.meta, True)  # benchmark only: read the facts first
            w.build_messages_structured(opts)

        out["build, unchanged window, read first"] = measured(r, read_first, 300)

    def cold(i: int) -> None:
        with cs.ContextStore.from_url(url, prefix="shard", item_limit=messages * 4) as fresh:
            fresh.handle("builds", max_tokens=400_000, max_items=messages * 4).build_messages_structured(opts)

    out[f"build, cold worker ({messages} messages)"] = measured(r, cold, 40)
    r.close()
    return out


def memory_costs(url: str, messages: int) -> dict[str, Any]:
    """Bytes per message of a window (``MEMORY USAGE`` of each key; the exactly-once log left
    out, as once it expired) against the bare floor of the same bodies."""
    r, rng = redis.Redis.from_url(url), random.Random(9)
    with cs.ContextStore.from_url(url, prefix="mem", item_limit=messages * 4) as store:
        w = store.window("m", max_items=messages * 4)
        for _ in range(messages):
            w.add(_body(rng), role="user")
    per_key = {}
    for k in r.scan_iter("mem:*"):
        name = k.decode().rsplit(":", 1)[1]
        per_key[name] = int(r.memory_usage(k, samples=0) or 0)
    rng = random.Random(9)
    pipe = r.pipeline(transaction=False)
    for i in range(messages):
        body = _body(rng)
        pipe.zadd("floor:{f}:z", {f"ctx-{i + 1}": i})
        pipe.hset("floor:{f}:h", f"ctx-{i + 1}", body)
        pipe.rpush("floor:{f}:l", f"ctx-{i + 1}")
    pipe.execute()
    floor = sum(int(r.memory_usage(k, samples=0) or 0) for k in r.scan_iter("floor:*"))
    r.close()
    log = ("requests", "replies")
    kept = sum(v for k, v in per_key.items() if k not in log)
    return {"per_key": per_key, "bytes_per_message": kept / messages, "floor_per_message": floor / messages}


def turn_costs(url: str, messages: int) -> dict[str, dict[str, float]]:
    """A conversation turn (add the question, build the messages, add the answer) without and
    with a turn lease (``win.turn(input=...)``: the lease starts in the question's add, ends in
    turn.lua)."""
    r, rng = redis.Redis.from_url(url), random.Random(5)
    out: dict[str, dict[str, float]] = {}
    with cs.ContextStore.from_url(url, prefix="turns", item_limit=messages * 4) as store:
        plain, leased = store.window("plain", max_items=messages * 2), store.window("leased", max_items=messages * 2)
        for w in (plain, leased):
            _fill(w, messages // 2, rng)

        def without(i: int) -> None:
            plain.add(_body(rng), role="user")
            plain.build_messages()
            plain.add(_body(rng), role="assistant")

        def within(i: int) -> None:
            with leased.turn(input={"content": _body(rng), "role": "user"}) as turn:
                leased.build_messages()
                turn.add(_body(rng), role="assistant")

        calls = 300 if messages >= 1000 else 60  # a smoke run's windows are small: a few calls do
        out["conversation turn, no lease"] = measured(r, without, calls)
        out["conversation turn, win.turn()"] = measured(r, within, calls)
    r.close()
    return out


HELPER_SCRIPTS = ("add", "event", "turn", "pin", "remove")


def helper_costs(url: str, names: tuple[str, ...] = HELPER_SCRIPTS) -> list[list[str]]:
    """What re-creating a script's helpers costs per ``EVALSHA`` (a server runs the whole
    script on every call): every helper file of the library against the files the script needs
    (``scripts.carried``), each run with ``return 1`` for a body, side by side,
    best of 3."""
    r = redis.Redis.from_url(url)
    base, libs = scripts._libs()

    def cost(source: str, n: int = 2000) -> float:
        script = r.register_script(f"local KEYS, ARGV = KEYS, ARGV\n{source}\nreturn 1")
        script(keys=[], args=[])
        r.config_resetstat()
        for _ in range(n):
            script(keys=[], args=[])
        stat = r.info("commandstats")["cmdstat_evalsha"]
        return float(stat["usec"]) / float(stat["calls"])

    rows = []
    for name in names:
        body = (base / f"{name}.lua").read_text(encoding="utf-8")
        every = "\n".join(libs[n] for n in scripts.LIB_NAMES)
        reached = "\n".join(libs[n] for n in scripts.carried(name, body, libs))
        best = [min(cost(every) for _ in range(3)), min(cost(reached) for _ in range(3))]
        functions = [len(re.findall(r"^local function", src, re.M)) for src in (every, reached)]
        rows.append([name, f"{functions[0]} → {functions[1]}", f"{best[0]:.1f} → {best[1]:.1f}"])
    r.close()
    return rows


def _whole_read(*_: Any) -> Any:
    """A ``read_facts`` whose facts never serve, so builds read whole (a plan that asks nothing)."""
    return None
    yield  # a generator: the plans call it with ``yield from``


def cold_build_costs(url: str, messages: int) -> dict[str, dict[str, float]]:
    """The chat build of a stateless worker (``item_cache_bytes=0``: every build starts cold), which
    reads the window's facts and then the bodies that fit, against the same worker reading the
    window whole (as it did before, and as a store with an item cache does on a miss), for a
    budget the window fits and one it is 3x over."""
    r, rng = redis.Redis.from_url(url), random.Random(7)
    handle = {"max_tokens": 400_000, "max_items": messages * 4}
    with cs.ContextStore.from_url(url, prefix="shard", item_limit=messages * 4) as store:
        w = store.handle("cold", **handle)
        _fill(w, messages, rng)
        total = w.stats().current_tokens
    out: dict[str, dict[str, float]] = {}
    stateless = cs.ContextStore.from_url(url, prefix="shard", item_limit=messages * 4, item_cache_bytes=0)
    facts_path = build_read_plans.read_facts
    for label, budget in (("fits", 400_000), ("3x over", total // 3)):
        opts = cs.BuildOptions(max_tokens=budget, reserve_for_response=0, max_history_items=100_000)
        build = partial(lambda i, opts: stateless.handle("cold", **handle).build_messages_structured(opts), opts=opts)
        build_read_plans.read_facts = _whole_read  # benchmark only: the whole read, side by side
        out[f"chat build, stateless worker, {label}: whole read"] = measured(r, build, 60)
        build_read_plans.read_facts = facts_path
        out[f"chat build, stateless worker, {label}: facts, then the bodies"] = measured(r, build, 60)
    stateless.close()
    r.close()
    return out


def appended_build_costs(url: str, windows: int = 30, messages: int = 200, added: int = 9) -> dict[str, Any]:
    """The build read a fleet worker makes most: its cache holds the window, and other workers
    added ``added`` messages since: it reads the facts, then the bodies of what was added (two
    MULTI/EXECs, the second with the ``built`` event). Each run times the builds alone (the adds
    go first)."""
    r, rng = redis.Redis.from_url(url), random.Random(9)
    opts = cs.BuildOptions(max_tokens=400_000, reserve_for_response=0, max_history_items=100_000)
    handle: dict[str, Any] = {"max_tokens": 400_000, "max_items": messages * 4}
    writer, reader = (cs.ContextStore.from_url(url, prefix="appended", item_limit=messages * 4) for _ in range(2))
    pairs = []
    for k in range(windows + 5):  # 5 more for measured()'s unmeasured calls (i < 0)
        w, mine = writer.handle(f"a{k}", **handle), reader.handle(f"a{k}", **handle)
        _fill(w, messages, rng)
        mine.build_messages_structured(opts)
        w.add(_body(rng), role="user")
        mine.build_messages_structured(opts)  # seen moving: its builds read first
        pairs.append((w, mine))
    runs: dict[str, list[dict[str, float]]] = {"the facts, then the added bodies": []}
    for _ in range(6):
        for w, _ in pairs:
            w.add_many([{"content": _body(rng), "role": "user"} for _ in range(added)])
        runs["the facts, then the added bodies"].append(
            measured(r, lambda i: pairs[i][1].build_messages_structured(opts), windows)
        )
    for closing in (writer, reader, r):
        closing.close()
    return {f"build after {added} adds elsewhere, {how} (cached worker)": _medians(got) for how, got in runs.items()}


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over ``runs`` (the other entries of the first run)."""
    return {k: statistics.median(run[k] for run in runs) if isinstance(v, float) else v for k, v in runs[0].items()}


def shard_costs(url: str, messages: int = 1000) -> dict[str, Any]:
    """Every measurement of this file on the server at ``url``."""
    r = redis.Redis.from_url(url)
    r.flushall()
    r.config_set("slowlog-log-slower-than", 1_000_000)
    r.close()
    calls = {
        **add_costs(url, messages),
        **unchanged_build_costs(url, messages),
        **cold_build_costs(url, messages),
        **appended_build_costs(url, windows=30 if messages >= 1000 else 5, messages=min(messages, 200)),
        **turn_costs(url, messages),
    }
    return {"calls": calls, "memory": memory_costs(url, messages)}


def report(version: str, costs: dict[str, Any]) -> None:
    """The table of calls and the memory line of one server."""
    rows = [
        [name, f"{c['cpu_us']:.0f}", f"{c['script_us']:.0f}", f"{c['script_calls']:.1f}", f"{c['client_p50_us']:.0f}",
         f"{c['sent_kib']:.1f}"]
        for name, c in costs["calls"].items()
    ]  # fmt: skip
    print(f"\n### Redis {version}: single calls, each alone\n")
    heads = ["call", "Redis CPU µs (process)", "script µs (commandstats)", "scripts/call", "client p50 µs", "KiB sent"]
    print(table(heads, rows))
    add = costs["calls"]["contextstore add"]
    inner = sum(add["commands_us"].values())
    top = sorted(add["commands_us"].items(), key=lambda kv: -kv[1])[:6]
    print(
        f"\nan add's {add['script_us']:.0f} µs of script time: {inner:.0f} µs in the commands it runs "
        f"({', '.join(f'{k} {v:.1f}' for k, v in top)}), {add['script_us'] - inner:.0f} µs in Lua itself"
    )
    m = costs["memory"]
    parts = ", ".join(f"{k}={v}" for k, v in sorted(m["per_key"].items()))
    print(f"\nmemory per message: {m['bytes_per_message']:.0f} B (floor {m['floor_per_message']:.0f} B); {parts}")


def goal_rows(version: str, costs: dict[str, Any]) -> list[list[str]]:
    """The issue's per-call goals, met or not, from one server's costs."""
    c, m = costs["calls"], costs["memory"]
    add, same, two = c["contextstore add"], c["bare script, same writes"], c["bare EVALSHA, ZADD + HSET"]
    unchanged = c["build, unchanged window"]
    ratio_server = add["script_us"] / same["script_us"]
    ratio_client = add["client_p50_us"] / two["client_p50_us"]
    ratio_memory = m["bytes_per_message"] / m["floor_per_message"]
    bare, leased = c["conversation turn, no lease"], c["conversation turn, win.turn()"]
    extra_calls, extra_us = leased["script_calls"] - bare["script_calls"], leased["script_us"] - bare["script_us"]

    whole = c["chat build, stateless worker, 3x over: whole read"]
    facts = c["chat build, stateless worker, 3x over: facts, then the bodies"]
    ratio_sent, ratio_cpu = facts["sent_kib"] / whole["sent_kib"], facts["cpu_us"] / whole["cpu_us"]

    def met(ok: bool) -> str:
        return "met" if ok else "not met"

    return [
        [f"Redis {version}: a cold chat build 3x over budget moves only what fits (≤ 0.5x a whole read's bytes)",
         f"{facts['sent_kib']:.0f} vs {whole['sent_kib']:.0f} KiB ({ratio_sent:.2f}x); process CPU "
         f"{facts['cpu_us']:.0f} vs {whole['cpu_us']:.0f} µs ({ratio_cpu:.2f}x)", met(ratio_sent <= 0.5)],
        [f"Redis {version}: add, server time ≤ 2x the bare script with the same writes",
         f"{add['script_us']:.0f} vs {same['script_us']:.0f} µs ({ratio_server:.2f}x)", met(ratio_server <= 2)],
        [f"Redis {version}: add, client p50 ≤ 2x a bare EVALSHA round trip",
         f"{add['client_p50_us']:.0f} vs {two['client_p50_us']:.0f} µs ({ratio_client:.2f}x)", met(ratio_client <= 2)],
        [f"Redis {version}: build of an unchanged window ≤ 30 µs of server time",
         f"{unchanged['script_us']:.0f} µs, {unchanged['script_calls']:.0f} call ({unchanged['cpu_us']:.0f} µs of "
         f"process CPU; read first: {c['build, unchanged window, read first']['script_us']:.0f} µs)",
         met(unchanged["script_us"] <= 30)],
        [f"Redis {version}: memory per message ≤ 1.1x the bare floor (log expired)",
         f"{m['bytes_per_message']:.0f} vs {m['floor_per_message']:.0f} B ({ratio_memory:.2f}x)",
         met(ratio_memory <= 1.1)],
        [f"Redis {version}: a turn lease adds at most one small call per turn",
         f"+{extra_calls:.1f} scripts, +{extra_us:.0f} µs of script time per turn", met(extra_calls <= 1.05)],
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args()
    with redis_server(tcp=True) as url:
        version = server_version(url)
        costs = shard_costs(url, args.messages)
        helpers = helper_costs(url)
    report(version, costs)
    print(f"\n### Redis {version}: a script's helpers, re-created on every EVALSHA\n")
    print(table(["script", "local functions: the library → the files it needs", "µs per call"], helpers))
    print(table(["goal", "measured", "status"], goal_rows(version, costs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
