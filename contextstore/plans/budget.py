"""A build's token budget, and whether a build uses every item of a window: what the one read of
builds (``plans/build_read.py``) and the builds themselves (``plans/build.py``, ``plans/chat.py``)
work out from the options and the window's meta."""

from __future__ import annotations

from ..core import wire
from ..core.layout import Meta, calibrated, calibration_of
from ..errors import InvalidOptionsError
from ..render.select import all_compete
from ..types import BuildOptions, WindowConfig
from .base import WindowState


def budget_of(options: BuildOptions, found: wire.ReadReply, cfg: WindowConfig, window_id: str) -> int | None:
    """Estimated tokens the prompt may take: the limit (this build's, else the window's) minus
    the reserve, through the window's token calibration (``record_usage``: the prompt stays
    within the limit as the provider counts it); None without a limit. A reserve that leaves no
    room at all is an error naming both options, not an empty prompt."""
    limit = options.max_tokens if options.max_tokens is not None else cfg.max_tokens
    if limit is None:
        return None
    if options.reserve_for_response >= limit:
        whose = (
            "BuildOptions.max_tokens" if options.max_tokens is not None else f"the max_tokens of window {window_id!r}"
        )
        raise InvalidOptionsError(
            f"reserve_for_response={options.reserve_for_response} leaves no room for a prompt: {whose} "
            f"is {limit}; pass BuildOptions(reserve_for_response=N) with N < {limit} "
            f"(tokens kept free for the model's answer), or a larger max_tokens"
        )
    return calibrated(limit - options.reserve_for_response, calibration_of(found.meta))


def budget_in(state: WindowState, options: BuildOptions, meta: dict[str, str]) -> int | None:
    """A build's budget in the window whose meta is ``meta`` (None: none, or options it refuses:
    the build says so itself)."""
    found = wire.ReadReply(meta, 0, [])
    try:
        return budget_of(options, found, found.config(state.config), state.window_id)
    except InvalidOptionsError:
        return None


def uses_every_item(state: WindowState, options: BuildOptions, chooses: bool, found: wire.ReadReply) -> bool:
    """Whether a build with ``options`` uses every item of the window ``found``'s meta describes:
    every item competes (``select.all_compete``) and, for a build that ``chooses`` the items it
    takes by the budget (a chat build: a prompt build reads every item it may offer), their
    stored tokens are within the budget."""
    if not all_compete(options, found.counter(Meta.ITEMS)):
        return False
    if not chooses:
        return True
    try:
        budget = budget_of(options, found, found.config(state.config), state.window_id)
    except InvalidOptionsError:
        return False
    return budget is None or found.counter(Meta.TOKENS) <= budget
