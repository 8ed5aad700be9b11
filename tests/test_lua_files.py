"""Each Lua file reads on its own: the constants it uses are checked in (``lua/lib/constants.lua``,
current with ``core/layout.py``), and the helper files it names on its ``-- needs:`` line (and
theirs) define every helper it uses, so the EVAL assembly, which carries only those files, has
them all. No Redis: these read the files."""

from __future__ import annotations

import re

import pytest

from contextstore.core.layout import SCRIPT_CALLS, command_name, lua_constants
from contextstore.drivers import scripts
from contextstore.errors import ContextStoreError

BASE, LIBS = scripts._libs()
#: a definition at the top of a file: ``local function f``, ``function f``, ``local a, b =``
_DEFINED = re.compile(r"^(?:local\s+function\s+(\w+)|function\s+(\w+)|local\s+([\w\s,]+?)\s*=)", re.M)
_STRING = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
_COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
#: a name used, not a field (``.name`` / ``:name``)
_USED = re.compile(r"(?<![\w.:])([A-Za-z_]\w*)")


def defined(text: str) -> set[str]:
    """The names a Lua file defines at its top level."""
    out = set()
    for m in _DEFINED.finditer(text):
        out.update(n.strip() for n in (m.group(1) or m.group(2) or m.group(3)).split(","))
    return out


def used(text: str) -> set[str]:
    """The names a Lua file uses, outside comments and strings."""
    return set(_USED.findall(_STRING.sub("''", _COMMENT.sub("", text))))


def lacking(text: str, own: set[str], files: list[str]) -> set[str]:
    """The helpers of ``lua/lib/`` that ``text`` uses but neither defines itself (``own``) nor
    finds in ``files``."""
    of_lib = set().union(*(defined(LIBS[n]) for n in scripts.LIB_NAMES))
    have = own.union(*(defined(LIBS[n]) for n in files))
    return (used(text) & of_lib) - have


def test_constants_lua_is_what_layout_generates():
    assert (BASE / "lib" / "constants.lua").read_text(encoding="utf-8") == lua_constants(), (
        'lua/lib/constants.lua is stale: python -c "from contextstore.core.layout import lua_constants as c; '
        "print(c(), end='')\" > lua/lib/constants.lua"
    )


@pytest.mark.parametrize("name", scripts.SCRIPT_NAMES)
def test_a_script_needs_every_helper_file_it_uses(name):
    body = (BASE / f"{name}.lua").read_text(encoding="utf-8")
    # its own needs, and its runner's file (which the assembly adds): not what that file needs in turn
    runner_file = "calls" if name in scripts.REQUESTLESS else "requests"
    missing = lacking(body, defined(body), [*scripts.closure(scripts.needs(body), LIBS), runner_file])
    assert not missing, f"lua/{name}.lua uses {sorted(missing)}: add their files to its '-- needs:' line"


@pytest.mark.parametrize("name", scripts.LIB_NAMES)
def test_a_helper_file_needs_every_helper_file_it_uses(name):
    text = LIBS[name]
    missing = lacking(text, defined(text), scripts.closure(scripts.needs(text), LIBS))
    assert not missing, f"lua/lib/{name}.lua uses {sorted(missing)}: add their files to its '-- needs:' line"


def test_the_check_sees_a_missing_need():
    """pin.lua without lib/meta.lua, whose stored_config it calls: the check names it."""
    body = (BASE / "pin.lua").read_text(encoding="utf-8")
    assert "stored_config" in lacking(body, defined(body), ["constants", "core", "events"])


def test_a_need_with_no_file_raises():
    with pytest.raises(ContextStoreError, match="nosuch"):
        scripts.needs("-- x.lua\n-- needs: core nosuch\nreturn 1\n")
    with pytest.raises(ContextStoreError, match="no '-- needs:' line"):
        scripts.needs("return 1\n")


def test_every_script_assembles_for_both_kinds_of_server():
    sources = scripts.sources()
    assert set(sources) == set(scripts.SCRIPT_NAMES)
    assert all("(function()\nlocal KEYS, ARGV = {}, {}\n-- lib/constants.lua" in s for s in sources.values())
    code, names = scripts.library()
    assert code.startswith("#!lua name=contextstore_") and set(names) == set(scripts.SCRIPT_NAMES)


@pytest.mark.parametrize("name", scripts.SCRIPT_NAMES)
def test_only_a_script_that_may_make_a_window_takes_the_callers_config(name):
    """``wire.TAKES_CONFIG`` (the scripts sent the handle's config first) is what the Lua reads:
    those scripts read it (``read_config``, or N_CONFIG past it) and say so in their header; the
    others never read ARGV as a config (``stored_config``: nil for a missing window)."""
    from contextstore.core import wire

    body = (BASE / f"{name}.lua").read_text(encoding="utf-8")
    header = "\n".join(line for line in body.splitlines() if line.startswith("--"))
    code = _COMMENT.sub("", body)
    takes = "read_config()" in code or "N_CONFIG" in code
    assert takes == (name in wire.TAKES_CONFIG), name
    assert ("ARGV[1..N_CONFIG]" in header) == takes, name


