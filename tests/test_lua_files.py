"""Each Lua file reads on its own: the constants it uses are checked in (``lua/lib/constants.lua``,
current with ``core/layout.py``), and the helper files it names on its ``-- needs:`` line (and
theirs) define every helper it uses, so the 6.2 assembly, which carries only those files, has
them all. No Redis: these read the files."""

from __future__ import annotations

import re

import pytest

from contextstore.core.layout import lua_constants
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
    """pin.lua without lib/meta.lua, whose read_config it calls: the check names it."""
    body = (BASE / "pin.lua").read_text(encoding="utf-8")
    assert "read_config" in lacking(body, defined(body), ["constants", "core", "events"])


def test_a_need_with_no_file_raises():
    with pytest.raises(ContextStoreError, match="nosuch"):
        scripts.needs("-- x.lua\n-- needs: core nosuch\nreturn 1\n")
    with pytest.raises(ContextStoreError, match="no '-- needs:' line"):
        scripts.needs("return 1\n")


def test_every_script_assembles_for_both_kinds_of_server():
    sources = scripts.sources()
    assert set(sources) == set(scripts.SCRIPT_NAMES)
    assert all(s.startswith("local KEYS, ARGV = KEYS, ARGV\n-- lib/constants.lua") for s in sources.values())
    code, names = scripts.library()
    assert code.startswith("#!lua name=contextstore_") and set(names) == set(scripts.SCRIPT_NAMES)
