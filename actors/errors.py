"""Typed errors of the Group handle and the member actors.

``JoinTimeout``, ``JoinRejected`` and ``GroupClosed`` are the stack's own (re-exported here); ``NotMember`` and
``NoSuchGroup`` and ``RotationIncomplete`` are new. Every one derives from ``raygroups.stack.RaygroupsError``, and none
wraps a Ray exception or carries an actor handle.
"""
from __future__ import annotations

from raygroups.stack.errors import GroupClosed, JoinRejected, JoinTimeout, RaygroupsError


class NotMember(RaygroupsError):
    """The member asked is not in the group's view: it has not joined yet, it left (or was
    unsubscribed), it was excluded, or its stack was shut down; or the member named in a
    call does not exist."""


class NoSuchGroup(GroupClosed):
    """No member actor of this group exists (never launched, or shut down)."""


class RotationIncomplete(RaygroupsError):
    """A key rotation stopped part way: a member did not take a step in time. The group
    keeps working (every member accepts every key of the ring it holds); calling
    ``Group.rotate_key`` again finishes the stopped rotation before it starts a new one."""


__all__ = ["GroupClosed", "JoinRejected", "JoinTimeout", "NoSuchGroup", "NotMember",
           "RaygroupsError", "RotationIncomplete"]
