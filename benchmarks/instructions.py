"""What one add and one stateless build cost the shard in CPU instructions, for two versions side
by side: a count that does not move with the machine's load (valgrind's callgrind counts
instructions, not seconds).

    python benchmarks/instructions.py --baseline /path/to/an/older/checkout [--server PATH] [--adds 200]

For each version (a worker process with that version first on its path) a redis-server runs under
callgrind; the worker fills a window (--messages chat messages), zeroes the counters
(``callgrind_control --zero``), runs --adds adds of one message, and the server's instructions
are dumped (``callgrind_control --dump``); then the same for as many builds of chat messages
within 8,000 tokens by a stateless store (``item_cache_bytes=0``: every build reads the window,
as a fleet's workers do). The table gives instructions per add and per build for each version,
on the server given (default: the bundled 6.2, which runs the scripts by EVALSHA).
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
rng = random.Random(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
text = lambda: " ".join(rng.choice(words) for _ in range(90))
with cs.ContextStore.from_url(url, prefix="ins", item_limit=5000, item_cache_bytes=0) as store:
    w = store.window("w", max_tokens=10**9, max_items=5000)
    for i in range(0, messages, 100):
        w.add_many([{"content": text(), "role": ("user", "assistant")[j % 2]} for j in range(100)])
    for call in (lambda: w.add(text(), role="user"), lambda: w.build_messages(cs.BuildOptions(max_tokens=8000))):
        call()  # the scripts are loaded, the store's first-write check is done
        subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
        for _ in range(adds):
            call()
        subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)
print(cs.__file__)
"""


def _count(dump: Path) -> int:
    text = dump.read_text(errors="replace")
    found = re.search(r"^summary:\s*(\d+)", text, re.M) or re.search(r"^totals:\s*(\d+)", text, re.M)
    if found is None:
        raise SystemExit(f"no instruction count in {dump}")
    return int(found.group(1))


def _instructions(path: Path, binary: str, messages: int, adds: int) -> tuple[int, int]:
    """The server's instructions for ``adds`` adds, and for as many builds, of version ``path``."""
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
            [sys.executable, "-c", WORKER, url, str(server.pid), str(messages), str(adds)],
            env=env, cwd=path, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        if done.returncode != 0 or not done.stdout.strip().startswith(str(path)):
            raise SystemExit(f"the worker of {path} failed:\n{done.stdout[-500:]}{done.stderr[-2000:]}")
        dumps = sorted(Path(d).glob("callgrind.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        if len(dumps) < 2:
            raise SystemExit(f"expected two callgrind dumps in {d}, found {len(dumps)}")
        return _count(dumps[-2]), _count(dumps[-1])
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--server", help="the redis-server binary (default: the bundled 6.2)")
    ap.add_argument("--adds", type=int, default=200)
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args()
    binary = args.server or redis_binary()
    base, this = (
        [n / args.adds for n in _instructions(path, binary, args.messages, args.adds)]
        for path in (args.baseline.resolve(), HERE)
    )
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()[2]
    print(f"\n### {version}: server instructions per call (callgrind), {args.adds} calls, {args.messages} messages\n")
    print(table(["version", "per add", "ratio", "per stateless build", "ratio"], [
        ["baseline", f"{base[0]:,.0f}", "1.00x", f"{base[1]:,.0f}", "1.00x"],
        ["this", f"{this[0]:,.0f}", f"{this[0] / base[0]:.2f}x", f"{this[1]:,.0f}", f"{this[1] / base[1]:.2f}x"],
    ]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
