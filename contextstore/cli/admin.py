"""``server start|stop|status`` (the embedded redis-server) and ``demo`` (the main job: worker
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