@pytest.mark.parametrize("name", scripts.SCRIPT_NAMES)
def test_a_script_touches_only_the_keys_its_header_names(name):
    """A script that takes some of the window keys (``-- KEYS: meta, pinned, turn (of the window
    keys ...)``) is sent only those (``ScriptRegistry.words``); its own code names no other (a
    helper that touched another would fail on the nil key, which the store tests would show)."""
    from contextstore.core.keys import KEY_NAMES

    body = (BASE / f"{name}.lua").read_text(encoding="utf-8")
    slots = scripts.key_slots(name)
    taken = set(KEY_NAMES) if slots is None else {KEY_NAMES[s] for s in slots}
    touched = {k.lower() for k in re.findall(r"\bK_([A-Z]+)\b", _COMMENT.sub("", body))}
    assert touched <= taken, f"lua/{name}.lua touches {sorted(touched - taken)} without naming them on its KEYS line"
    keys = [f"{{w}}:{k}" for k in KEY_NAMES]
    sent = scripts.ScriptRegistry(client=None).words(name, keys, ["x"])  # FCALL <function> <n> <keys> <args>
    assert sent[2] == len(taken) and set(sent[3 : 3 + len(taken)]) == {f"{{w}}:{k}" for k in taken}


def test_a_keys_line_naming_a_key_the_window_lacks_raises(tmp_path, monkeypatch):
    (tmp_path / "odd.lua").write_text("-- odd.lua\n-- needs: core\n-- KEYS: meta, nosuch (of the window keys).\n")
    monkeypatch.setattr(scripts, "lua_dir", lambda: tmp_path)
    scripts.key_slots.cache_clear()
    try:
        with pytest.raises(ContextStoreError, match="nosuch"):
            scripts.key_slots("odd")
    finally:
        scripts.key_slots.cache_clear()


_LOCALS = re.compile(r"^local\s+(?:function\s+(\w+)|([\w\s,]+?)\s*(?:=|$))", re.M)


def _locals(text: str) -> int:
    """How many locals ``text`` declares at its top level (each name of ``local a, b = ...``)."""
    return sum(1 if m.group(1) else len(m.group(2).split(",")) for m in _LOCALS.finditer(text))


def test_the_function_library_keeps_within_luas_200_locals():
    """The library's load step is one Lua function, and Lua allows a function 200 locals: the
    helper files at its top, and in each block the scoped files and one script's own helpers.
    (Over it, FUNCTION LOAD fails: 'main function has more than 200 local variables'.)"""
    assert not any(scripts.needs(LIBS[n]) & set(scripts.SCOPED) for n in scripts.LIB_NAMES)
    top = 3 + sum(_locals(LIBS[n]) for n in scripts.LIB_NAMES if n not in scripts.SCOPED)  # KEYS, ARGV, MAINS
    most = 0
    for name in scripts.SCRIPT_NAMES:
        text = (BASE / f"{name}.lua").read_text(encoding="utf-8")
        scoped = [n for n in scripts.carried(name, text, LIBS) if n in scripts.SCOPED]
        own = _locals(scripts.split_main(text)[0])
        most = max(most, top + sum(_locals(LIBS[n]) for n in scoped) + own)
    assert most <= 200, f"{most} locals: scope another helper file (scripts.SCOPED) or fold some together"
    assert top + sum(_locals(LIBS[n]) for n in scripts.SCOPED) + 16 > 200  # all at the top: over (what SCOPED is for)


@pytest.mark.parametrize("name", scripts.SCRIPT_NAMES)
def test_a_scripts_header_names_each_argument_it_reads_by_place(name):
    """Every ``ARGV[n]`` (or ``ARGV[N_CONFIG + n]``) a script reads is named in its header, alone
    or as the start of a range (``ARGV[3..]``); arguments read at computed places (``ARGV[i]``)
    are described in words there."""
    body = (BASE / f"{name}.lua").read_text(encoding="utf-8")
    header = "\n".join(line for line in body.splitlines() if line.startswith("--"))
    read = set(re.findall(r"ARGV\[((?:N_CONFIG \+ )?\d+)\]", _COMMENT.sub("", body)))
    named = set(re.findall(r"ARGV\[((?:N_CONFIG \+ )?\d+)(?:\]|\.\.)", header))
    assert read <= named, f"lua/{name}.lua reads {sorted(read - named)} without naming them in its header"


def test_every_command_the_scripts_run_is_one_the_permission_check_asks_for():
    # acl.lua asks the server for each of layout.SCRIPT_CALLS: a command missing there would pass
    # the check and then stop a script part-way for a tenant whose rules deny it
    calls = re.compile(r"redis\.p?call\(\s*'(\w+)'")
    bodies = [(BASE / f"{name}.lua").read_text(encoding="utf-8") for name in scripts.SCRIPT_NAMES]
    run = {m.lower() for body in [*bodies, *LIBS.values()] for m in calls.findall(body)}
    asked = {command_name(c).split("|")[0] for c in SCRIPT_CALLS}
    assert run and run <= asked, f"layout.SCRIPT_CALLS lacks {sorted(run - asked)}"
