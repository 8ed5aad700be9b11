"""Plans for what the provider reported (§20): ``record_usage`` (usage.lua, one call), and the
totals and calibration ``stats()`` reads from the window's :meta."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import logs
from ..core import validate, wire
from ..core.layout import Meta
from ..errors import InvalidOptionsError, raise_for_reply
from ..usage import UsageTotals
from .base import Plan, ScriptCall, WindowState, new_request

#: the most a report may count in one field (what a provider could report for one request, and more)
MOST_TOKENS = 2**53


def record_usage(
    state: WindowState,
    version: object,
    counts: Sequence[object],
    model: object = None,
    request_id: object = None,
) -> Plan[float]:
    """Store what the provider reported for the build of ``version`` (``counts``: input, output,
    cache-read and cache-write tokens, each counted apart), exactly once per request id; the
    window's calibration after it. ``InvalidOptionsError``, with nothing recorded, for a bad
    count or model, or a version this window did not report."""
    checked = validate.version("version", version)
    if not checked:
        raise InvalidOptionsError(f"version must be the version a build of this window reported, not {version!r}")
    checked_counts = [str(validate.int_in(name, n, 0, MOST_TOKENS)) for name, n in zip(_FIELDS, counts, strict=True)]
    if model is not None and not validate.is_model_name(model):
        raise InvalidOptionsError(f"model must be a model's name (1-200 characters, no spaces), not {model!r}")
    args = [checked, *checked_counts, model or ""]
    reply = raise_for_reply((yield ScriptCall("usage", state.keys, args, new_request("usage", request_id))))
    calibration = float(wire.text(reply[0]))
    logs.usage_recorded(state.window_id, checked, calibration)
    return calibration


#: the reported counts, in usage.lua's ARGV order (UsageTotals' fields, less ``records``)
_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def totals_of(meta: Mapping[str, str]) -> UsageTotals:
    """A window's usage totals from its (checked) :meta hash."""
    counts = {name: int(meta.get(field) or 0) for name, field in zip(_FIELDS, Meta.USAGE, strict=True)}
    return UsageTotals(**counts, records=int(meta.get(Meta.USAGE_RECORDS) or 0))
