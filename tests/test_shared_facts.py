"""Facts that Python and Lua both state, checked against each other without Redis: each side
stays one owner's, and a change to one side alone fails here (issue "one owner")."""

from __future__ import annotations

import re

import msgspec

from contextstore import events
from contextstore.core import wire
from contextstore.core.config import ConfigValues, config_values, creation_config
from contextstore.core.keys import KEY_NAMES
from contextstore.core.layout import Meta
from contextstore.drivers import scripts
from contextstore.errors import SCRIPT_ERRORS
from contextstore.types import DEFAULT_THRESHOLD, ContextSnapshot, WindowConfig, WindowOptions

#: a Lua string literal passed where a name is expected: fail('CODE' ..., event('kind' ...
_FAIL = re.compile(r"fail\('([A-Z]+)'")
#: an assignment of keys to their locals: K_A, K_B = keys[1], keys[2]
_BINDING = re.compile(r"((?:K_\w+\s*,\s*)*K_\w+)\s*=\s*((?:keys\[\d+\]\s*,\s*)*keys\[\d+\])")
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


#: the fields of a snapshot that are not window options
_SNAPSHOT_ONLY = {"format_version", "window_id", "created_at", "items", "archive"}


def test_every_list_of_the_window_options_names_the_same_options():
    stored = set(wire.CONFIG_ATTRS.values())  # one per config field of :meta, in Meta.CONFIG order
    assert tuple(wire.CONFIG_ATTRS) == Meta.CONFIG
    assert set(WindowConfig.__struct_fields__) == stored
    changeable = stored - {"item_limit"}  # a store option, never a window's
    assert set(WindowOptions.__annotations__) == set(ConfigValues.__struct_fields__) == changeable
    assert set(ContextSnapshot.__struct_fields__) - _SNAPSHOT_ONLY == changeable
    assert set(wire.CONFIG_FIELDS) == changeable


def test_the_window_option_defaults_have_one_owner():
    created = creation_config(config_values({}, 1000), 1000)  # a window made with nothing passed
    in_config = {f.name: f.default for f in msgspec.structs.fields(WindowConfig)}
    in_snapshot = {f.name: f.default for f in msgspec.structs.fields(ContextSnapshot)}
    for name in ("keep_recent", "clear_at_least", "warn_percent", "events_maxlen", "archive_ttl_seconds"):
        assert getattr(created, name) == in_config[name] == in_snapshot[name], name
    assert created.compaction_threshold == in_snapshot["compaction_threshold"] == DEFAULT_THRESHOLD
    # what the scripts take for an option a window written by an older version lacks
    sent = dict(zip(Meta.CONFIG, wire.config_args(created), strict=True))
    assert {f: sent[f] for f in Meta.DEFAULTS} == Meta.DEFAULTS
    # and what the docs of the options say
    said = " ".join((WindowOptions.__doc__ or "").split())
    for name in ("compaction_threshold", "warn_percent", "events_maxlen", "archive_ttl_seconds"):
        value = getattr(created, name)
        assert f"``{name}={value}``" in said or f"``{name}={value:g}``" in said, name


def test_the_scripts_bind_the_keys_at_the_positions_python_passes_them():
    calls = (scripts.lua_dir() / "lib" / "calls.lua").read_text(encoding="utf-8")
    begin = calls[calls.index("local function begin_call") :]
    begin = begin[: begin.index("\nend")]
    bound: dict[str, int] = {}
    for names, indexes in _BINDING.findall(begin):
        pairs = zip(re.findall(r"K_(\w+)", names), re.findall(r"\d+", indexes), strict=True)
        bound.update({name.lower(): int(i) for name, i in pairs})
    passed = {name: i for i, name in enumerate(KEY_NAMES, start=1)}
    assert bound == passed, "lib/calls.lua begin_call binds KEYS at other positions than keys.KEY_NAMES"
    core = (scripts.lua_dir() / "lib" / "core.lua").read_text(encoding="utf-8")
    documented = {name: int(i) for i, name in re.findall(r"--\s+KEYS\[(\d+)\]\s+(\w+)", core)}
    assert documented == passed, "the KEYS table of lib/core.lua says other positions"
