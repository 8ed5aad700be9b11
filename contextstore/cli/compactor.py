"""``contextstore compactor``: the background compactor of ``store.run_compactor()`` as a
process. It runs until SIGINT or SIGTERM, then finishes the window it is on and exits 0."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from ..compactor import COMPACTOR_GROUP
from .commands import EXIT_OK, UsageError, open_store


def add_compactor(sub: Any, positive: Any, non_negative: Any) -> None:
    """The ``compactor`` verb and its options."""
    c = sub.add_parser(
        "compactor",
        help="compact windows in the background as they cross warn_percent",
        description="Follow the windows' events through a consumer group and compact each window "
        "with its default strategy (down to warn_percent - 15) when it crosses warn_percent. Several "
        "compactors may run; one works on a window at a time. Stops on SIGINT or SIGTERM.",
    )
    c.add_argument("windows", nargs="*", metavar="WINDOW", help="window ids to tend (default: every window)")
    c.add_argument(
        "--summarizer",
        choices=["none", "extractive", "openai"],
        default="extractive",
        help="summarizer for windows whose default strategy is summarize (default: extractive)",
    )
    c.add_argument("--model", help="model name for --summarizer openai")
    c.add_argument("--base-url", help="OpenAI-compatible endpoint for --summarizer openai (default: $OPENAI_BASE_URL)")
    c.add_argument(
        "--scorer", choices=["none", "bm25"], default="none", help="relevance scorer for the selective strategy"
    )
    c.add_argument("--group", default=COMPACTOR_GROUP, help=f"consumer group (default: {COMPACTOR_GROUP})")
    c.add_argument("--consumer", help="this compactor's name in the group (default: host-pid)")
    c.add_argument("--lease-ms", type=positive, default=120_000, help="a window's lease (default: 120000)")
    c.add_argument(
        "--claim-after-ms",
        type=non_negative,
        default=30_000,
        help="claim a dead compactor's events after this long (default: 30000)",
    )
    c.set_defaults(fn=cmd_compactor)


def _helpers(args: argparse.Namespace) -> dict[str, Any]:
    """The summarizer and scorer the options name."""
    from ..relevance import BM25Scorer
    from ..summarize import ExtractiveSummarizer, OpenAISummarizer

    helpers: dict[str, Any] = {}
    if args.summarizer == "extractive":
        helpers["summarizer"] = ExtractiveSummarizer()
    elif args.summarizer == "openai":
        if not args.model:
            raise UsageError("--summarizer openai needs --model")
        helpers["summarizer"] = OpenAISummarizer(model=args.model, base_url=args.base_url)
    if args.scorer == "bm25":
        helpers["relevance_scorer"] = BM25Scorer()
    return helpers


def cmd_compactor(args: argparse.Namespace) -> int:
    """Run the compactor until SIGINT or SIGTERM."""
    store = open_store(args, **_helpers(args))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"contextstore compactor: tending {', '.join(args.windows) or 'every window'}", file=sys.stderr, flush=True)
    with store:
        store.run_compactor(
            args.windows or None,
            stop=stop,
            group=args.group,
            consumer=args.consumer,
            lease_ms=args.lease_ms,
            claim_after_ms=args.claim_after_ms,
        )
    print("contextstore compactor: stopped", file=sys.stderr, flush=True)
    return EXIT_OK
