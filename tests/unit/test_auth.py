"""Authenticated transports (HMAC-SHA256 and AES-GCM) in sandwiches: every packet sealed,
opened before decoding; wrong keys, tampering, replays, unsealed packets and a sender uid
mismatch dropped and counted; key rotation with a ring; the replay window."""
import pytest

from raygroups.stack import wire
from raygroups.stack.auth import HEADER, Auth, AuthError, key_id
from raygroups.stack.config import StackConfig
from raygroups.stack.events import AddPhysical
from raygroups.stack.message import Message
from raygroups.stack.transport import Transport, TransportConfig

from .sandwich import Sandwich

CLUSTER = "test"
MODES = ["hmac", "aesgcm"]


def node(name, key, mode="hmac", seed=0, **cfg):
    s = Sandwich(Transport(TransportConfig(cluster_key=key, auth_mode=mode, **cfg)),
                 name=name, seed=seed, cluster=CLUSTER)
    return s


def pair(key_a=b"secret", key_b=b"secret", mode="hmac", mode_b=None):
    a, b = node("A", key_a, mode, 1), node("B", key_b, mode_b or mode, 2)
    for x, y in ((a, b), (b, a)):
        x.ctx.book.add(y.local)
        x.down_event(AddPhysical(y.local, ("10.0.0.9", 1)))
    return a, b


def packets(s):
    out, s.host.emitted = [d for _, d in s.host.emitted], []
    return out


def send(a, b, payload=b"hello", dest=True):
    a.down(Message(b.local if dest else None, payload))
    a.advance(0)
    return packets(a)


def delivered(s):
    return [m.payload for m in s.above.messages]


@pytest.mark.parametrize("mode", MODES)
def test_matching_keys_deliver(mode):
    a, b = pair(mode=mode)
    for p in send(a, b, b"one") + send(a, b, b"two", dest=False):
        b.layer.receive(p, ("10.0.0.1", 1))
    assert delivered(b) == [b"one", b"two"]
    st = b.layer.stats
    assert st["recv_packets"] == 2 and not any(k.startswith("dropped") for k in st)


@pytest.mark.parametrize("mode", MODES)
def test_packets_are_sealed(mode):
    a, b = pair(mode=mode)
    [p] = send(a, b, b"very visible payload")
    with pytest.raises(wire.DecodeError):
        wire.decode(p, CLUSTER)
    assert p[0] == (0xA1 if mode == "hmac" else 0xA2)
    assert p[5:21] == a.local.uid
    assert (b"very visible payload" in p) == (mode == "hmac")  # AES-GCM encrypts
    assert a.layer.auth.overhead == HEADER.size + (32 if mode == "hmac" else 16)


@pytest.mark.parametrize("mode", MODES)
def test_wrong_key_is_dropped_and_counted(mode):
    a, b = pair(b"secret", b"other", mode)
    for p in send(a, b):
        b.layer.receive(p)
    assert delivered(b) == [] and b.layer.stats["dropped_auth"] == 1


