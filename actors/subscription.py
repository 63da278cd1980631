"""``Subscription``: the messages delivered at one member, as a stream of batches.

```python
for batch in g.subscribe(max_messages=5000):      # or: async for batch in g.subscribe()
    for m in batch:                                # Delivered(sender, sender_uuid, payload, view)
        handle(m.payload)
```

Each step is one ``MemberActor.receive_many`` call (a long poll of ``wait_s``; with
``min_messages``/``linger_s`` it waits a little for a larger batch once one message is
there, so a busy subscription makes fewer calls): batches
come in the member's delivery order (FIFO per sender, each message once), empty polls are
not yielded. One call is in flight at a time, so a subscription holds at most one batch of
``max_messages``, and leaving the loop between batches leaves every later message on the
member's inbox for the next reader. The subscription stays on its member: when that member
is gone, or Ray restarted it (a new process with a new inbox), the iteration ends with
GroupClosed (NotMember when it left the group), never by reading another member's inbox,
which would repeat or skip messages.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

from .batch import MessageBatch
from .errors import GroupClosed


class Subscription:
    """Batches of the messages delivered at ``member`` (``Group.subscribe``)."""

    def __init__(self, group: Any, member: str, max_messages: int, min_messages: int,
                 linger_s: float, wait_s: float):
        self.group, self.member = group, member
        self.max_messages, self.min_messages = max_messages, min_messages
        self.linger_s, self.wait_s = linger_s, wait_s
        self.received = 0
        """Messages this subscription yielded."""
        self.taken_by_others = 0
        """Messages of the member's stream that other readers took meanwhile (the gaps
        between the member's numbers of consecutive batches)."""
        self.dropped = 0
        """Messages the member's full inbox had dropped, as of the last batch."""
        self._next = None
        self.closed = False

    def __repr__(self) -> str:
        return (f"Subscription({self.group.cluster!r}, member={self.member!r}, "
                f"received={self.received})")

    def close(self) -> None:
        """Stop after the batch being handled (no call is left in flight)."""
        self.closed = True

    def _account(self, b: MessageBatch) -> bool:
        if self._next is not None:
            if b.first < self._next:  # numbers start again: a new process, a new inbox
                raise GroupClosed(f"member {self.member} restarted: what it held for this "
                                  f"subscription is gone")
            self.taken_by_others += b.first - self._next
        self._next = b.next
        self.dropped = b.dropped
        self.received += len(b)
        return len(b) > 0

    def __iter__(self) -> Iterator[MessageBatch]:
        while not self.closed:
            b = self.group.receive_many(self.max_messages, self.wait_s, self.member,
                                        self.min_messages, self.linger_s)
            if self._account(b):
                yield b

    async def __aiter__(self) -> AsyncIterator[MessageBatch]:
        while not self.closed:
            b = await self.group.receive_many_async(self.max_messages, self.wait_s,
                                                    self.member, self.min_messages,
                                                    self.linger_s)
            if self._account(b):
                yield b
