"""The group's key ring, kept in Ray's internal KV (the GCS) so that it outlives any member.

``Group.launch`` writes a new group's ring; ``Group.rotate_key`` writes each step of a
rotation before it applies it to the running members; ``Group.shutdown`` deletes it. A member
reads it when it starts: Ray restarts a crashed member actor with the arguments it was first
given, i.e. the key of its first start, and a member restarted after a rotation would
otherwise seal with a key nobody accepts any more.

The KV is reached only by processes that Ray itself lets in (the same trust as the member
actors' specs, which carry the key too); the value is a msgpack list of keys, never logged.
Key ids (``stack.auth.key_id``, 4 bytes of a hash) name keys in messages: they are not secret.
"""
from __future__ import annotations

from typing import Optional

import msgpack

from raygroups.stack.auth import as_ring, key_id

from .ray_compat import RayKV


def _key(namespace: str, cluster: str) -> bytes:
    return f"raygroups/.keys/{namespace}/{cluster}".encode()


def read_ring(namespace: str, cluster: str) -> Optional[list]:
    """The group's current ring (first key seals), None when none is stored."""
    raw = RayKV().get(_key(namespace, cluster))
    return list(msgpack.unpackb(raw)) if raw else None


def write_ring(namespace: str, cluster: str, ring) -> None:
    RayKV().put(_key(namespace, cluster), msgpack.packb(as_ring(ring)))


def delete_ring(namespace: str, cluster: str) -> None:
    RayKV().delete(_key(namespace, cluster))


def ring_ids(ring) -> str:
    """The ring's key ids in hex, for messages (never the keys)."""
    return ",".join(key_id(k).hex() for k in as_ring(ring))


def member_ring(spec_key, stored: Optional[list], restarted: bool):
    """The ring a member starting with ``spec_key`` must use, given the group's ``stored``
    ring: the stored one when the member's first key is in it (a rotation went on), or when
    Ray restarted the member (it missed a rotation while down); ``spec_key`` when nothing is
    stored. ValueError when a freshly started member holds a key the group does not use."""
    if stored is None:
        return spec_key
    if spec_key is not None and key_id(as_ring(spec_key)[0]) in {key_id(k) for k in stored}:
        return stored
    if restarted:
        return stored
    if spec_key is None:
        raise ValueError("the group runs authenticated (key id "
                         f"{ring_ids(stored[:1])}): an insecure member cannot join it")
    raise ValueError(f"stale cluster key (key id {ring_ids(as_ring(spec_key)[:1])}): the "
                     f"group's current key has id {ring_ids(stored[:1])}; launch without "
                     "cluster_key to take the group's key")
