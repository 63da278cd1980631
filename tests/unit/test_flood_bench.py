"""bench/flood.py's packets, each kind, against a member's authenticator: every one is
refused with the reason the member counts it under (garbage as unauthenticated, another
key's and the forged key id's as auth), none opens, and the forgeries do carry the group's
key id, so they cost the member a decryption."""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import flood  # noqa: E402

from raygroups.stack.auth import Auth, AuthError, key_id  # noqa: E402


@pytest.mark.parametrize("kind,reasons", [("garbage", {"unauthenticated", "auth"}),
                                          ("wrong_key", {"auth"}),
                                          ("forged_key_id", {"auth"})])
def test_every_flood_packet_is_refused_and_counted(kind, reasons):
    seed = 20261124
    print(f"seed {seed}")
    key = random.Random(seed).randbytes(32)
    member = Auth(key, "aesgcm", b"M" * 16)
    packets = flood.flood_packets(kind, random.Random(seed), key, 300)
    seen = set()
    for p in packets:
        with pytest.raises(AuthError) as e:
            member.open(p)
        seen.add(e.value.reason)
    assert seen <= reasons and seen
    if kind == "forged_key_id":
        assert all(p[1:5] == key_id(key) for p in packets)
    if kind == "wrong_key":
        assert all(p[1:5] != key_id(key) for p in packets)
