"""``Publisher``: a driver's batches to the group, several Ray calls in flight, in order.

```python
pub = g.publisher(in_flight=4)
for batch in batches:
    pub.send_many(batch)          # returns once the batch is on its way (blocks while 4 are)
pub.flush()                       # every batch sent; the first error, if any, is raised
```

Each batch is one ``MemberActor.send_many`` call carrying (publisher id, batch number); the
member multicasts them in that order, each once (actors/send_streams.py), so the group
delivers them FIFO as if each call had waited for the one before. A publisher stays on one
member: when that member is gone, ``send_many``/``flush`` raise GroupClosed, and the batches
in flight then may or may not have been sent (as for a ``send_many`` whose member dies).
It holds at most ``in_flight`` batches' references; their payloads live in Ray's object
store until the member took them.
"""
from __future__ import annotations

import collections
import uuid
from typing import Any

from .batch import payload_list

MAX_IN_FLIGHT = 64
"""The most batches a publisher may keep on their way."""


class Publisher:
    """Batches to the group through ``member`` (``Group.publisher``)."""

    def __init__(self, group: Any, member: str, in_flight: int = 4):
        if not isinstance(in_flight, int) or isinstance(in_flight, bool) or \
                not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"in_flight must be an int in 1..{MAX_IN_FLIGHT}, "
                             f"not {in_flight!r}")
        self.group, self.member, self.in_flight = group, member, in_flight
        self.id = uuid.uuid4().hex
        self.batches = 0
        """Batches handed to the publisher so far."""
        self.sent = 0
        """Messages the member confirmed sent."""
        self._pending: collections.deque = collections.deque()

    def __repr__(self) -> str:
        return (f"Publisher({self.group.cluster!r}, member={self.member!r}, "
                f"batches={self.batches}, in flight={len(self._pending)})")

    def _submit(self, payloads: Any) -> None:
        handle = self.group._handle(self.member)
        self._pending.append(handle.send_many.remote(payload_list(payloads), None,
                                                     (self.id, self.batches)))
        self.batches += 1

    def send_many(self, payloads: Any) -> None:
        """Queue a batch (a list, or an ObjectRef of one); blocks while ``in_flight``
        batches are on their way, raising the error of one that failed."""
        while len(self._pending) >= self.in_flight:
            self.sent += self.group._get(self.member, self._pending.popleft())
        self._submit(payloads)

    async def send_many_async(self, payloads: Any) -> None:
        while len(self._pending) >= self.in_flight:
            self.sent += await self.group._aget(self.member, self._pending.popleft())
        self._submit(payloads)

    def flush(self) -> int:
        """Wait for every batch on its way; the messages sent so far."""
        while self._pending:
            self.sent += self.group._get(self.member, self._pending.popleft())
        return self.sent

    async def flush_async(self) -> int:
        while self._pending:
            self.sent += await self.group._aget(self.member, self._pending.popleft())
        return self.sent
