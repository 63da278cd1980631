"""``MessageBatch``: many delivered messages in one Ray return value, in columns.

``MemberActor.receive_many`` takes up to ``max_messages`` messages off the member's inbox and
answers with one ``MessageBatch``: the payloads as one list, and the senders and views as
runs (``(count, sender index, view index)``: consecutive messages from one sender in one
view share a run), so a batch costs Ray's serialization about what its payloads cost, not
one dict per message. ``first`` numbers the batch's first message in the member's delivery
order (the member counts every message it takes off its inbox), so a reader sees at once
that two batches follow each other; ``dropped`` is how many messages the member's bounded
inbox had dropped (oldest first, nobody reading) when the batch was taken.

Iterating gives one ``Delivered`` per message, in delivery order (FIFO per sender).
``payload_list`` and ``check_batch`` check what the handle's batch calls are given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple, Optional


DEFAULT_BATCH = 10_000
"""Messages a batch read takes at most unless told otherwise."""
MAX_BATCH = 100_000
"""The most messages one batch read may take (one Ray return value must stay bounded)."""


def check_batch(max_messages: int, min_messages: int = 1, timeout: float = 0.0,
                linger_s: float = 0.0) -> None:
    """TypeError/ValueError for batch read arguments out of range."""
    for name, x in (("max_messages", max_messages), ("min_messages", min_messages)):
        if not isinstance(x, int) or isinstance(x, bool):
            raise TypeError(f"{name} must be an int, not {type(x).__name__}")
    if not 1 <= max_messages <= MAX_BATCH:
        raise ValueError(f"max_messages must be in 1..{MAX_BATCH}, not {max_messages}")
    if not 1 <= min_messages <= max_messages:
        raise ValueError(f"min_messages must be in 1..max_messages ({max_messages}), "
                         f"not {min_messages}")
    for name, x in (("timeout", timeout), ("linger_s", linger_s)):
        if not isinstance(x, (int, float)) or isinstance(x, bool) or x < 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, not {x!r}")


def payload_list(payloads: Any) -> Any:
    """``send_many``'s payloads as a list, or the ObjectRef of one as it is (Ray resolves it
    for the member). TypeError for one payload given as if it were many."""
    import ray
    if isinstance(payloads, ray.ObjectRef):
        return payloads
    if isinstance(payloads, (bytes, bytearray, str)):
        raise TypeError("send_many takes a list of payloads (send() takes one)")
    return list(payloads)


class Delivered(NamedTuple):
    """One message of a batch: its sender (name and UUID hex, None for the stack's own),
    payload, and the view it was delivered in ([coordinator UUID hex, counter])."""
    sender: Optional[str]
    sender_uuid: Optional[str]
    payload: Any
    view: Optional[list]


@dataclass
class MessageBatch:
    """Messages delivered at ``member``, in delivery order."""
    member: str
    first: int
    """The member's number of the first message (its count of messages taken before)."""
    payloads: list = field(default_factory=list)
    runs: list = field(default_factory=list)
    """[(count, index into ``senders``, index into ``views``)], covering ``payloads``."""
    senders: list = field(default_factory=list)
    """[(name, UUID hex)] (or (None, None))."""
    views: list = field(default_factory=list)
    """[[coordinator UUID hex, counter]] of the views the messages came in."""
    dropped: int = 0
    """Messages the member's full inbox had dropped so far (the oldest, when nobody read)."""

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def next(self) -> int:
        """The number the member gives the message after this batch."""
        return self.first + len(self.payloads)

    def __iter__(self) -> Iterator[Delivered]:
        i = 0
        payloads = self.payloads
        for count, s, v in self.runs:
            name, uid = self.senders[s]
            view = self.views[v]
            for p in payloads[i:i + count]:
                yield Delivered(name, uid, p, view)
            i += count

    def as_dicts(self) -> list:
        """The messages as ``receive`` gives them: [{"sender", "sender_uuid", "payload",
        "view"}]."""
        return [d._asdict() for d in self]


_START = object()


def take(inbox, max_messages: int, member: str, first: int, dropped: int) -> MessageBatch:
    """Pop up to ``max_messages`` (message, view) pairs off ``inbox`` into a batch."""
    b = MessageBatch(member, first, dropped=dropped)
    payloads, runs = b.payloads, b.runs
    add = payloads.append
    senders: dict = {}
    views: dict = {}
    last_sender = last_view = _START
    count = 0
    s = v = 0
    pop = inbox.popleft
    for _ in range(min(max_messages, len(inbox))):
        m, view = pop()
        sender = m.sender
        if sender != last_sender or (view is not last_view and view != last_view):
            if count:
                runs.append((count, s, v))
            count = 0
            last_sender, last_view = sender, view
            s = senders.get(sender)
            if s is None:
                s = senders[sender] = len(senders)
                b.senders.append((sender.name, sender.uuid_hex) if sender else (None, None))
            key = tuple(view) if view is not None else None
            v = views.get(key)
            if v is None:
                v = views[key] = len(b.views)
                b.views.append(view)
        add(m.payload)
        count += 1
    if count:
        runs.append((count, s, v))
    return b
