"""``server start|stop|status`` (the embedded redis-server) and ``demo`` (the main job: worker
processes sharing one window)."""

from __future__ import annotations

import click

from ..embedded import EmbeddedServer
from .app import Env, cli, pass_env
from .demo import DemoOptions, cmd_demo


@cli.command("server")
@click.argument("action", type=click.Choice(["start", "stop", "status"]))
@pass_env
def server(env: Env, action: str) -> None:
    """Start, stop or show the embedded redis-server.

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


@cli.command("demo")
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True, help="worker processes")
@click.option("--items", type=click.IntRange(min=1), default=50, show_default=True, help="items each worker adds")
@click.option("--window", default="demo", show_default=True, help="window id to use; it is reset first")
@click.option(
    "--max-tokens", type=click.IntRange(min=1), default=1500, show_default=True, help="the window's token limit"
)
@pass_env
def demo(env: Env, workers: int, items: int, window: str, max_tokens: int) -> int:
    """Run workers that share one window (the main job).

    Starts the embedded server (unless --url), lets worker processes add to one window while it
    evicts and compacts, then prints the built prompt, the stats and the verify() result."""
    return cmd_demo(DemoOptions(env.url, env.path, env.prefix, window, workers, items, max_tokens))
