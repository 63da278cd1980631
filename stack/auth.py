"""Packet authentication for the transport: HMAC-SHA256 or AES-GCM with a cluster key ring.

Every packet the transport emits (data, acks, discovery pings, JOIN requests: everything)
is sealed; every packet it receives is opened before ``wire.decode`` looks at it. Anything
that does not open is dropped and counted by the transport, never raised into the loop.

Sealed packet::

    mode (1) | key id (4) | sender uid (16) | counter (8, big-endian) | body | tag

- ``mode``: 0xA1 HMAC-SHA256 (body = the bundle in clear, tag = 32 bytes over everything
  before it), 0xA2 AES-GCM (body = the encrypted bundle, tag = GCM's 16 bytes; the header is
  the associated data).
- ``key id``: names the ring key that sealed it (the first 4 bytes of HMAC(key, label)), so
  members need not agree on the order of their rings.
- ``counter``: the sender's packet counter, starting at 1, one per packet. Receivers keep,
  per sender uid, the highest counter seen and a sliding bitmap of ``window`` counters below
  it: a counter seen before or older than the window is a replay (dropped_replay). The window
  only moves after the tag verified, so forged packets cannot push it.
- The sender uid in the header must equal the one inside the bundle (the transport checks).

Keys are never used directly: HMAC keys and AES master keys are derived from each cluster key
with HKDF-SHA256 (distinct labels per mode); AES-GCM then derives one key per sender
(HMAC-SHA256(master, sender uid)), so the 96-bit nonce (the counter, zero-padded) never
repeats under one key: a uid is never reused (a restart gets a fresh uid).

Key rotation (a key ring: ``cluster_key=[k_first, k_other, ...]``; receivers accept any ring
key, senders seal with the first):

1. everywhere, add the new key *second*: ``[old, new]`` (members now accept both, still send
   with old);
2. everywhere, make it first: ``[new, old]`` (members send with new; stragglers on step 1
   still accept it);
3. everywhere, drop the old key: ``[new]``.

Each step may be rolled out member by member (a rolling restart, or live with
``Channel.set_cluster_key``, which swaps a running member's ring in place); the group keeps
working throughout because every member accepts both keys during steps 1-2. A packet sealed
with the old key that is still in flight after step 3 is dropped (``dropped_auth``) and its
sender's reliability layer sends it again, sealed with the new key. On Ray,
``Group.rotate_key`` (``raygroups rotate-key``) runs the three steps over every member.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from collections import OrderedDict
from typing import Iterable, Union

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.exceptions import InvalidTag

MODES = {"hmac": 0xA1, "aesgcm": 0xA2}
HEADER = struct.Struct(">B4s16sQ")  # mode, key id, sender uid, counter
HMAC_TAG = 32
GCM_TAG = 16
MAX_COUNTER = (1 << 64) - 1
_KEY_ID_LABEL = b"raygroups key id v1"

KeyRing = Union[bytes, str, Iterable[Union[bytes, str]]]


class AuthError(Exception):
    """Why a packet did not open; ``reason`` is the transport's stats key (without
    ``dropped_``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def as_ring(keys: KeyRing) -> list[bytes]:
    """A key or key ring as a list of bytes (ValueError when empty or not bytes/str)."""
    if isinstance(keys, (bytes, bytearray, str)):
        keys = [keys]
    ring = []
    for k in keys:
        if isinstance(k, str):
            k = k.encode()
        if not isinstance(k, (bytes, bytearray)) or not k:
            raise ValueError("a cluster key is non-empty bytes (or str)")
        ring.append(bytes(k))
    if not ring:
        raise ValueError("the cluster key ring is empty")
    return ring


def key_id(key: bytes) -> bytes:
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).digest()[:4]


def _hkdf(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key)


