"""The durable queues' even-split tie: which half of an epoch's members counts as "most" of
them, fixed once and for all by a create-only object in the discovery store (with the
stack's ``primary.tie_breaker="store"``; Corosync qdevice's idea, applied to the queue's
disks).

A durable queue counts disks (durable.py): an epoch forms from the state of most members of
the epoch before it, is established once most members of each epoch it came from have it on
disk, and its ballot needs most of each of those lists to promise its number. "Most" of a
list ``L`` was "more than half". With a tie, it is "more than half, or exactly the half
``H_L``", where ``H_L`` is the half whose create of ``L``'s tie object succeeded first (its
name derived from ``L``'s uids, its content the half's). The object is never replaced,
deleted or given an expiry, so for every list there is at most one such half, ever, across
every restart of every member, and every two of "more than half" or ``H_L`` intersect:
that is all the durable arguments use of "most" (a completed call, which still needs
more than half, is on a disk of every quorum that forms after it; two quorums of one list
share a member that promised, or journaled, what the other counts). A member that does not
know a list's tie counts only "more than half" of it: less, never more.

So the store must outlive the group, as the journals do: a directory or an S3 bucket, not
Ray's KV (lost with the cluster; with it the durable half waits, as without a tie).

``quorum``/``most_of_each`` count, ``halves`` finds the lists a view holds exactly half of,
and ``ask`` takes or reads a list's tie through a ``StoreClient`` (the drivers call it; the
replica stays sans-IO).
"""
from __future__ import annotations

import hashlib
import json
from typing import Callable, Iterable, Optional

from ..discovery.store import StoreConflict

SUFFIX = ".tie"
MAX_KNOWN = 64
"""Ties a replica remembers (the newest): a view needs those of its epoch's lists only."""


def name(members: Iterable[bytes]) -> str:
    """The store object of the list ``members`` (uids): the same at every member."""
    return "queue-" + hashlib.sha256(b"".join(sorted(members))).hexdigest()[:32] + SUFFIX


def quorum(members: list, present, ties: dict) -> bool:
    """Whether ``present`` holds more than half of ``members``, or exactly the half that
    ``ties`` ({name: frozenset of uids}) says holds its tie."""
    held = frozenset(m for m in members if m in present)
    if 2 * len(held) > len(members):
        return True
    return 2 * len(held) == len(members) and bool(held) and ties.get(name(members)) == held


def most_of_each(lists: list, present, ties: dict) -> bool:
    return all(quorum(x, present, ties) for x in lists)


def halves(lists: list, present) -> dict:
    """{name: the half present} of every list of which ``present`` holds exactly half."""
    out = {}
    for x in lists:
        held = frozenset(m for m in x if m in present)
        if x and 2 * len(held) == len(x):
            out[name(x)] = held
    return out


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
