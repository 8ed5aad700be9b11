"""The ``contextstore`` command: a demo of the main job, and inspection without redis-cli.

Exit codes: 0 success, 1 an error (Redis unreachable, a missing window, a broken window,
a refused operation), 2 a usage error (a bad option or argument). An expected failure prints
one line on stderr, never a traceback; ``-v`` shows the library's log on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, NoReturn

from .. import __version__
from ..errors import ContextStoreError
from .commands import (
    EXIT_ERROR,
    EXIT_USAGE,
    UsageError,
    cmd_build,
    cmd_items,
    cmd_markdown,
    cmd_server,
    cmd_snapshot,
    cmd_stats,
    cmd_verify,
    cmd_windows,
)
from .compactor import add_compactor
from .demo import cmd_demo


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Any:
    """An argparse type: an int >= ``low`` (a clear one-line usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return parse


_positive, _non_negative = _int_at_least(1), _int_at_least(0)


def _window_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("window", help="the window id")


def _add_demo(sub: Any) -> None:
    d = sub.add_parser(
        "demo",
        help="several worker processes share one window; prints the prompt and stats",
        description="Start the embedded server (unless --url), let worker processes add "
        "to one window while it evicts and compacts, then print the built prompt, the "
        "stats and the verify() result.",
    )
    d.add_argument("--workers", type=_positive, default=4, help="worker processes (default: 4)")
    d.add_argument("--items", type=_positive, default=50, help="items each worker adds (default: 50)")
    d.add_argument("--window", default="demo", help="window id to use; it is reset first (default: demo)")
    d.add_argument("--max-tokens", type=_positive, default=1500, help="the window's token limit (default: 1500)")
    d.set_defaults(fn=cmd_demo)


def _add_readers(sub: Any) -> None:
    sub.add_parser("windows", help="list window ids under the prefix").set_defaults(fn=cmd_windows)
    s = sub.add_parser("stats", help="a window's counters")
    _window_arg(s)
    s.add_argument("--json", action="store_true", help="print the stats as JSON")
    s.set_defaults(fn=cmd_stats)
    i = sub.add_parser("items", help="a window's items in arrival order")
    _window_arg(i)
    i.add_argument("--types", nargs="*", metavar="TYPE", help="only these item types (e.g. code error)")
    i.add_argument("--limit", type=_non_negative, help="only the N most recent items")
    i.set_defaults(fn=cmd_items)
    b = sub.add_parser("build", help="print the prompt a build would give")
    _window_arg(b)
    b.add_argument("--max-tokens", type=_positive, help="token limit of this build (default: the window's)")
    b.add_argument(
        "--reserve", type=_non_negative, default=1000, help="tokens kept free for the response (default: 1000)"
    )
    b.add_argument(
        "--max-history",
        type=_non_negative,
        default=10,
        help="most recent user/assistant messages to consider (default: 10)",
    )
    b.add_argument(
        "--json",
        action="store_true",
        help="print the whole result as JSON: content, tokens, included/excluded/omitted ids",
    )
    b.set_defaults(fn=cmd_build)
    m = sub.add_parser("markdown", help="print the window as markdown (## Context, one fenced block per item)")
    _window_arg(m)
    m.add_argument("--language", help="language word on every code fence (default: from each item's metadata)")
    m.set_defaults(fn=cmd_markdown)
    sn = sub.add_parser("snapshot", help="print a JSON snapshot (restore it with ContextWindow.restore)")
    _window_arg(sn)
    sn.set_defaults(fn=cmd_snapshot)
    v = sub.add_parser("verify", help="check a window's keys against every invariant (exit 1 if broken)")
    _window_arg(v)
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(fn=cmd_verify)


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (every option has help)."""
    p = _Parser(
        prog="contextstore",
        description="Shared LLM context windows in Redis.",
        epilog="exit status: 0 ok, 1 error, 2 usage error",
    )
    p.add_argument("--version", action="version", version=f"contextstore {__version__}")
    p.add_argument("--url", default=None, help="Redis URL (default: $CONTEXTSTORE_URL, else the embedded server)")
    p.add_argument(
        "--path",
        default=None,
        help="data directory of the embedded server (default: $CONTEXTSTORE_HOME, else ~/.local/share/contextstore)",
    )
    p.add_argument("--prefix", default="ctx", help="key prefix of the windows (default: ctx)")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log to stderr: -v for info, -vv for debug (retries, every item)",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_demo(sub)
    _add_readers(sub)
    add_compactor(sub, _positive, _non_negative)
    sv = sub.add_parser("server", help="manage the embedded redis-server")
    sv.add_argument("action", choices=["start", "stop", "status"], help="start, stop, or show its status")
    sv.set_defaults(fn=cmd_server)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    args = parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose > 1 else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
        )
    try:
        return int(args.fn(args))
    except UsageError as exc:
        print(f"contextstore {args.cmd}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ContextStoreError as exc:
        print(f"contextstore: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) else EXIT_ERROR
    except KeyboardInterrupt:
        print("contextstore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`contextstore items w | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
