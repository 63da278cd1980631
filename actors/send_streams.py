"""Ordered batches from one publisher, several Ray calls in flight (``Group.publisher``).

A driver that waits for each ``send_many`` before the next leaves the member idle for a Ray
round trip per batch. A ``Publisher`` keeps up to ``in_flight`` batches on their way; each
carries (publisher id, number). Ray may start an async actor's calls in another order than
they were made (a call whose large argument is still being fetched waits, the next one does
not), so the member puts them back in order here: batch k is multicast once batch k-1 was
(FIFO per publisher, as for one ``send_many`` after another), a batch that was already sent
is not sent again (a repeated call gives 0), and a batch whose predecessor does not come
within ``wait_s`` fails with ``StreamBroken``.

Member side: ``SendStreams``, one per member actor, bounded: it keeps the state of the
``max_streams`` publishers used last.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass
from typing import AsyncIterator, Optional

from raygroups.stack import RaygroupsError


class StreamBroken(RaygroupsError):
    """A publisher's batch cannot be sent in order: its predecessor never came (within
    ``SendStreamsConfig.wait_s``), or the member no longer knows the publisher (it
    restarted, or served ``max_streams`` other publishers since). Start a new publisher."""


@dataclass
class SendStreamsConfig:
    wait_s: float = 60.0
    """How long a batch waits for its predecessor before it fails (StreamBroken)."""
    max_streams: int = 1024
    """Publishers whose position a member keeps (the least recently used go first)."""


class SendStreams:
    """Where each publisher of one member actor stands: [batches taken, batches done]."""

    def __init__(self, config: Optional[SendStreamsConfig] = None):
        self.config = config or SendStreamsConfig()
        self.state: collections.OrderedDict = collections.OrderedDict()
        self.changed = asyncio.Condition()

    def _taken(self, publisher: str, number: int) -> bool:
        return self.state.get(publisher, (0, 0))[0] > number

    @contextlib.asynccontextmanager
    async def turn(self, publisher: str, number: int) -> AsyncIterator[bool]:
        """Until batch ``number`` of ``publisher`` is next: yields True (send it now;
        its successor's turn comes when the block ends, whatever happened in it), or False
        for a batch that another call took already (a repeat)."""
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ValueError(f"a batch number is an int >= 0, not {number!r}")
        if self._taken(publisher, number):
            yield False
            return
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(
                    lambda: self.state.get(publisher, (0, 0))[1] >= number),
                    self.config.wait_s)
            except asyncio.TimeoutError:
                raise StreamBroken(f"publisher {publisher}: batch {number - 1} did not come "
                                   f"within {self.config.wait_s} s") from None
        if self._taken(publisher, number):  # a repeat that waited with it
            yield False
            return
        self._put(publisher, number + 1, number)
        try:
            yield True
        finally:
            async with self.changed:
                self._put(publisher, number + 1, number + 1)
                self.changed.notify_all()

    def _put(self, publisher: str, taken: int, done: int) -> None:
        self.state[publisher] = (taken, done)
        self.state.move_to_end(publisher)
        while len(self.state) > self.config.max_streams:
            self.state.popitem(last=False)
