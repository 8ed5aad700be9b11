"""Facts that Python and Lua both state, checked against each other without Redis: each side
stays one owner's, and a change to one side alone fails here (issue "one owner")."""

from __future__ import annotations

import re

from contextstore import events, scripts
from contextstore.errors import SCRIPT_ERRORS

#: a Lua string literal passed where a name is expected: fail('CODE' ..., event('kind' ...
_FAIL = re.compile(r"fail\('([A-Z]+)'")
_EVENT = re.compile(r"event\((?:[^()']*?\band\s+)?'([a-z_]+)'(?:\s+or\s+'([a-z_]+)')?")


def _lua_code() -> str:
    """Every Lua file, comments left out (a comment may name a code it does not answer)."""
    files = sorted(scripts.lua_dir().rglob("*.lua"))
    return "\n".join(re.sub(r"--[^\n]*", "", path.read_text(encoding="utf-8")) for path in files)


def test_the_error_codes_the_scripts_answer_are_the_ones_python_maps():
    answered = set(_FAIL.findall(_lua_code()))
    assert answered, "no fail('CODE') found: the pattern no longer matches the scripts"
    assert answered - set(SCRIPT_ERRORS) == set(), "a script answers a code errors.SCRIPT_ERRORS does not map"
    assert set(SCRIPT_ERRORS) - answered == set(), "errors.SCRIPT_ERRORS maps a code no script answers"


def test_the_event_kinds_the_scripts_write_are_the_typed_events():
    written = {kind for pair in _EVENT.findall(_lua_code()) for kind in pair if kind}
    assert written, "no event('kind') found: the pattern no longer matches the scripts"
    # `built` is the one event a client writes (event.lua takes its name as an argument)
    assert written | {"built"} == set(events.KINDS)
