"""``server start|stop|status`` (the embedded server), ``admin load|acl|check-user`` (an
operator's steps for tenants whose users may not load code) and ``demo`` (the main job: worker
processes sharing one window)."""

from __future__ import annotations

import click

from .. import EmbeddedServer
from .app import Env, cli, pass_env
from .demo import DemoOptions, cmd_demo


@cli.command("server")
@click.argument("action", type=click.Choice(["start", "stop", "status"]))
@pass_env
def server(env: Env, action: str) -> None:
    """Start, stop or show the embedded server (Valkey).

    Its data lives under --path."""
    embedded = EmbeddedServer(env.path)
    if action == "start":
        embedded.start()
        click.echo(f"running at {embedded.url} (data in {embedded.path})")
    elif action == "stop":
        embedded.stop()
        click.echo("stopped")
    else:
        click.echo(f"{'running' if embedded.running else 'stopped'}: {embedded.url} (data in {embedded.path})")


@cli.group("admin")
def admin() -> None:
    """An operator's steps for a server shared by tenants.

    Tenants' ACL users may not load code (docs: reliability, "Tenants"): an operator's user loads
    contextstore's scripts, gives each tenant's user its rules and checks them."""


@admin.command("load")
@pass_env
def admin_load(env: Env) -> None:
    """Load contextstore's scripts on the server (every node of a cluster).

    Run it as a user who may load code, after every deploy of a new contextstore version (the
    function library is kept across restarts; the scripts for EVALSHA are not)."""
    for line in env.store().load_scripts():
        click.echo(f"loaded {line}")


@admin.command("acl")
@click.argument("tenant")
@click.option("--user", help="the ACL user's name (default: the tenant)")
@pass_env
def admin_acl(env: Env, tenant: str, user: str | None) -> None:
    """Print the ACL SETUSER command for TENANT's user on this server.

    The user reaches only windows whose id starts with TENANT: (under --prefix) and may run
    contextstore's loaded scripts, never code of its own; replace PASSWORD."""
    rules = env.store().tenant_acl(tenant)
    click.echo(" ".join(["ACL", "SETUSER", user or tenant, "on", ">PASSWORD", *rules]))


@admin.command("move-blobs")
@pass_env
def admin_move_blobs(env: Env) -> None:
    """Move tenants' blobs out of the prefix's shared keys (once, after upgrading).

    Before blobs were kept per tenant, every window's lay in the prefix's shared keys, which no
    tenant's user may reach. Run it once as an operator's user."""
    click.echo(f"moved {env.store().move_blobs_to_tenants()} blob copies into their tenants' keys")


@admin.command("check-user")
@click.argument("user")
@click.option("--tenant", help="the tenant whose windows the user reaches (default: the user's name)")
@pass_env
def admin_check_user(env: Env, user: str, tenant: str | None) -> int:
    """Check that ACL user USER may do what contextstore does for its tenant, and no more.

    Names every command the scripts run that USER lacks and, on Redis 7+ and Valkey (ACL DRYRUN),
    every kind of the tenant's keys (windows' items, events, turns, usage records, blobs) it may
    not read or write, and keys outside the tenant it is not refused: exit status 1 if any."""
    findings = env.store().check_user(user, tenant=tenant)
    if findings:
        click.echo(f"user {user!r} lacks {', '.join(findings)}: grant them (contextstore admin acl prints the rules)")
        return 1
    click.echo(f"user {user!r} may run every command contextstore runs, on every kind of its tenant's keys, no other")
    return 0


@cli.command("demo")
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True, help="worker processes")
@click.option("--turns", type=click.IntRange(min=1), default=12, show_default=True, help="turns each worker takes")
@click.option("--items", "turns_", type=click.IntRange(min=1), hidden=True, help="the old name of --turns")
@click.option("--window", default="demo", show_default=True, help="window id to use; it is reset first")
@click.option(
    "--max-tokens", type=click.IntRange(min=1), default=2000, show_default=True, help="the window's token limit"
)
@pass_env
def demo(env: Env, workers: int, turns: int, turns_: int | None, window: str, max_tokens: int) -> int:
    """Run workers that share one conversation (the main job).

    Starts the embedded server (unless --url); worker processes take turns of one conversation
    (a question, a tool call and its result, an answer: one atomic add each) in one window while
    it compacts; then prints what a worker would send the model next, the stats and verify()."""
    return cmd_demo(DemoOptions(env.url, env.path, env.prefix, window, workers, turns_ or turns, max_tokens))
