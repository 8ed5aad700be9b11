"""How far back a build's facts read goes when its budget decides, not ``max_history_items``
(``plans/facts_read.py``): once the conversation read so far fills the budget, the older messages
that may still fit what is left are found in ``:sizes`` and read, and nothing else older.

A build offers the conversation newest first, and one unit that does not fit is skipped while
older ones still compete (``render/select.choose``). A conversation unit not read yet holds
messages only (the walk reads every other item, and the groups of what it reads), and costs at
least its newest message's stored tokens plus the build's overhead per message. So where the
unread conversation would be offered with ``room`` tokens left, only messages of a size class
(``layout.size_class``) whose floor plus that overhead is at most ``room`` may be taken; the room
there depends only on what is offered before it, all read (and, in a build with a query, on
the relevance scores of its retrieved documents and working memory: the walk reads those whole
and scores them first, ``Budgeted.scores``). ``:sizes`` lists each such class's
messages by seq (one ``ZRANGEBYSCORE`` each), and every other unread message is excluded as a
whole read would exclude it. Where ``max_history_items`` may bind (the window holds more messages
than it lets in), only messages it surely lets in are listed: those whose seq is above a floor
under which it lets none in, found by counting (``ZCOUNT``) the messages above it, which needs
every conversation unit to hold one message (``Meta.MESSAGE_GROUPS`` unset). Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.layout import MAX_SEQ, MAX_TOKENS, SIZE_WEIGHT, SIZED_TYPES, Meta, class_floor, size_class
from ..render.select import units_of
from ..types import ContextItem

if TYPE_CHECKING:
    from .relevance import BuildScores

#: ``room(stubs, frontier, meta, relevance)``: the most tokens a conversation unit whose newest
#: member is older than ``frontier`` could find free when the build offers it, given the ``stubs``
#: read (every unit whose newest member's seq is at least ``frontier`` among them), the window's
#: ``meta`` and the relevance scores of the scored items among the stubs (a build with a query;
#: else None); None when they do not decide it (no budget, no scores for a build with a query,
#: the newest user message not read, or the budget has not left a read unit out yet: reading on
#: is cheaper than listing by size)
Room = Callable[[list[ContextItem], int, dict[str, str], "Mapping[str, float] | None"], "int | None"]
#: the size classes a message may have
CLASSES = range(size_class(MAX_TOKENS) + 1)


class Budgeted(NamedTuple):
    """What a build that chooses by its budget gives its facts read (``plans/build_read.Recipe``)."""

    room: Room
    #: the least a message costs the build beyond its stored tokens
    overhead: int
    #: the build's ``max_history_items``
    most: int
    #: the build's budget from the window's meta (None: none)
    budget: Callable[[dict[str, str]], int | None]
    #: whether the walk reads each item's body with its attrs (a text build: its costs need the
    #: items' edges, and it reads every body it may offer anyway)
    bodies: bool = False
    #: a build with a query: the relevance scores its room needs (of the items ``scores.wanted``
    #: picks, read whole first); None: none
    scores: BuildScores | None = None


def first_page(budgeted: Budgeted, meta: dict[str, str]) -> int | None:
    """How many of the newest ids a walk of a window whose meta is ``meta`` takes first: twice the
    messages of the window's average size that fill the budget, and some (a build reads little
    more than it returns); None without a budget."""
    budget = budgeted.budget(meta)
    items = int(meta.get(Meta.ITEMS) or 0)
    if budget is None or not items:
        return None
    each = int(meta.get(Meta.TOKENS) or 0) // items + budgeted.overhead
    return max(32, 2 * (budget // max(1, each)) + 16)


class Reach(NamedTuple):
    """What a facts read holds of the conversation by the budget: every unit whose newest
    member's seq is at least ``frontier``, and every message older than it and above ``floor``
    whose size class holds messages of up to ``tokens`` stored tokens (what the room left, less
    the build's overhead per message, let in); no unit at or below ``floor`` passes ``most``
    (``max_history_items``; 0: none lies there), or (when no size class fits what is left: the
    floor right under the frontier) could fit the budget."""

    frontier: int
    tokens: int
    floor: int
    most: int


class Jump:
    """A reach under way: the region of ``:sizes`` still to list, and whether the floor is final.
    Each region takes two round trips: how many messages it would list (``ZCOUNT``s: the jump
    gives way to the walk's next page when that reads fewer), then the listing."""

    def __init__(self, frontier: int, room: int, overhead: int, meta: dict[str, str], most: int, page: int) -> None:
        self.frontier, self.tokens, self.most, self.page = frontier, room - overhead, most, page
        #: the size classes a message may have and still fit ``room``
        self.classes = [c for c in CLASSES if class_floor(c) <= self.tokens]
        binds = messages_of(meta) > most
        #: the seq the next listing starts above, and the one it goes up to (the frontier, then
        #: the floor before); the floor after it, once the count says where
        self.floor = max(0, int(meta.get(Meta.SEQ) or 0) - most) if binds else 0
        self.top = frontier - 1
        self.final = self.floor == 0
        self.lower = self.floor
        if not self.classes:  # no older message fits: nothing to count or list (``done`` at once),
            self.floor = self.lower = self.top = frontier - 1  # and no older unit read is offered
            self.final = True
        self.checked = False  # whether :sizes was found to hold every message (ZCARD)
        self.counted = False  # whether the region's messages were counted
        #: :sizes holds fewer entries than the window has messages: the walk reads on in pages
        self.short = False

    def commands(self, key: str) -> list[tuple[Any, ...]]:
        """This round trip's reads of ``:sizes`` (``key``): its size on the first; then the
        count of the region's messages of each class that may fit (and, while the floor is not
        final, of every message above it), or their listing."""
        out: list[tuple[Any, ...]] = [] if self.checked else [("ZCARD", key)]
        lo, hi = self.floor + 1, self.top
        if self.counted:
            return out + [("ZRANGEBYSCORE", key, c * SIZE_WEIGHT + lo, c * SIZE_WEIGHT + hi) for c in self.classes]
        out += [("ZCOUNT", key, c * SIZE_WEIGHT + lo, c * SIZE_WEIGHT + hi) for c in self.classes]
        if not self.final:
            out += [("ZCOUNT", key, c * SIZE_WEIGHT + lo, c * SIZE_WEIGHT + MAX_SEQ) for c in CLASSES]
        return out

    def took(self, replies: list[Any], stubs: list[ContextItem], meta: dict[str, str]) -> list[Any] | None:
        """The ids this round trip listed, to read next ([] after a count); None when the walk
        reads on in pages instead: ``:sizes`` does not hold every message (``short``: a window
        written before it was kept), or the region holds more that may fit than a page reads."""
        if not self.checked:
            self.short = replies[0] != messages_of(meta)
            if self.short:
                return None
            self.checked, replies = True, replies[1:]
        if not self.counted:
            if sum(replies[: len(self.classes)]) > self.page:
                return None
            self.counted = True
            if not self.final:
                self._place_floor(sum(replies[len(self.classes) :]), stubs)
            return []
        listed = [i for got in replies for i in got]
        self.top, self.floor, self.counted = self.floor, self.lower, False
        return listed

    def _place_floor(self, above: int, stubs: list[ContextItem]) -> None:
        """Where the floor goes after this region (``lower``), from ``above``, the messages above
        it: each unit then counts one message, so the units above it are those messages unread
        and the unpinned units read (every pinned item is read, and ``max_history_items`` counts
        no pinned unit). With ``most`` of them or more, no unit below passes
        ``max_history_items``: the floor is final. Else each unit above ``floor - (most - n)``
        has fewer than ``most`` newer, and passes."""
        above -= sum(1 for s in stubs if _message(s) and s.seq > self.floor)
        above += sum(1 for u in units_of(stubs) if u.messages and not u.pinned and u.newest > self.floor)
        if above >= self.most:
            self.final = True
        else:
            self.lower = max(0, self.floor - (self.most - above))
            self.final = self.lower == 0

    def done(self) -> bool:
        """Whether every region was listed."""
        return self.final and self.top <= self.floor

    def reach(self) -> Reach:
        """What the finished jump read (``done``)."""
        return Reach(self.frontier, self.tokens, self.floor, self.most)


def start(
    budgeted: Budgeted, stubs: list[ContextItem], frontier: int, meta: dict[str, str], page: int,
    relevance: Mapping[str, float] | None = None,
) -> Jump | None:  # fmt: skip
    """A jump from the conversation read down to ``frontier``, when the budget decides what is
    older (given the scored stubs' ``relevance``); None when it does not (``Room``), or
    ``max_history_items`` may bind where a group holds two messages (the count needs the
    conversation read in pages)."""
    if frontier <= 1:
        return None
    room = budgeted.room(stubs, frontier, meta, relevance)
    if room is None:
        return None
    if messages_of(meta) > budgeted.most and meta.get(Meta.MESSAGE_GROUPS) == "1":
        return None
    return Jump(frontier, room, budgeted.overhead, meta, budgeted.most, page)


def holds(
    reach: Reach | None, budgeted: Budgeted | None, stubs: list[ContextItem], meta: dict[str, str],
    relevance: Mapping[str, float] | None = None,
) -> bool:  # fmt: skip
    """Whether ``reach`` (what a facts read found by a budget) decides a build that ``budgeted``
    describes, given the facts' ``stubs`` (and the scored ones' ``relevance``): the same
    ``max_history_items``, and no more room where the unread conversation would be offered, less
    its overhead per message (a chat build's facts may serve a text build, whose messages cost less)."""
    if reach is None or budgeted is None or budgeted.most != reach.most:
        return False
    room = budgeted.room(stubs, reach.frontier, meta, relevance)
    return room is not None and room - budgeted.overhead <= reach.tokens


def messages_of(meta: dict[str, str]) -> int:
    """How many user and assistant messages the window of ``meta`` holds."""
    return sum(int(meta.get(Meta.ITEMS_OF + t) or 0) for t in SIZED_TYPES)


def _message(item: ContextItem) -> bool:
    return item.type.value in SIZED_TYPES


def beyond(reach: Reach, stubs: list[ContextItem]) -> list[ContextItem]:
    """``stubs`` without the unpinned conversation units the build does not offer (newest member
    at or below ``reach.floor``: past ``max_history_items``, or past the budget): read for their
    groups or an earlier build, they would count as competing among the few units read. A pinned
    unit is in every build, however old."""
    if not reach.floor:
        return stubs
    gone = {id(i) for u in units_of(stubs) if u.messages and not u.pinned and u.newest <= reach.floor for i in u.items}
    return [s for s in stubs if id(s) not in gone] if gone else stubs
