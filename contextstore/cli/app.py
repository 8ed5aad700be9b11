"""The ``contextstore`` command group (Click): global options, how a verb reaches the store,
JSON output, and how failures become one line and an exit status.

Exit codes: 0 success, 1 an error (Redis unreachable, a missing window or item, a broken
window, a refused operation), 2 a usage error (a bad option, argument or input value). An
expected failure prints one line on stderr, never a traceback; ``-v`` shows the library's log.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from .. import ContextStore, ContextWindow, Prices, __version__
from ..errors import ContextStoreError, WindowNotFoundError
from .views import json_text, visible

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


class CommandFailed(click.ClickException):
    """An expected failure after parsing (an absent item, an existing window): one line on
    stderr, exit 1."""

    exit_code = EXIT_ERROR


class BadInput(CommandFailed):
    """Input the command cannot use (a bad file, bad JSON, a reserve larger than the limit): one
    line on stderr, exit 2."""

    exit_code = EXIT_USAGE


@dataclass
class Env:
    """What the global options say: where the store is and under which prefix."""

    url: str | None = None
    path: str | None = None
    prefix: str = "ctx"
    stores: list[ContextStore] = field(default_factory=list)

    def store(self, **helpers: Any) -> ContextStore:
        """The store the options name: --url, else --path, else $CONTEXTSTORE_URL or the embedded
        server (``helpers``: a summarizer or relevance scorer). Closed when the command ends."""
        if self.url:
            store = ContextStore.from_url(self.url, prefix=self.prefix, **helpers)
        elif self.path:
            store = ContextStore.embedded(self.path, prefix=self.prefix, **helpers)
        else:
            store = ContextStore.from_env(prefix=self.prefix, **helpers)
        self.stores.append(store)
        return store

    def window(self, window_id: str) -> ContextWindow:
        """The handle of an existing window; a missing one is an error (never created)."""
        return self.store().window(window_id, create=False)

    def unread(self, window_id: str) -> ContextWindow:
        """A handle that reads nothing of the window first: what verify, delete and import use,
        so that they work on a window whose config does not read (a corrupt one)."""
        return self.store().handle(window_id)

    def close(self) -> None:
        """Close every store the command opened."""
        while self.stores:
            self.stores.pop().close()


pass_env = click.make_pass_decorator(Env)
_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def json_option(fn: F) -> F:
    """The ``--json`` flag of a reading command."""
    return click.option("--json", "as_json", is_flag=True, help="print JSON (for scripts) instead of a view")(fn)


class PricesParam(click.ParamType):  # type: ignore[type-arg]
    """``INPUT,OUTPUT[,CACHE_READ,CACHE_WRITE]``: prices per million tokens (a ``Prices``)."""

    name = "prices"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Prices:
        """The ``Prices`` the words give (a usage error, exit 2, when they are not prices)."""
        if isinstance(value, Prices):
            return value
        words = str(value).split(",")
        try:
            numbers = [float(w) for w in words]
            if not 1 <= len(numbers) <= 4:
                raise ValueError
            return Prices(**dict(zip(("input", "output", "cache_read", "cache_write"), numbers, strict=False)))
        except (ValueError, ContextStoreError):
            self.fail(f"{value!r}: give INPUT,OUTPUT[,CACHE_READ,CACHE_WRITE], prices per million tokens", param, ctx)


def prices_option(fn: F) -> F:
    """The ``--prices`` option: what the reported usage cost, at the caller's prices."""
    return click.option(
        "--prices",
        type=PricesParam(),
        help="INPUT,OUTPUT[,CACHE_READ,CACHE_WRITE] per million tokens: show what the reported usage cost",
    )(fn)


def window_argument(fn: F) -> F:
    """The window id argument."""
    return click.argument("window", metavar="WINDOW")(fn)


def emit_json(value: object) -> None:
    """Print ``value`` as one JSON document (msgspec: Structs, datetimes, enums; C0 and C1
    controls escaped, so stored text never drives the terminal)."""
    click.echo(json_text(value))


#: the order ``--help`` lists the verbs in: reading, editing, moving, running
VERB_ORDER = (
    "ls show get stats build events watch verify snapshot add rm pin unpin priority compact clear delete restore "
    "export import server admin compactor demo"
).split()


class _Group(click.Group):
    """Verbs listed in ``VERB_ORDER``; old verb names stay as hidden aliases."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: i for i, name in enumerate(VERB_ORDER)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(rank)))


@click.group(cls=_Group, no_args_is_help=False, context_settings=_CONTEXT)
@click.version_option(__version__, prog_name="contextstore", message="%(prog)s %(version)s")
@click.option(
    "--url", envvar="CONTEXTSTORE_URL", help="Redis URL (default: $CONTEXTSTORE_URL, else the embedded server)"
)
@click.option(
    "--path",
    envvar="CONTEXTSTORE_HOME",
    help="data directory of the embedded server (default: $CONTEXTSTORE_HOME, else ~/.local/share/contextstore)",
)
@click.option("--prefix", default="ctx", show_default=True, help="key prefix of the windows")
@click.option("-v", "--verbose", count=True, help="log to stderr: -v for info, -vv for debug (retries, every item)")
@click.pass_context
def cli(ctx: click.Context, url: str | None, path: str | None, prefix: str, verbose: int) -> None:
    """Shared LLM context windows in Redis: inspect, edit, watch and move them.

    Exit status: 0 ok, 1 error, 2 usage error."""
    if verbose:
        level = logging.DEBUG if verbose > 1 else logging.INFO
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    else:
        _say_what_it_waits_for()
    env = ctx.ensure_object(Env)
    env.url, env.path, env.prefix = url, path, prefix
    ctx.call_on_close(env.close)


class _Waiting(logging.Filter):
    """Only the library's "waiting for Redis at ..." lines (one per call that has to retry)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno == logging.INFO and str(record.msg).startswith("waiting for")


def _say_what_it_waits_for() -> None:
    """Without -v, still print one line on stderr when a call waits for Redis to come back."""
    logger = logging.getLogger("contextstore")
    if any(isinstance(f, _Waiting) for h in logger.handlers for f in h.filters):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Waiting())
    handler.setFormatter(logging.Formatter("contextstore: %(message)s ..."))
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def _fail(message: str, status: int) -> int:
    click.echo(f"contextstore: {visible(message)}", err=True)
    return status


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    try:
        result = cli.main(args=argv, prog_name="contextstore", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see {exc.ctx.command_path if exc.ctx else 'contextstore'} --help)"
        return _fail(f"error: {exc.format_message()}{hint}", EXIT_USAGE)
    except click.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except WindowNotFoundError as exc:
        return _fail(str(exc).strip('"'), EXIT_ERROR)
    except ContextStoreError as exc:
        return _fail(str(exc), EXIT_USAGE if isinstance(exc, ValueError) else EXIT_ERROR)
    except (KeyboardInterrupt, click.Abort):
        return _fail("interrupted", 130)
    except BrokenPipeError:  # the reader went away (`contextstore show w | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except Exception as exc:  # a bug of ours: one line, the traceback only with -vv
        logging.getLogger("contextstore").debug("unexpected error", exc_info=True)
        return _fail(f"internal error: {type(exc).__name__}: {exc} (run with -vv for the traceback)", EXIT_ERROR)
    return result if isinstance(result, int) else EXIT_OK