class Auth:
    """Seals outgoing and opens incoming packets for one member (uid ``local_uid``)."""

    def __init__(self, keys: KeyRing, mode: str = "hmac", local_uid: bytes = b"",
                 window: int = 1024, max_senders: int = 16384):
        if mode not in MODES:
            raise ValueError(f"auth_mode is one of {tuple(MODES)}, not {mode!r}")
        if window < 1:
            raise ValueError("the replay window holds at least one counter")
        self.mode = mode
        self.mode_byte = MODES[mode]
        self.local_uid = local_uid
        self.window = window
        self.mask = (1 << window) - 1
        self.max_senders = max_senders
        self.label = b"raygroups hmac v1" if mode == "hmac" else b"raygroups aesgcm v1"
        self.ciphers: OrderedDict[tuple, AESGCM] = OrderedDict()  # (key id, uid) -> AESGCM
        self.set_keys(keys)
        self.tag_len = HMAC_TAG if mode == "hmac" else GCM_TAG
        self.overhead = HEADER.size + self.tag_len
        self.counter = 0
        self.windows: OrderedDict[bytes, list] = OrderedDict()  # uid -> [highest, bitmap]

    def set_keys(self, keys: KeyRing) -> None:
        """Replace the key ring in place (live rotation): the next packet is sealed with the
        new first key; the counter and the replay windows go on, so a packet seen under the
        old ring is still a replay under the new one."""
        ring = as_ring(keys)
        # key id -> derived key material (HMAC key, or AES master key)
        self.ring: dict[bytes, bytes] = {}
        for k in ring:
            self.ring.setdefault(key_id(k), _hkdf(k, self.label))
        self.send_id = key_id(ring[0])
        for stale in [c for c in self.ciphers if c[0] not in self.ring]:
            del self.ciphers[stale]

    # -- sending ------------------------------------------------------------------------
    def seal(self, bundle: bytes) -> bytes:
        self.counter += 1
        if self.counter > MAX_COUNTER:  # pragma: no cover - 2**64 packets
            raise OverflowError("packet counter exhausted; restart the member")
        header = HEADER.pack(self.mode_byte, self.send_id, self.local_uid, self.counter)
        if self.mode_byte == 0xA1:
            h = hmac.new(self.ring[self.send_id], header, hashlib.sha256)
            h.update(bundle)
            return b"".join((header, bundle, h.digest()))
        aes = self._cipher(self.send_id, self.local_uid)
        return header + aes.encrypt(self.counter.to_bytes(12, "big"), bundle, header)

    def _cipher(self, kid: bytes, uid: bytes, keep: bool = True) -> AESGCM:
        """The sender's AES-GCM key, cached (LRU) when ``keep``: on receipt it is cached
        only once a packet opened with it, so that forged sender uids cannot evict the
        members' keys."""
        key = (kid, uid)
        c = self.ciphers.get(key)
        if c is None:
            sub = hmac.new(self.ring[kid], b"sender " + uid, hashlib.sha256).digest()
            c = AESGCM(sub)
            if keep:
                self._keep(key, c)
        return c

    def _keep(self, key: tuple, c: AESGCM) -> None:
        self.ciphers[key] = c
        if len(self.ciphers) > self.max_senders:
            self.ciphers.popitem(last=False)

    # -- receiving ----------------------------------------------------------------------
    def peek_sender(self, data: bytes) -> bytes:
        """The claimed (not yet verified) sender uid, or b"" when the packet is too short."""
        return data[5:21] if len(data) >= HEADER.size else b""

    def open(self, data: bytes):
        """Return (sender_uid, bundle) or raise AuthError. Replays, unknown keys, bad tags and
        anything unsealed are refused; a packet that opens moves its sender's window."""
        n = len(data)
        if n < self.overhead or data[0] != self.mode_byte:
            raise AuthError("unauthenticated")
        _, kid, uid, ctr = HEADER.unpack_from(data)
        material = self.ring.get(kid)
        if material is None:
            raise AuthError("auth")  # a key we do not hold: wrong key or an old ring
        if ctr == 0 or not self._fresh(uid, ctr):
            raise AuthError("replay")
        hs = HEADER.size
        view = memoryview(data)
        if self.mode_byte == 0xA1:
            end = n - HMAC_TAG
            h = hmac.new(material, view[:end], hashlib.sha256)
            if not hmac.compare_digest(h.digest(), view[end:]):
                raise AuthError("auth")
            bundle = view[hs:end]
        else:
            c = self._cipher(kid, uid, keep=False)
            try:
                bundle = c.decrypt(ctr.to_bytes(12, "big"), view[hs:], view[:hs])
            except InvalidTag:
                raise AuthError("auth") from None
            if (kid, uid) not in self.ciphers:
                self._keep((kid, uid), c)
        self._mark(uid, ctr)
        return uid, bundle

    def _fresh(self, uid: bytes, ctr: int) -> bool:
        w = self.windows.get(uid)
        if w is None:
            return True
        hi = w[0]
        if ctr > hi:
            return True
        d = hi - ctr
        return d < self.window and not (w[1] >> d) & 1

    def _mark(self, uid: bytes, ctr: int) -> None:
        windows = self.windows
        w = windows.get(uid)
        if w is None:
            windows[uid] = [ctr, 1]
            if len(windows) > self.max_senders:
                windows.popitem(last=False)
            return
        windows.move_to_end(uid)
        hi = w[0]
        if ctr > hi:
            shift = ctr - hi
            w[0] = ctr
            w[1] = ((w[1] << shift) | 1) & self.mask if shift < self.window else 1
        else:
            w[1] |= 1 << (hi - ctr)