def test_mode_mismatch_is_dropped():
    a, b = pair(mode="hmac", mode_b="aesgcm")
    for p in send(a, b):
        b.layer.receive(p)
    assert delivered(b) == [] and b.layer.stats["dropped_unauthenticated"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_tampered_packets_are_dropped(mode):
    a, b = pair(mode=mode)
    [p] = send(a, b, b"payload" * 20)
    for i in (0, 1, 5, 21, 28, 29, 40, len(p) - 20, len(p) - 1):
        bad = bytearray(p)
        bad[i] ^= 0x01
        b.layer.receive(bytes(bad))
    b.layer.receive(p[:-1])
    b.layer.receive(p + b"\0")
    assert delivered(b) == []
    st = b.layer.stats
    assert sum(v for k, v in st.items() if k.startswith("dropped_")) == 11
    b.layer.receive(p)  # the original still opens: tampered copies moved no window
    assert len(delivered(b)) == 1


@pytest.mark.parametrize("mode", MODES)
def test_replays_are_dropped(mode):
    a, b = pair(mode=mode)
    ps = [send(a, b, b"m%d" % i)[0] for i in range(3)]
    for p in ps + ps[::-1]:
        b.layer.receive(p)
    assert delivered(b) == [b"m0", b"m1", b"m2"]
    assert b.layer.stats["dropped_replay"] == 3


def test_unauthenticated_packets_are_dropped():
    a, b = pair()
    plain = Sandwich(Transport(TransportConfig()), name="P", seed=5, cluster=CLUSTER)
    plain.ctx.book.add(b.local)
    plain.down_event(AddPhysical(b.local, ("10.0.0.9", 1)))
    plain.down(Message(b.local, b"let me in"))
    plain.advance(0)
    for _, p in plain.host.emitted:
        b.layer.receive(p)
    b.layer.receive(b"")
    b.layer.receive(b"\xa1")
    assert delivered(b) == [] and b.layer.stats["dropped_unauthenticated"] == 3
    # and an authenticated member does not accept from a plain one the other way round
    for p in send(b, a):
        plain.layer.receive(p)
    assert delivered(plain) == [] and plain.layer.stats["dropped_malformed"] == 1


def test_a_bundle_claiming_another_sender_is_dropped():
    a, b = pair()
    # A (holding the key) seals a bundle whose inner sender uid is someone else's
    other = b"\x07" * 16
    bundler = wire.Bundler(CLUSTER, other, 60_000)
    bundler.add("x", wire.encode_message(None, 0, {}, b"spoof"))
    [(_, bundle)] = list(bundler.drain())
    b.layer.receive(a.layer.auth.seal(bundle))
    assert delivered(b) == [] and b.layer.stats["dropped_auth"] == 1


def test_own_packets_echoed_back_are_dropped_without_crypto():
    a, b = pair()
    for p in send(a, b, dest=False):
        a.layer.receive(p)
    assert delivered(a) == [b"hello"]  # the loopback copy only
    assert a.layer.stats["dropped_own"] == 1


def test_key_rotation_with_a_ring():
    old, new = b"old key", b"new key"
    step0, step1, step2, step3 = [old], [old, new], [new, old], [new]
    nodes = [node(f"N{i}", ring, seed=10 + i) for i, ring in enumerate([step0, step1, step2, step3])]

    def works(x, y):
        y.ctx.book.add(x.local)
        x.down_event(AddPhysical(y.local, ("10.0.0.9", 1)))
        n = len(delivered(y))
        for p in send(x, y, b"ping"):
            y.layer.receive(p)
        return len(delivered(y)) == n + 1
    n0, n1, n2, n3 = nodes
    # neighbouring steps talk both ways; a member on the first step and one on the last don't
    for x, y in ((n0, n1), (n1, n2), (n2, n3)):
        assert works(x, y) and works(y, x)
    assert works(n0, n2)       # n2 still accepts old
    assert not works(n2, n0)   # n2 sends with new, which n0 does not know yet
    assert not works(n0, n3) and not works(n3, n0)
    assert n0.layer.auth.send_id == key_id(old) and n2.layer.auth.send_id == key_id(new)


@pytest.mark.parametrize("mode", MODES)
def test_a_live_ring_swap_keeps_counters_and_replay_windows(mode):
    """``Auth.set_keys`` (Channel.set_cluster_key): the three rotation steps on running
    members, no restart; a packet captured before a swap is still a replay after it, and one
    sealed with a dropped key no longer opens."""
    old, new = b"old key", b"new key"
    a, b = pair(old, old, mode)
    before = send(a, b, b"under old")
    for p in before:
        b.layer.receive(p)
    sent = {}
    for step in ([old, new], [new, old], [new]):
        b.layer.auth.set_keys(step)
        sent[len(sent)] = ok = send(a, b, b"x")  # a lags one step behind b: still works
        for p in ok:
            b.layer.receive(p)
        a.layer.auth.set_keys(step)
    assert delivered(b) == [b"under old", b"x", b"x", b"x"]
    assert a.layer.auth.send_id == key_id(new) and list(a.layer.auth.ring) == [key_id(new)]
    for p in sent[2]:  # sealed with the new key before the last swap: still a replay after it
        b.layer.receive(p)
    assert b.layer.stats["dropped_replay"] == len(sent[2])
    for p in before:  # sealed with the dropped key: no longer opens at all
        b.layer.receive(p)
    assert b.layer.stats["dropped_auth"] == len(before)
    assert delivered(b) == [b"under old", b"x", b"x", b"x"]
    stale = node("S", old, mode, 3)
    b.ctx.book.add(stale.local)
    stale.down_event(AddPhysical(b.local, ("10.0.0.9", 1)))
    for p in send(stale, b, b"stale"):
        b.layer.receive(p)
    assert b.layer.stats["dropped_auth"] > len(before) and b"stale" not in delivered(b)
    assert a.layer.auth.counter == 4  # the counter went on through the swaps


def test_forged_senders_under_the_groups_key_id_do_not_evict_members_keys():
    """A flood sealed with a wrong key under the group's (public) key id and random sender
    uids: each packet fails its tag, and no forged uid takes a place in the cipher cache, so
    the members' derived keys stay cached (bench/flood.py's hardest kind)."""
    key, member_uid = b"group key", b"M" * 16
    alice, bob = Auth(key, "aesgcm", member_uid, max_senders=4), Auth(key, "aesgcm", b"B" * 16)
    bob.open(alice.seal(b"hello"))
    cached = set(bob.ciphers)
    forger = Auth(b"not the key", "aesgcm", b"F" * 16)
    for i in range(100):
        forger.local_uid = i.to_bytes(16, "big")
        p = bytearray(forger.seal(b"x" * 40))
        p[1:5] = key_id(key)  # claims the group's key id
        with pytest.raises(AuthError) as e:
            bob.open(bytes(p))
        assert e.value.reason == "auth"
    assert set(bob.ciphers) == cached
    assert bob.open(alice.seal(b"still"))[1] == b"still"


def test_the_replay_window_accepts_reordering_within_it():
    auth_a, auth_b = Auth(b"k", local_uid=b"A" * 16), Auth(b"k", local_uid=b"B" * 16, window=64)
    ps = [None] + [auth_a.seal(b"x%d" % i) for i in range(1, 200)]  # counters 1..199

    def opens(i):
        try:
            auth_b.open(ps[i])
            return True
        except AuthError as e:
            return e.reason
    assert opens(100) is True
    assert opens(36) == "replay"         # 64 behind the newest: outside the window
    assert opens(37) is True             # 63 behind: inside, not seen
    assert opens(99) is True and opens(101) is True
    assert opens(150) is True            # the window moves on
    assert opens(87) is True and opens(86) == "replay"
    for i in (37, 99, 100, 101, 150, 87):
        assert opens(i) == "replay"      # each counter opens once


def test_sealed_bundles_fit_the_configured_size():
    for mode in MODES:
        a, b = pair(mode=mode)
        room = a.layer.bundler.max_size
        assert room == 60_000 - a.layer.auth.overhead
        for i in range(200):
            a.down(Message(b.local, b"z" * 1000))
        a.advance(0)
        assert max(len(d) for _, d in a.host.emitted) <= 60_000


def test_config_shortcuts_and_validation():
    cfg = StackConfig.local(cluster_key=b"k", auth_mode="aesgcm")
    assert cfg.transport.cluster_key == b"k" and cfg.transport.auth_mode == "aesgcm"
    assert "hush" not in repr(StackConfig.local(cluster_key=b"hush"))  # keys stay out of logs
    assert StackConfig.local().transport.cluster_key is None
    with pytest.raises(ValueError):
        Auth(b"k", "rot13")
    with pytest.raises(ValueError):
        Auth([], "hmac")
    with pytest.raises(ValueError):
        Auth([b""], "hmac")
    a = Auth("text key", "hmac", b"A" * 16)  # str keys are encoded
    assert Auth(b"text key", "hmac", b"B" * 16).open(a.seal(b"x"))[0] == b"A" * 16
