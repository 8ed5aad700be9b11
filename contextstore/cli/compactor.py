"""``contextstore compactor``: the background compactor of ``store.run_compactor()`` as a
process. It runs until SIGINT or SIGTERM, then finishes the window it is on and exits 0. Also
the summarizer and scorer options that ``compact`` shares."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..compactor import COMPACTOR_GROUP
from .app import BadInput, Env, cli, pass_env

F = TypeVar("F", bound=Callable[..., Any])


def helper_options(fn: F) -> F:
    """``--summarizer``, ``--model``, ``--base-url`` and ``--scorer``."""
    options = [
        click.option(
            "--summarizer",
            type=click.Choice(["none", "extractive", "openai"]),
            default="extractive",
            show_default=True,
            help="summarizer for the summarize strategy",
        ),
        click.option("--model", help="model name for --summarizer openai"),
        click.option(
            "--base-url", help="OpenAI-compatible endpoint for --summarizer openai (default: $OPENAI_BASE_URL)"
        ),
        click.option(
            "--scorer",
            type=click.Choice(["none", "bm25"]),
            default="none",
            show_default=True,
            help="relevance scorer for the selective strategy",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def helpers_of(summarizer: str, model: str | None, base_url: str | None, scorer: str) -> dict[str, Any]:
    """The summarizer and scorer the options name, as store keywords."""
    from ..relevance import BM25Scorer
    from ..summarize import ExtractiveSummarizer, OpenAISummarizer

    helpers: dict[str, Any] = {}
    if summarizer == "extractive":
        helpers["summarizer"] = ExtractiveSummarizer()
    elif summarizer == "openai":
        if not model:
            raise BadInput("--summarizer openai needs --model")
        helpers["summarizer"] = OpenAISummarizer(model=model, base_url=base_url)
    if scorer == "bm25":
        helpers["relevance_scorer"] = BM25Scorer()
    return helpers


@cli.command("compactor")
@click.argument("windows", nargs=-1, metavar="[WINDOW]...")
@helper_options
@click.option("--group", default=COMPACTOR_GROUP, show_default=True, help="consumer group")
@click.option("--consumer", help="this compactor's name in the group (default: host-pid)")
@click.option("--lease-ms", type=click.IntRange(min=1), default=120_000, show_default=True, help="a window's lease")
@click.option(
    "--claim-after-ms",
    type=click.IntRange(min=0),
    default=30_000,
    show_default=True,
    help="claim a dead compactor's events after this long",
)
@pass_env
def compactor(
    env: Env,
    /,
    windows: tuple[str, ...],
    group: str,
    consumer: str | None,
    lease_ms: int,
    claim_after_ms: int,
    **kw: Any,
) -> None:
    """Compact windows in the background.

    Follows the windows' events (default: every window) through a consumer group and compacts a
    window with its default strategy when it crosses warn_percent (down to its
    compaction_target, else warn_percent - 15).
    Several compactors may run; one works on a window at a time. Stops on SIGINT or SIGTERM."""
    store = env.store(**helpers_of(**kw))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    click.echo(f"contextstore compactor: tending {', '.join(windows) or 'every window'}", err=True)
    store.run_compactor(
        list(windows) or None,
        stop=stop,
        group=group,
        consumer=consumer,
        lease_ms=lease_ms,
        claim_after_ms=claim_after_ms,
    )
    click.echo("contextstore compactor: stopped", err=True)
