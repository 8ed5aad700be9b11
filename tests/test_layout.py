"""The facts Python and Lua share have one owner (``contextstore/core/layout.py``): the scripts see
exactly the generated values, and each script is assembled from the helpers it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import contextstore as cs
from contextstore.core import layout
from contextstore.drivers import scripts
from contextstore.errors import raise_for_reply

ROOT = Path(__file__).resolve().parent.parent


def test_the_scripts_see_the_generated_constants(r):
    probe = layout.lua_constants() + (
        "return {RANK.system_prompt, RANK.custom, F.TOKENS, F.ITEMS_OF, tostring(SERVER_SIDE.summarize), "
        "tostring(STRATEGIES.selective), MAX_PRIORITY, STREAM_MAXLEN, REQUEST_LOG_MAX, tostring(MAX_TOKENS)}"
    )
    got = [x.decode() if isinstance(x, bytes) else x for x in r.eval(probe, 0)]
    assert got == [
        cs.ItemType.SYSTEM_PROMPT.rank,
        cs.ItemType.CUSTOM.rank,
        layout.Meta.TOKENS,
        layout.Meta.ITEMS_OF,
        "nil",
        "true",
        layout.MAX_PRIORITY,
        layout.STREAM_MAXLEN,
        layout.REQUEST_LOG_MAX,
        str(layout.MAX_TOKENS),
    ]


SCORE_PROBE = """
local out = {}
for i = 1, #ARGV, 3 do
  local itype, priority, seq = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local s = score(itype, priority, seq)
  out[#out + 1] = s
  out[#out + 1] = seq_of(s)
  out[#out + 1] = priority_of(s, RANK[itype])
  out[#out + 1] = tostring(band(RANK[itype], priority) + seq == tonumber(s))
end
return out
"""


def test_the_scripts_encode_and_decode_the_build_order_score_as_layout_does(r):
    """``score`` / ``band`` / ``seq_of`` / ``priority_of`` (lua/lib/items.lua) against
    ``layout.order_score``, for every type, the priority bounds and seqs up to the largest."""
    _, libs = scripts._libs()
    helpers = "\n".join(libs[n] for n in scripts.closure({"items"}, libs))
    cases = [(t, p, q) for t in cs.ItemType for p in (0, 1, 50, 99, 100) for q in (1, 2, 10**9, 10**10 - 1)]
    argv = [str(x) for t, p, q in cases for x in (t.value, p, q)]
    got = [x.decode() if isinstance(x, bytes) else x for x in r.eval(helpers + "\n" + SCORE_PROBE, 0, *argv)]
    expected = [x for t, p, q in cases for x in (str(layout.order_score(t.rank, p, q)), q, p, "true")]
    assert got == expected


SIZE_PROBE = """
local out = {}
for i = 1, #ARGV, 3 do
  out[#out + 1] = size_score(ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])) or false
end
return out
"""


def test_the_scripts_score_a_messages_size_as_layout_does(r):
    """``size_score`` (lua/lib/items.lua) against ``layout.size_score``: every power of two and
    its neighbours up to the most tokens an item may hold, seqs up to the largest; no score for
    an item that is not a user or assistant message."""
    _, libs = scripts._libs()
    helpers = "\n".join(libs[n] for n in scripts.closure({"items"}, libs))
    tokens = sorted({0, 1, layout.MAX_TOKENS} | {max(0, (1 << b) + d) for b in range(1, 30) for d in (-1, 0, 1)})
    cases = [
        (t, n, q) for t in ("user_message", "assistant_message", "tool_result") for n in tokens for q in (1, 10**10 - 1)
    ]
    argv = [str(x) for case in cases for x in case]
    got = [x.decode() if isinstance(x, bytes) else x for x in r.eval(helpers + "\n" + SIZE_PROBE, 0, *argv)]
    expected = [str(layout.size_score(n, q)) if t in layout.SIZED_TYPES else None for t, n, q in cases]
    assert got == expected
    assert layout.class_floor(layout.size_class(12)) == 8 and layout.size_class(layout.class_floor(5)) == 5


def test_each_helper_comes_after_the_helpers_it_needs():
    lib = scripts.lua_dir() / "lib"
    for i, name in enumerate(scripts.LIB_NAMES):
        needed = scripts.needs((lib / f"{name}.lua").read_text())
        assert needed <= set(scripts.LIB_NAMES[:i]), f"lib/{name}.lua needs {needed - set(scripts.LIB_NAMES[:i])}"


@pytest.mark.parametrize("name", scripts.SCRIPT_NAMES)
def test_every_script_names_real_helpers_and_is_assembled_with_them(name):
    text = (scripts.lua_dir() / f"{name}.lua").read_text()
    line = re.search(r"^-- needs: (.*)$", text, re.M)
    assert line and set(line.group(1).split()) <= {*scripts.LIB_NAMES}, f"{name}.lua: {line}"
    source = scripts.sources()[name]
    assert "(function()\nlocal KEYS, ARGV = {}, {}\n-- lib/constants.lua" in source
    assert f"return {scripts.runner(name)}(main, {scripts._bound(name, 'keys')}, args) end\n" in source
    assert source.rstrip().endswith("return run(KEYS, ARGV)")
    for lib in scripts.needs(text):
        assert f"-- lib/{lib}.lua:" in source
    library, names = scripts.library()
    assert f"function_name = '{names[name]}'" in library and f"MAINS[{name!r}] = function()" in library


def test_an_eval_script_carries_only_the_helper_files_it_needs():
    """An EVALSHA re-creates every helper its script carries, so a script carries only the files
    its ``-- needs:`` line names (and theirs)."""
    read, add = scripts.sources()["list"], scripts.sources()["add"]
    assert "-- lib/compaction.lua:" not in read and "local function plan_compaction" not in read
    assert "-- lib/compaction.lua:" in add and "local function plan_compaction" in add


def test_scripts_that_take_no_request_carry_none_of_its_helpers():
    """The reads and event.lua record no reply: as EVAL scripts they carry none of the request
    protocol's helpers (an EVALSHA would re-create them), and a request sent to them is refused."""
    for name in (*sorted(scripts.READS), "event"):
        source = scripts.sources()[name]
        assert "local function run_plain" in source and "local function run_request" not in source, name
        assert "local function replay(" not in source and "local function record_request" not in source, name
        assert f"return run_plain(MAINS[{name!r}], {scripts._bound(name, 'keys')}, args)" in scripts.library()[0]
    assert "local function replay(" in scripts.sources()["add"]


@pytest.mark.parametrize("name", ["peek", "event"])
def test_a_request_sent_to_a_script_that_takes_none_is_refused(redis_url, prefix, name):
    with cs.ContextStore.from_url(redis_url, prefix=prefix) as store:
        w = store.window("plain")
        w.add("one")
        args = ["meta"] if name == "peek" else ["0", "built", "items_included", "1"]
        keys = list(w._state.keys)
        with pytest.raises(cs.ContextStoreError, match="request"):
            raise_for_reply(store._scripts.run(name, keys, ["read:abc|", *args]))
        assert raise_for_reply(store._scripts.run(name, keys, ["", *args])) is not None


def test_a_library_defines_a_scripts_own_helpers_once_not_on_every_call():
    """Above its ``-- main:`` line a script's helpers go into the function library's load step (a
    ``do`` block of their own); only the main part runs per call. An EVAL script keeps them all
    in its body."""
    helpers, main = scripts.split_main("local function h() return 1 end\n-- main: the call\nreturn h()\n")
    assert helpers == "local function h() return 1 end\n" and main.startswith("-- main:")
    assert scripts.split_main("return 1\n") == ("", "return 1\n")
    library = scripts.library()[0]
    for name, helper in (("add", "make_room"), ("commands", "hmget")):
        per_call = library.split(f"MAINS['{name}'] = function()\n", 1)[1].split("\nend\nend\n", 1)[0]
        assert per_call.startswith("-- main:") and "local function" not in per_call
        assert f"local function {helper}(" in library.split(f"MAINS['{name}'] = function()", 1)[0]
        assert f"local function {helper}(" in scripts.sources()[name].split("local function main()", 1)[1]


def test_no_lua_file_spells_a_meta_hash_field_itself():
    """Lua reads and writes :meta through F (generated); a quoted field name would be a second
    owner of the fact."""
    fields = {v for k, v in vars(layout.Meta).items() if k.isupper() and isinstance(v, str)}
    for path in sorted(scripts.lua_dir().rglob("*.lua")):
        for call in re.findall(r"'H(?:GET|SET|MGET|INCRBY|DEL)', K_META, ([^)]*)\)", path.read_text()):
            quoted = set(re.findall(r"'([a-z_:]+)'", call)) & fields
            assert not quoted, f"{path.name} spells {quoted} in {call!r}"


@pytest.mark.slow
def test_ruff_check_and_format_are_clean():
    pytest.importorskip("ruff")
    for cmd in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        res = subprocess.run(
            [sys.executable, "-m", "ruff", *cmd], capture_output=True, text=True, cwd=ROOT, timeout=300
        )
        assert res.returncode == 0, res.stdout + res.stderr
