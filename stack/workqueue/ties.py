"""The durable queues' even-split tie: which half of an epoch's members counts as "most" of
them, fixed once and for all by a create-only object in the discovery store (with the
stack's ``primary.tie_breaker="store"``; Corosync qdevice's idea, applied to the queue's
disks).

A durable queue counts disks (durable.py): an epoch forms from the state of most members of
the epoch before it, is established once most members of each epoch it came from have it on
disk, and its ballot needs most of each of those lists to promise its number. "Most" of a
list ``L`` was "more than half". With a tie, it is "more than half, or exactly the half
``H_L``", where ``H_L`` is the half whose create of ``L``'s tie object succeeded first (its
name derived from ``L``'s uids and its epoch's number, its content the half's). The
object is never replaced, deleted or given an expiry, so for every epoch's list there is at
most one such half, ever, across every restart of every member, and every two of "more
than half" or ``H_L`` intersect:
that is all the durable arguments use of "most" (a completed call, which still needs
more than half, is on a disk of every quorum that forms after it; two quorums of one list
share a member that promised, or journaled, what the other counts). A member that does not
know a list's tie counts only "more than half" of it: less, never more.

So the store must outlive the group, as the journals do: a directory or an S3 bucket, not
Ray's KV (lost with the cluster; with it the durable half waits, as without a tie).

Which lists: a tie belongs to an epoch, named by its members and its number, so only a list
whose epoch number is known has one: the first of a durable chain's lists (``joint``; the
epoch the chain begins from, its ``base``). A chain that begins at an established epoch
``X`` (the common case: a view splits an epoch that is on its members' disks) has ``X``'s
list first in the formation of the next epoch, in its ballot and in its establishment:
all three count ``X``'s one tie. Every later list of a chain counts only more than half,
as does anything a member cannot name alike: it may wait, never decide more.

``quorum``/``most_of_each`` count, ``half`` finds the half a view holds, and ``ask`` takes or
reads a tie through a ``StoreClient`` (the drivers call ``ask_all``; the replica stays
sans-IO).
"""
from __future__ import annotations

import functools
import hashlib
import json
from typing import Callable, Iterable, Optional

from ..discovery.store import StoreConflict

SUFFIX = ".tie"
MAX_KNOWN = 64
"""Ties a replica remembers (the newest), and store failures it remembers: a view needs one
at most."""


def remember(known: dict, tie: str, value) -> None:
    """``known[tie] = value`` as the newest entry, the oldest dropped beyond ``MAX_KNOWN``."""
    known.pop(tie, None)
    known[tie] = value
    while len(known) > MAX_KNOWN:
        del known[next(iter(known))]


def name(members: Iterable[bytes], epoch: int) -> str:
    """The store object of the tie of epoch ``epoch`` whose members are ``members`` (uids):
    the same at every member. Per epoch: the same members back in a later epoch (a split,
    its heal, another split) get a tie of their own."""
    return _name(tuple(members), epoch)


@functools.lru_cache(maxsize=MAX_KNOWN)
def _name(members: tuple, epoch: int) -> str:
    """``name``, remembered: a replica names its epoch's tie at every APPLIED until the
    epoch is established."""
    digest = hashlib.sha256(b"".join(sorted(members)) + b"#%d" % epoch).hexdigest()
    return f"queue-{digest[:32]}{SUFFIX}"


def half(members: list, present) -> Optional[frozenset]:
    """The members of ``members`` in ``present`` when they are exactly half of it."""
    held = frozenset(m for m in members if m in present)
    return held if held and 2 * len(held) == len(members) else None


def quorum(members: list, present, holder: Optional[frozenset] = None) -> bool:
    """Whether ``present`` holds more than half of ``members``, or exactly the half
    ``holder`` that holds its tie."""
    held = sum(1 for m in members if m in present)
    return 2 * held > len(members) or (holder is not None and half(members, present) == holder)


def most_of_each(lists: list, present, holder: Optional[frozenset] = None) -> bool:
    """``quorum`` of every list, ``holder`` the tie of the first: the only one that can have
    one (the epoch a durable chain begins from, whose number the chain's base gives)."""
    return all(quorum(x, present, holder if i == 0 else None) for i, x in enumerate(lists))


def ask(store, cluster: str, tie: str, half: frozenset,
        done: Callable[[str, Optional[frozenset]], None]) -> None:
    """Take the tie ``tie`` for ``half`` unless some half holds it; ``done(tie, holder)``
    with the half that holds it (``half`` itself, or the other), or ``None`` when the store
    failed (ask again later)."""
    data = json.dumps({"half": sorted(m.hex() for m in half)}).encode()

    def created(_result, error) -> None:
        if error is None:
            done(tie, half)
        elif isinstance(error, StoreConflict):
            store.get(cluster, tie, read)
        else:
            done(tie, None)

    def read(result, error) -> None:
        if error is not None or result is None:
            done(tie, None)
            return
        try:
            holder = frozenset(bytes.fromhex(h) for h in json.loads(result[0])["half"])
        except (ValueError, TypeError, KeyError, AttributeError):
            done(tie, None)  # not ours to overwrite: ask again, count it
            return
        done(tie, holder)

    store.put(cluster, tie, data, created, if_absent=True)


def ask_all(replica, store, cluster: str, current: Callable[[], bool],
            kick: Callable[[], None]) -> None:
    """A driver's part: ``ask`` the store for every tie ``replica`` wants (``take_ties``);
    each answer goes to ``replica.on_tie`` while ``current()`` (the driver still runs that
    replica), then ``kick()`` sends what it produced."""
    def done(tie: str, holder: Optional[frozenset]) -> None:
        if current():
            replica.on_tie(tie, holder)
            kick()
    for tie, half in replica.take_ties():
        ask(store, cluster, tie, half, done)
