"""GMS in a sandwich (and over a real NAKACK for the join digest): joining, founding, the
coordinator's pending membership and view bundling, JOIN_RSP, VIEW_ACKs, leaving, exclusion
(singleton views, NOT_MEMBER, stale INFOs), wire versions (refusals, the view's version).

Every view change runs a FLUSH first (tests/unit/test_flush.py covers it in detail): a lone
coordinator's flush completes at once (its own FLUSH_OK/DONE are handled locally, and the
Below answers Catchup by calling back unless ``s.catchup_now`` is False); with peers,
``run_flush`` answers FLUSH_OK and FLUSH_DONE for them."""
import random

import msgpack
import pytest

from raygroups.stack.address import Address, AddressBook
from raygroups.stack.events import (AddPhysical, Catchup, Connect, FindMembers, GetDigest,
                                    GetPhysical, Leave, MemberDead, MembershipStatus, MergeInfo,
                                    PingData, SetDigest, ViewInstalled, WireVersions)
from raygroups.stack.flush import FLUSH_CUT, FLUSH_DONE, FLUSH_OK, START_FLUSH
from raygroups.stack.gms import (JOIN_DENIED, JOIN_REQ, JOIN_RSP, LEAVE_REQ, LEAVE_RSP, NOT_MEMBER,
                                 STALE_INFOS, VIEW, VIEW_ACK, Gms, GmsConfig, State)
from raygroups.stack.gms_merge import MERGE_REQ, MERGE_RSP
from raygroups.stack.message import CONTROL, INTERNAL, Message
from raygroups.stack.nakack import MSG, NakAck, NakAckConfig
from raygroups.stack.view import (Left, MergeView, View, ViewChange, ViewId, view_from_wire,
                                  view_to_wire)

from .sandwich import Sandwich

CFG = dict(join_timeout_s=1.0, found_after_rounds=2, retry_jitter_s=0.1, view_bundling_s=0.01,
           view_ack_timeout_s=1.0, leave_timeout_s=2.0)
OWN_PHYS = ("10.0.0.1", 7800)


def make(nakack=False, **cfg):
    gms = Gms(GmsConfig(**{**CFG, **cfg}))
    layers = (NakAck(NakAckConfig(xmit_interval_s=1000.0, highest_interval_s=1000.0)), gms) \
        if nakack else (gms,)
    s = Sandwich(*layers)
    s.gms = gms
    s.phys = {None: OWN_PHYS}
    s.digest = {}
    s.catchups = []  # Catchup events NAKACK was given (without NAKACK: reached at once)
    s.catchup_now = True

    def catchup(ev):
        s.catchups.append(ev)
        if s.catchup_now:
            ev.callback()
    s.below.answers.update({GetPhysical: lambda ev: s.phys.get(ev.addr),
                            GetDigest: lambda ev: dict(s.digest),
                            Catchup: catchup})
    return s


def rounds(s, *results):
    """Answer the pending FindMembers rounds with these results, one each."""
    for found in results:
        s.below.events_of(FindMembers)[-1].callback(found)


def hdr(m):
    return m.headers.get(5, [None])


def sent(s, typ, dest="any"):
    return [m for m in s.below.sent if hdr(m)[0] == typ and (dest == "any" or m.dest == dest)]


def loopback(s):
    """Feed the coordinator's own multicast VIEWs back up, as the transport would."""
    for m in [m for m in s.below.take() if m.dest is None]:
        s.up(Message(None, m.payload, m.flags, dict(m.headers), s.local))


def wire_digest(digest):
    return [[a.uid, n] for a, n in digest.items()]


def flush_ok(s, who, fid, view=None, digest=None):
    """``who``'s FLUSH_OK: [FLUSH_OK, fid, its view, its digest (own entry: what it sent)]."""
    view = view or s.gms.view
    return Message(s.local, b"", INTERNAL,
                   {5: [FLUSH_OK, fid, view_to_wire(view), wire_digest(digest or {})]}, who)


def flush_done(s, who, fid):
    return Message(s.local, b"", INTERNAL, {5: [FLUSH_DONE, fid]}, who)


def run_flush(s, views=None, digests=None):
    """Answer the coordinator's last START_FLUSH for every peer it went to: FLUSH_OK (each
    peer's view and digest from ``views``/``digests``), then FLUSH_DONE after the cut."""
    starts = sent(s, START_FLUSH)
    assert starts, "no flush started"
    fid = hdr(starts[-1])[1]
    peers = [m.dest for m in starts if hdr(m)[1] == fid]
    views, digests = views or {}, digests or {}
    s.up(*[flush_ok(s, p, fid, views.get(p), digests.get(p)) for p in peers])
    assert sorted(m.dest for m in sent(s, FLUSH_CUT) if hdr(m)[1] == fid) == sorted(peers)
    s.up(*[flush_done(s, p, fid) for p in peers])
    return fid, peers


def view_hdr(view, phys=()):
    """A VIEW header as the coordinator multicasts it (no crashed members to catch up on)."""
    return [VIEW, view_to_wire(view), [list(p) for p in phys], None]


def join_req(s, who, phys=None):
    """``who``'s JOIN_REQ, with the same agreed settings as ``s``."""
    return Message(s.local, b"", CONTROL, {5: [JOIN_REQ, who.name, phys, s.gms.config.agreed]},
                   who)


def join_rsp(view, digest, phys=None):
    """A JOIN_RSP header: the digest and the addresses in view order (None: not known)."""
    phys = phys or {}
    return [JOIN_RSP, view_to_wire(view), [digest.get(a) for a in view.members],
            [list(phys[a]) if a in phys else None for a in view.members]]


def rsp_digest(rsp):
    """{uid: seqno} of a JOIN_RSP message's digest."""
    h = hdr(rsp)
    return {uid: n for (uid, _), n in zip(h[1][2], h[2]) if n is not None}


def leave_req(s, who):
    return Message(s.local, b"", INTERNAL, {5: [LEAVE_REQ]}, who)


def ack(s, who, counter):
    return Message(s.local, b"", INTERNAL, {5: [VIEW_ACK, s.local.uid, counter]}, who)


def views(s):
    return [e.view for e in s.above.events_of(ViewChange)]


def coordinator(nakack=False, **cfg):
    """A founder, then members B and C joined and acknowledged: view 2 is {me, B, C}."""
    s = make(nakack, **cfg)
    s.down_event(Connect())
    rounds(s, [], [])
    s.b, s.c = s.addr("B"), s.addr("C")
    s.phys.update({s.b: ("10.0.0.2", 7800), s.c: ("10.0.0.3", 7800)})
    s.up(join_req(s, s.b, ["10.0.0.2", 7800]), join_req(s, s.c, ["10.0.0.3", 7800]))
    s.advance(0.01)
    loopback(s)
    s.up(ack(s, s.b, 2), ack(s, s.c, 2))
    assert [v.members for v in views(s)] == [(s.local,), (s.local, s.b, s.c)]
    s.below.take()
    return s


def member(**cfg):
    """B, a plain member of view 5 {A, me, C} coordinated by A."""
    s = make(**cfg)
    s.a, s.c = s.addr("A"), s.addr("C")
    s.down_event(Connect())
    rounds(s, [PingData(s.a, ("10.0.0.9", 7800), True, True, s.a)])
    view = View(ViewId(s.a, 5), (s.a, s.local, s.c))
    s.up(Message(s.local, b"", INTERNAL, {5: join_rsp(view, {s.a: 3}, {s.a: ("10.0.0.9", 7800)})},
                 s.a))
    assert s.gms.state is State.MEMBER
    s.below.take()
    return s


# -- joining and founding -------------------------------------------------------------------
def test_connect_discovers_then_joins_the_coordinator():
    s = make()
    s.down_event(Connect())
    assert s.below.events[0] == MembershipStatus(False, False)
    assert [type(e) for e in s.below.events] == [MembershipStatus, FindMembers]
    a, b = s.addr("A"), s.addr("B")
    rounds(s, [PingData(b, ("10.0.0.2", 1), False, True, a),
               PingData(a, ("10.0.0.3", 1), True, True, a)])
    [req] = sent(s, JOIN_REQ)
    assert req.dest == a and req.flags == CONTROL
    # {}: agreed settings; [1, 1]: wire versions (the transport's, (1, 1) without one)
    assert hdr(req) == [JOIN_REQ, s.local.name, list(OWN_PHYS), {}, [1, 1]]
    assert s.gms.state is State.JOINING and views(s) == []


def test_join_request_goes_to_the_lowest_coordinator():
    s = make()
    s.down_event(Connect())
    c1, c2 = sorted([s.addr("X"), s.addr("Y")])
    rounds(s, [PingData(c2, None, True, True, c2), PingData(c1, None, True, True, c1)])
    assert [m.dest for m in sent(s, JOIN_REQ)] == [c1]


def test_join_timeout_discovers_again():
    s = make()
    s.down_event(Connect())
    a = s.addr("A")
    rounds(s, [PingData(a, None, True, True, a)])
    s.advance(0.99)
    assert len(s.below.events_of(FindMembers)) == 1
    s.advance(0.02)
    assert len(s.below.events_of(FindMembers)) == 2
    assert s.gms.stats["join_timeouts"] == 1


def test_a_joiner_with_other_agreed_settings_is_denied_and_the_view_stays():
    s = coordinator(agreed={"primary.relay_above": 32, "app.schema": 1})
    x, y = s.addr("X"), s.addr("Y")
    theirs = {"primary.relay_above": 64, "app.schema": 1, "app.extra": "on"}
    s.up(Message(s.local, b"", CONTROL, {5: [JOIN_REQ, "X", ["10.0.0.7", 7800], theirs]}, x))
    s.advance(0.1)
    [denied] = sent(s, JOIN_DENIED)
    assert denied.dest == x and hdr(denied) == [JOIN_DENIED, [
        ["app.extra", None, "on"], ["primary.relay_above", 32, 64]]]
    assert sent(s, JOIN_RSP) == [] and len(views(s)) == 2 and s.gms.stats["joins_denied"] == 1
    # the same settings join; a request without any counts as none (so it is denied too)
    same = {"primary.relay_above": 32, "app.schema": 1}
    s.up(Message(s.local, b"", CONTROL, {5: [JOIN_REQ, "Y", None, same]}, y),
         Message(s.local, b"", CONTROL, {5: [JOIN_REQ, "Z", None]}, s.addr("Z")))
    s.advance(0.1)
    run_flush(s)
    assert [m.dest for m in sent(s, JOIN_RSP)] == [y]
    assert [m.dest.name for m in sent(s, JOIN_DENIED)] == ["X", "Z"]
    # settings that are not a dict are malformed input: counted, nothing sent
    s.below.take()
    s.up(Message(s.local, b"", CONTROL, {5: [JOIN_REQ, "W", None, [1, 2]]}, s.addr("W")))
    assert s.gms.stats["malformed_header"] == 1 and s.below.sent == []


def test_a_denied_joiner_leaves_with_the_reason_and_stops_discovering():
    s = make(agreed={"primary.relay_above": 64})
    s.down_event(Connect())
    a, other = s.addr("A"), s.addr("O")
    rounds(s, [PingData(a, ("10.0.0.3", 1), True, True, a)])
    [req] = sent(s, JOIN_REQ)
    assert hdr(req)[3] == {"primary.relay_above": 64}
    diffs = [["primary.relay_above", 32, 64]]
    s.up(Message(s.local, b"", INTERNAL, {5: [JOIN_DENIED, diffs]}, other))  # not asked
    assert s.gms.state is State.JOINING and s.above.events_of(Left) == []
    s.up(Message(s.local, b"", INTERNAL, {5: [JOIN_DENIED, diffs]}, a))
    [left] = s.above.events_of(Left)
    assert s.gms.state is State.LEFT and s.gms.stats["join_denied"] == 1
    assert "primary.relay_above is 32 in the group, 64 here" in left.reason, left.reason
    s.advance(5.0)  # no join timeout, no discovery round after the refusal
    assert len(s.below.events_of(FindMembers)) == 1 and len(sent(s, JOIN_REQ)) == 1


@pytest.mark.parametrize("needed", [1, 2, 3])
def test_founding_after_the_configured_empty_rounds(needed):
    s = make(found_after_rounds=needed)
    s.down_event(Connect())
    rounds(s, *[[]] * (needed - 1))
    assert views(s) == [] and len(s.below.events_of(FindMembers)) == needed
    rounds(s, [])
    [v] = views(s)
    assert v.view_id == ViewId(s.local, 1) and v.members == (s.local,)
    assert s.below.events_of(ViewInstalled) == [ViewInstalled(v, None)]
    assert s.gms.state is State.MEMBER and s.gms.is_coord
    assert sent(s, JOIN_REQ) == []


def test_concurrent_joiners_the_lowest_founds():
    s = make()
    s.down_event(Connect())
    higher = Address(b"\xff" * 16, "high")  # only joining peers, all above us
    rounds(s, [PingData(higher, None, False, False)])
    assert [v.members for v in views(s)] == [(s.local,)]
    assert sent(s, JOIN_REQ) == []


def test_concurrent_joiners_the_others_retry_discovery():
    s = make()
    s.down_event(Connect())
    lower = Address(b"\x00" * 16, "low")
    rounds(s, [PingData(lower, None, False, False)])
    assert views(s) == [] and len(s.below.events_of(FindMembers)) == 1
    s.advance(0.1)  # retries after up to retry_jitter_s
    assert len(s.below.events_of(FindMembers)) == 2
    rounds(s, [])  # the other joiner went away: the empty rounds found the group
    assert views(s) == []
    rounds(s, [])
    assert [v.members for v in views(s)] == [(s.local,)]


def test_join_response_installs_view_with_digest_and_acks():
    s = make()
    s.down_event(Connect())
    a, c = s.addr("A"), s.addr("C")
    rounds(s, [PingData(a, ("10.0.0.9", 7800), True, True, a)])
    del s.below.events[:]
    view = View(ViewId(a, 4), (a, c, s.local))
    rsp = join_rsp(view, {a: 7, c: 2}, {a: ("10.0.0.9", 7800), c: ("10.0.0.8", 7801)})
    assert rsp[2] == [7, 2, None] and rsp[3] == [["10.0.0.9", 7800], ["10.0.0.8", 7801], None]
    s.up(Message(s.local, b"", INTERNAL, {5: rsp}, a))
    evs = [e for e in s.below.events if type(e) in (SetDigest, ViewInstalled, AddPhysical)]
    assert evs == [AddPhysical(a, ("10.0.0.9", 7800)), AddPhysical(c, ("10.0.0.8", 7801)),
                   SetDigest({a: 7, c: 2}), ViewInstalled(view, None)]
    assert views(s) == [view] and s.gms.state is State.MEMBER
    [va] = sent(s, VIEW_ACK)
    assert va.dest == a and hdr(va) == [VIEW_ACK, a.uid, 4] and va.flags & INTERNAL
    s.advance(5.0)
    assert s.below.events_of(FindMembers) == []  # the join timer was cancelled


def test_join_response_without_the_joiner_is_malformed():
    s = make()
    s.down_event(Connect())
    a = s.addr("A")
    rounds(s, [PingData(a, None, True, True, a)])
    view = View(ViewId(a, 4), (a,))
    s.up(Message(s.local, b"", INTERNAL, {5: join_rsp(view, {a: 1})}, a))
    assert views(s) == [] and s.gms.stats["malformed_header"] == 1
    # lists that are not in view order (one entry per member) are malformed too
    view = View(ViewId(a, 4), (a, s.local))
    for bad in ([JOIN_RSP, view_to_wire(view), [1], [None, None]],
                [JOIN_RSP, view_to_wire(view), [1, None], [None]],
                [JOIN_RSP, view_to_wire(view), {a.uid: 1}, [None, None]]):
        s.up(Message(s.local, b"", INTERNAL, {5: bad}, a))
    assert views(s) == [] and s.gms.stats["malformed_header"] == 4
    s.up(Message(s.local, b"", INTERNAL, {5: join_rsp(view, {a: 1})}, a))
    assert views(s) == [view]


# -- the coordinator ------------------------------------------------------------------------
def test_coordinator_bundles_joins_and_a_leave_into_one_view():
    s = coordinator()
    d, e = s.addr("D"), s.addr("E")
    s.up(join_req(s, d, ["10.0.0.4", 7800]))
    s.up(leave_req(s, s.b))
    s.up(join_req(s, e, ["10.0.0.5", 7800]))
    assert s.below.sent == []  # bundled for view_bundling_s
    s.advance(0.01)
    # one flush of the current view's members (the leaver too, not the joiners) first
    starts = sent(s, START_FLUSH)
    assert sorted(m.dest for m in starts) == sorted([s.b, s.c])
    assert sent(s, VIEW) == [] and sent(s, JOIN_RSP) == []
    run_flush(s)
    assert s.gms.stats["flushes"] == 2  # this one and the one for view 2
    [v] = [m for m in sent(s, VIEW) if m.dest is None]
    assert v.flags == INTERNAL  # reliable (NAKACK), not CONTROL
    members = [uid for uid, _ in hdr(v)[1][2]]
    assert members == [s.local.uid, s.c.uid, d.uid, e.uid]
    assert hdr(v)[1][:2] == [s.local.uid, 3]
    assert [m.dest for m in sent(s, JOIN_RSP)] == [d, e]
    assert [m.dest for m in sent(s, VIEW) if m.dest is not None] == [s.b]  # the leaver
    assert s.gms.stats["views_sent"] == 2


@pytest.mark.parametrize("per_member, cap, gathered", [(0.01, 1.0, 0.03), (0.01, 0.02, 0.02),
                                                       (0.0, 1.0, 0.01)])
def test_a_burst_is_gathered_longer_the_larger_the_view(per_member, cap, gathered):
    """Right after a change, the next waits max(view_bundling_s, per member x members), at
    most view_bundling_max_s: 0.03 s for 3 members at 0.01 s each, 0.02 s when capped
    there, view_bundling_s (0.01 s) when the per-member share is off."""
    s = coordinator(view_bundling_per_member_s=per_member, view_bundling_max_s=cap)
    s.up(join_req(s, s.addr("D")))  # the view of 3 settled just now: not idle
    s.advance(gathered - 0.004)
    assert sent(s, START_FLUSH) == []
    s.advance(0.005)
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c])


def test_requests_during_a_view_in_flight_build_on_the_pending_membership():
    """Seed 003: two joins and two leaves arriving before the previous view is installed
    are all reflected in the next view; none is lost."""
    s = coordinator()
    d, e, f = s.addr("D"), s.addr("E"), s.addr("F")
    s.up(join_req(s, d))
    s.advance(0.01)
    run_flush(s)
    flight = s.below.take()
    [v3] = [m for m in flight if hdr(m)[0] == VIEW and m.dest is None]
    # view 3 {me, B, C, D} is in flight (not installed, not acked); more requests arrive
    s.up(join_req(s, e), leave_req(s, d), leave_req(s, s.b), join_req(s, f))
    s.advance(0.5)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []  # one view change at a time
    s.up(Message(None, b"", INTERNAL, dict(v3.headers), s.local))  # installs view 3
    s.up(ack(s, s.b, 3), ack(s, s.c, 3))
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []  # D has not acked yet
    s.up(ack(s, d, 3))
    s.advance(0.01)
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c, d])
    run_flush(s)
    [v4] = [m for m in sent(s, VIEW) if m.dest is None]
    assert hdr(v4)[1][1] == 4
    assert [uid for uid, _ in hdr(v4)[1][2]] == [s.local.uid, s.c.uid, e.uid, f.uid]
    assert sorted(m.dest for m in sent(s, VIEW) if m.dest is not None) == sorted([d, s.b])
    assert sorted(m.dest for m in sent(s, JOIN_RSP)) == sorted([e, f])


def test_join_rsp_digest_has_the_view_seqno_for_the_coordinator():
    s = coordinator(nakack=True)
    for i in range(3):
        s.down(Message(None, f"app{i}"))
    loopback(s)  # the coordinator delivers its own multicasts too (its flush waits for them)
    s.up(Message(None, "b1", 0, {2: [MSG, 1, 2]}, s.b), Message(None, "b2", 0, {2: [MSG, 2, 2]}, s.b))
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    run_flush(s, digests={s.b: {s.local: 4, s.b: 2}, s.c: {s.local: 4, s.b: 1}})
    [view] = [m for m in sent(s, VIEW) if m.dest is None]
    [rsp] = sent(s, JOIN_RSP)
    digest = rsp_digest(rsp)
    # each member's UUID travels once in the view's list (the coordinator's also in the view
    # id), its seqno and address by position
    packed = msgpack.packb(hdr(rsp), use_bin_type=True)
    assert all(packed.count(uid) == 1 + (uid == s.local.uid) for uid, _ in hdr(rsp)[1][2])
    assert hdr(rsp)[3] == [list(OWN_PHYS), ["10.0.0.2", 7800], ["10.0.0.3", 7800], None]
    # coordinator: view 2 (seqno 1), three app messages, then this VIEW (in view 2)
    assert view.headers[2] == [MSG, 5, 2]
    assert digest == {s.local.uid: 5, s.b.uid: 2, s.c.uid: 0}  # the cut of the members


def test_joiners_start_at_the_flush_cut_not_at_what_the_coordinator_had():
    """B's FLUSH_OK says B sent 2, the coordinator delivered only 1: the coordinator catches
    up (from B) before it answers FLUSH_DONE itself, and the joiner starts at 2."""
    s = coordinator(nakack=True)
    s.up(Message(None, "b1", 0, {2: [MSG, 1, 2]}, s.b))
    d = s.addr("D")
    s.up(join_req(s, d))
    s.advance(0.01)
    fid = hdr(sent(s, START_FLUSH)[-1])[1]
    s.up(flush_ok(s, s.b, fid, digest={s.local: 1, s.b: 2}),
         flush_ok(s, s.c, fid, digest={s.local: 1, s.b: 1}))
    cuts = sent(s, FLUSH_CUT)
    assert [sorted(map(tuple, hdr(m)[2])) for m in cuts] == [sorted(
        [(s.local.uid, 1, s.local.uid), (s.b.uid, 2, s.b.uid), (s.c.uid, 0, s.c.uid)])] * 2
    s.up(flush_done(s, s.b, fid), flush_done(s, s.c, fid))
    assert sent(s, VIEW) == []  # the coordinator itself has not reached the cut yet
    s.up(Message(None, "b2", 0, {2: [MSG, 2, 2]}, s.b))
    [view] = [m for m in sent(s, VIEW) if m.dest is None]
    [rsp] = sent(s, JOIN_RSP)
    assert rsp_digest(rsp) == {s.local.uid: 2, s.b.uid: 2, s.c.uid: 0}
    assert [m.payload for m in s.above.messages] == ["b1", "b2"]


def test_joiner_over_nakack_starts_exactly_after_the_view():
    """The JOIN_RSP digest positions the joiner's window: the VIEW itself (seqno = digest
    entry) is a duplicate, the coordinator's next multicast is delivered."""
    s = make(nakack=True)
    s.down_event(Connect())
    a = s.addr("A")
    rounds(s, [PingData(a, None, True, True, a)])
    view = View(ViewId(a, 2), (a, s.local))
    s.up(Message(s.local, b"", INTERNAL, {5: join_rsp(view, {a: 4})}, a))
    s.up(Message(None, b"", INTERNAL, {2: [MSG, 4, 1], 5: view_hdr(view)}, a),
         Message(None, b"after", 0, {2: [MSG, 5, 2]}, a))
    assert views(s) == [view]
    assert [m.payload for m in s.above.messages] == [b"after"]
    assert s.layers[0].stats["duplicates"] == 1


def test_duplicate_join_request_gets_the_cached_join_response():
    s = coordinator()
    d = s.addr("D")
    s.up(join_req(s, d), join_req(s, d))  # a retry before the view: still one join
    s.advance(0.01)
    s.up(join_req(s, d))  # a retry during the flush: still one join
    run_flush(s)
    [first] = sent(s, JOIN_RSP)
    s.below.take()
    s.up(join_req(s, d))  # a retry after the view went out (the JOIN_RSP was lost)
    s.advance(0.5)
    [again] = sent(s, JOIN_RSP)
    assert again.dest == d and hdr(again) == hdr(first)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []
    assert s.gms.stats["views_sent"] == 2 and s.gms.stats["flushes"] == 2


def test_join_request_for_a_member_does_not_change_the_view():
    s = coordinator()
    s.up(join_req(s, s.b))
    s.advance(0.5)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []


def test_non_coordinator_ignores_join_requests():
    s = member()
    s.up(join_req(s, s.addr("X")))
    s.advance(0.5)
    assert sent(s, VIEW) == [] and sent(s, JOIN_RSP) == []
    assert s.gms.stats["join_requests_ignored"] == 1


def test_view_acks_are_collected_before_the_next_view():
    s = coordinator(view_ack_timeout_s=10.0)
    d = s.addr("D")
    s.up(join_req(s, d))
    s.advance(0.01)
    run_flush(s)
    loopback(s)
    e = s.addr("E")
    s.up(join_req(s, e))
    s.up(ack(s, s.b, 3), ack(s, s.c, 2))  # C acks an old view: does not count
    s.advance(0.5)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []
    s.up(ack(s, s.c, 3), ack(s, e, 3))  # E is no member of view 3: ignored
    s.advance(0.5)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []
    s.up(ack(s, d, 3))  # the last one
    s.advance(0.01)
    run_flush(s)
    [v4] = [m for m in sent(s, VIEW) if m.dest is None]
    assert hdr(v4)[1][1] == 4
    assert s.gms.stats["view_ack_timeouts"] == 0


def test_view_ack_timeout_lets_the_next_view_go():
    s = coordinator()
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    run_flush(s)
    loopback(s)
    s.up(join_req(s, s.addr("E")))
    s.up(ack(s, s.b, 3))  # C and D never ack
    s.advance(0.9)
    assert sent(s, VIEW) == [] and sent(s, START_FLUSH) == []
    s.advance(0.2)
    assert s.gms.stats["view_ack_timeouts"] == 1
    run_flush(s)
    assert len([m for m in sent(s, VIEW) if m.dest is None]) == 1


# -- members --------------------------------------------------------------------------------
def test_member_installs_newer_views_and_ignores_older_ones():
    s = member()
    a, c = s.a, s.c
    older = View(ViewId(a, 4), (a, s.local))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(older)}, a))
    assert len(views(s)) == 1 and sent(s, VIEW_ACK) == []
    same = View(ViewId(a, 5), (a, s.local))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(same)}, a))
    assert len(views(s)) == 1 and sent(s, VIEW_ACK) == []
    d = s.addr("D")
    newer = View(ViewId(a, 6), (a, s.local, c, d))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(newer, [[d.uid, "10.0.0.4", 9]])}, a))
    assert views(s)[-1] == newer
    assert AddPhysical(d, ("10.0.0.4", 9)) in s.below.events
    assert [hdr(m) for m in sent(s, VIEW_ACK)] == [[VIEW_ACK, a.uid, 6]]
    assert views(s)[-1].members[2].name == "C"


def test_graceful_leave_requests_at_once_and_finishes_on_the_view():
    s = member()
    s.down_event(Leave())
    assert s.gms.state is State.LEAVING
    # no wait for stability: the flush of the view change carries our last multicasts
    [req] = sent(s, LEAVE_REQ)
    assert req.dest == s.a and req.flags & INTERNAL
    v6 = View(ViewId(s.a, 6), (s.a, s.c))
    s.up(Message(s.local, b"", INTERNAL, {5: view_hdr(v6)}, s.a))
    assert [hdr(m) for m in sent(s, VIEW_ACK)] == [[VIEW_ACK, s.a.uid, 6]]
    assert s.above.events_of(Left) == [Left("left")]
    assert s.gms.state is State.LEFT


def test_a_leave_with_a_reason_ends_with_a_left_that_names_it():
    s = member()
    s.down_event(Leave("recovery failed: no state"))
    s.down_event(Leave())  # a second request changes nothing
    v6 = View(ViewId(s.a, 6), (s.a, s.c))
    s.up(Message(s.local, b"", INTERNAL, {5: view_hdr(v6)}, s.a))
    assert s.above.events_of(Left) == [Left("recovery failed: no state")]


def test_leave_gives_up_when_no_view_comes():
    s = member()
    s.down_event(Leave())
    s.advance(1.05)
    assert len(sent(s, LEAVE_REQ)) == 2  # asked again after view_ack_timeout_s
    assert s.above.events_of(Left) == []
    s.advance(1.0)
    assert s.above.events_of(Left) == [Left("timeout")] and s.gms.state is State.LEFT


def test_a_leave_with_a_reason_that_times_out_still_names_it():
    """A failed recovery's leave whose view never comes (seed 16110242: the member left
    saying only "timeout", and the checker found the recovery's reason lost)."""
    s = member()
    s.down_event(Leave("recovery failed: no state"))
    s.advance(2.05)
    [left] = s.above.events_of(Left)
    assert left.reason.startswith("recovery failed: no state (no view without it")


def test_everyone_leaving_at_once_is_told_to_go():
    """The coordinator's last view change removes every member: it sends no view, so each
    other leaver gets LEAVE_RSP and is done at once instead of at its timeout."""
    s = coordinator()
    for m in (s.b, s.c):
        s.up(Message(s.local, b"", INTERNAL, {5: [LEAVE_REQ]}, m))
    s.down_event(Leave())
    s.advance(0.02)
    run_flush(s)
    rsps = sent(s, LEAVE_RSP)
    assert sorted(m.dest for m in rsps) == sorted([s.b, s.c]) and views(s)[-1].members != ()
    counter = hdr(rsps[0])[1]
    # it leaves once both acknowledged (UNICAST retransmits a lost LEAVE_RSP meanwhile)
    s.up(ack(s, s.b, counter))
    assert s.above.events_of(Left) == []
    s.up(ack(s, s.c, counter))
    assert s.above.events_of(Left) == [Left("left")]
    # ... or after view_ack_timeout_s without them
    t = coordinator()
    t.up(Message(t.local, b"", INTERNAL, {5: [LEAVE_REQ]}, t.b))
    t.up(Message(t.local, b"", INTERNAL, {5: [LEAVE_REQ]}, t.c))
    t.down_event(Leave())
    t.advance(0.02)
    run_flush(t)
    t.advance(1.05)
    assert t.above.events_of(Left) == [Left("left")]
    # a leaver acknowledges and is done when its coordinator says so; a member that is not
    # leaving ignores it, and so does a leaver told by another member
    m = member()
    m.up(Message(m.local, b"", INTERNAL, {5: [LEAVE_RSP, 9]}, m.a))
    assert m.above.events_of(Left) == [] and m.gms.state is State.MEMBER
    m.down_event(Leave())
    m.below.take()
    m.up(Message(m.local, b"", INTERNAL, {5: [LEAVE_RSP, 9]}, m.c))
    assert m.above.events_of(Left) == []
    m.up(Message(m.local, b"", INTERNAL, {5: [LEAVE_RSP, 9]}, m.a))
    assert [(x.dest, hdr(x)) for x in sent(m, VIEW_ACK)] == [(m.a, [VIEW_ACK, m.a.uid, 9])]
    assert m.above.events_of(Left) == [Left("left")]


def test_coordinator_leaving_hands_over_and_waits_for_acks():
    s = coordinator()
    s.down_event(Leave())
    s.advance(0.02)
    assert sorted(m.dest for m in sent(s, START_FLUSH)) == sorted([s.b, s.c])
    run_flush(s)
    loopback(s)
    assert views(s)[-1].members == (s.b, s.c)
    assert views(s)[-1].view_id == ViewId(s.local, 3)
    assert s.above.events_of(Left) == []  # waits for the acks first
    s.up(ack(s, s.b, 3), ack(s, s.c, 3))
    assert s.above.events_of(Left) == [Left("left")]


@pytest.mark.parametrize("header", [
    5, [], [99], [VIEW], [VIEW, "x", [], None], [VIEW, [b"short", 6, [[b"x", "n"]]], [], None],
    [VIEW, "VIEW6", [[b"short", "h", 1]], None], [VIEW, "VIEW6", [["uid", "h", "port"]], None],
    [JOIN_REQ, "X", ["h"]], [JOIN_REQ, "X", ["h", "port"]], [JOIN_REQ, "X", {}], {"a": 1},
    [VIEW, "VIEW6", [["UID", "h", float("inf")]], None], [JOIN_REQ, "X", ["h", float("inf")]],
], ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = coordinator()
    v6 = view_to_wire(View(ViewId(s.local, 6), (s.local, s.b)))

    def fill(x):
        if x == "VIEW6":
            return v6
        if type(x) is list:
            return [fill(y) for y in x]
        return s.b.uid if x == "UID" else x
    s.up(Message(s.local, b"", INTERNAL, {5: fill(header)}, s.b), Message(None, b"app", 0, {}, s.b))
    assert s.gms.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == [b"app"]


@pytest.mark.parametrize("counter", ["x", None, float("inf"), float("nan")], ids=repr)
def test_garbage_view_ack_counter_is_malformed(counter):
    s = coordinator()
    s.up(join_req(s, s.addr("D")))
    s.advance(0.01)
    run_flush(s)
    loopback(s)
    s.up(Message(s.local, b"", INTERNAL, {5: [VIEW_ACK, s.local.uid, counter]}, s.b))
    assert s.gms.stats["malformed_header"] == 1
    assert s.b in s.gms.acks


def test_view_member_names_stay_strings():
    """Names from the wire end up in Address.name, whose __repr__ must return a str (the
    ack-timeout log line formats addresses): a non-str name is coerced or rejected."""
    s = member()
    d = b"\x42" * 16  # not known yet: the view names it
    wire_view = [s.a.uid, 6, [[s.a.uid, "A"], [s.local.uid, "me"], [d, 12345]]]
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, wire_view, [], None]}, s.a))
    assert type(s.ctx.book.get(d).name) is str
    for v in views(s):
        assert all(type(m.name) is str for m in v.members)
        assert type(repr(v)) is str


# -- exclusion, NOT_MEMBER, MergeInfo ---------------------------------------------------------
def test_a_member_excluded_while_alive_forms_a_singleton_view():
    s = member()
    v6 = View(ViewId(s.a, 6), (s.a, s.c))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(v6)}, s.a))
    assert [v.view_id for v in views(s)] == [ViewId(s.a, 5), ViewId(s.a, 6),
                                             ViewId(s.local, 7)]
    assert views(s)[-1].members == (s.local,)
    assert s.gms.stats["excluded"] == 1 and s.gms.is_coord
    assert s.gms.state is State.MEMBER and s.above.events_of(Left) == []
    assert s.below.events_of(ViewInstalled)[-1].view == views(s)[-1]


def test_not_member_from_a_newer_view_makes_a_singleton_an_older_one_is_ignored():
    s = member()
    about = [s.a.uid, 5]  # our view, as the sender heard of it
    s.up(Message(s.local, b"", INTERNAL, {5: [NOT_MEMBER, s.a.uid, 5, *about]}, s.a))  # same
    s.up(Message(s.local, b"", INTERNAL, {5: [NOT_MEMBER, s.a.uid, 4, *about]}, s.a))
    # about a view we already left (our INFO waited while the sender was stopped)
    s.up(Message(s.local, b"", INTERNAL, {5: [NOT_MEMBER, s.a.uid, 8, s.a.uid, 4]}, s.a))
    assert len(views(s)) == 1
    s.up(Message(s.local, b"", INTERNAL, {5: [NOT_MEMBER, s.a.uid, 8, *about]}, s.a))
    assert views(s)[-1].members == (s.local,)
    assert views(s)[-1].view_id.id == 6 and s.gms.stats["excluded"] == 1


def test_our_coordinator_announcing_a_newer_view_we_never_got_drops_us_after_stale_infos():
    s = member()
    info = MergeInfo(s.a, s.a, 7, True)
    for _ in range(STALE_INFOS - 1):
        s.gms.up_event(info)
    s.gms.up_event(MergeInfo(s.c, s.a, 7, False))  # from another member: not counted
    s.gms.up_event(MergeInfo(s.a, s.a, 5, True))   # our own view: not counted
    s.gms.up_event(MergeInfo(s.a, s.a, 4, True))   # older: not counted
    assert len(views(s)) == 1
    s.gms.up_event(info)
    assert views(s)[-1].members == (s.local,)
    assert s.gms.stats["excluded"] == 1


def test_the_member_next_in_line_coordinating_another_view_drops_us_after_stale_infos():
    """Our view's founder died; the member next in line announces, as its coordinator, a
    view of its own that is not newer than ours by the order (here older, as a view of the
    same counter may be): it installed another view instead of ours, so nobody coordinates
    ours (seed 16050852: a merge view installed without it)."""
    s = member()
    ours = View(ViewId(s.a, 6), (s.a, s.c, s.local))  # C is next in line after A
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(ours)}, s.a))
    s.gms.up_event(MemberDead(s.a))
    assert s.gms.coordinator == s.c and not s.gms.is_coord
    theirs = MergeInfo(s.c, s.c, 5, True)  # C's own view, not newer than (A, 6)
    for _ in range(STALE_INFOS - 1):
        s.gms.up_event(theirs)
    s.gms.up_event(MergeInfo(s.a, s.a, 5, True))  # the founder's late INFO: not counted
    assert views(s)[-1].view_id == ours.view_id
    s.gms.up_event(theirs)
    assert views(s)[-1].members == (s.local,) and s.gms.stats["excluded"] == 1


def test_a_view_install_resets_the_stale_info_count():
    s = member()
    for _ in range(STALE_INFOS - 1):
        s.gms.up_event(MergeInfo(s.a, s.a, 7, True))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(View(ViewId(s.a, 6), (s.a, s.local)))}, s.a))
    for _ in range(STALE_INFOS - 1):
        s.gms.up_event(MergeInfo(s.a, s.a, 7, True))
    assert views(s)[-1].view_id == ViewId(s.a, 6) and s.gms.stats["excluded"] == 0


def test_merge_info_is_consumed_by_gms():
    s = member()
    s.gms.up_event(MergeInfo(s.a, s.a, 7, True))
    assert s.above.events_of(MergeInfo) == []


def test_the_coordinator_tells_a_stale_former_member_it_was_excluded():
    s = coordinator()
    x = s.addr("X")
    s.gms.up_event(MergeInfo(x, s.local, 1, False))  # X still believes in our view 1
    [nm] = sent(s, NOT_MEMBER)
    assert nm.dest == x and hdr(nm) == [NOT_MEMBER, s.local.uid, 2, s.local.uid, 1]
    s.gms.up_event(MergeInfo(s.addr("Y"), s.addr("Z"), 1, False))  # someone else's view
    assert len(sent(s, NOT_MEMBER)) == 1 and s.gms.merger.sightings == {}


def test_the_coordinator_notes_only_other_coordinators_as_merge_candidates():
    s = coordinator()
    x = s.addr("X")
    s.gms.up_event(MergeInfo(x, x, 9, True))
    s.gms.up_event(MergeInfo(s.b, s.local, 1, False))  # B, of our view, stuck in an older one
    s.gms.up_event(MergeInfo(s.c, x, 9, False))  # C in a newer view: we are the stale one
    s.gms.up_event(MergeInfo(s.local, s.local, 9, True))  # our own INFO
    assert s.gms.merger.sightings == {x: 1}
    assert sent(s, NOT_MEMBER) == []  # B is ours, only late: NAKACK brings it our VIEW


def test_a_member_that_does_not_coordinate_its_view_refuses_a_merge_and_keeps_sending():
    """Only a view's coordinator can stop all of it: a member that answered for its view
    after flushing itself alone moved members into the MergeView that never stopped."""
    s = member()
    x = s.addr("X")
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [x.uid, 1], {}]}, x))
    [rsp] = sent(s, MERGE_RSP, x)
    assert hdr(rsp)[2] is False and not sent(s, START_FLUSH) and not s.gms.flush.blocked


def test_a_coordinator_with_a_suspect_refuses_a_merge_and_excludes_it_first():
    """Its subgroup's view names every member; one that is suspected (not stopped by the
    flush) but alive kept sending in the old view after the cut, and the other subgroups
    delivered those messages in the merge view (a fresh-seed campaign, 13101868)."""
    s = coordinator()
    x = s.addr("X")
    s.gms.suspects.add(s.c)
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [x.uid, 1], {}]}, x))
    [rsp] = sent(s, MERGE_RSP, x)
    assert hdr(rsp)[2] is False and not s.gms.merger.busy
    s.advance(0.01)
    [start] = sent(s, START_FLUSH)  # the view change that excludes C, not a merge flush
    assert start.dest == s.b and hdr(start)[2] == [s.c.uid]


def test_a_merge_view_for_another_subgroup_is_not_installed():
    """C, still listed in our view, coordinates a view of its own (overlapping views) and
    multicasts its MergeView to that subgroup; NAKACK hands it to us too, but our view was
    not flushed for that merge."""
    s = member()
    x = s.addr("X")
    subgroups = [View(ViewId(s.c, 6), (s.c,)), View(ViewId(x, 4), (x,))]
    merged = View(ViewId(s.c, 7), (s.c, x))
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(merged), [], None,
                                           [[view_to_wire(v) for v in subgroups], []]]}, s.c))
    assert views(s)[-1].view_id == ViewId(s.a, 5) and s.gms.stats["merge_views_ignored"] == 1
    ours = [View(ViewId(s.a, 5), (s.a, s.local, s.c)), View(ViewId(x, 4), (x,))]
    merged = View(ViewId(s.a, 8), (s.a, s.local, s.c, x))
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(merged), [], None,
                                           [[view_to_wire(v) for v in ours], []]]}, s.a))
    assert views(s)[-1].view_id == ViewId(s.a, 8)  # our coordinator's merge: installed


def test_multicasts_of_a_batch_go_up_before_its_view_and_unicasts_keep_their_place():
    """NAKACK passes up only multicasts of the current view (it holds a newer view's), so
    every one of a batch belongs before a VIEW in it, even one behind it: handling the VIEW
    can deliver the sender's later messages at once (the flush's catch-up), which would
    overtake it (seed 14001467 of the consistency campaign: 34 delivered before 22-33, those
    in the next view)."""
    s = member()
    log = []
    s.above.up = lambda batch: log.append([m.payload for m in batch])
    s.above.up_event = lambda ev: log.append(type(ev).__name__)
    before = Message(None, b"before", INTERNAL, {}, s.a)
    after = Message(None, b"after", 0, {}, s.a)
    uni = Message(s.local, b"uni", 0, {}, s.a)
    v6 = View(ViewId(s.a, 6), (s.a, s.local, s.c))
    s.up(before, Message(None, b"", INTERNAL, {5: view_hdr(v6)}, s.a), after, uni)
    assert log[0] == [b"before", b"after"] and log[-1] == [b"uni"], log
    assert "ViewChange" in log[1:-1]
    assert s.gms.view == v6


def test_member_dead_makes_the_coordinator_flush_without_the_dead():
    s = coordinator()
    s.gms.up_event(MemberDead(s.c))
    assert s.gms.stats["dead_verdicts"] == 1
    s.advance(0.01)
    [start] = sent(s, START_FLUSH)
    assert start.dest == s.b and hdr(start)[2] == [s.c.uid]
    assert MemberDead(s.c) in s.above.events  # passed on up


def test_member_dead_for_a_stranger_or_ourselves_is_ignored():
    s = coordinator()
    s.gms.up_event(MemberDead(s.addr("X")))
    s.gms.up_event(MemberDead(s.local))
    s.advance(0.5)
    assert s.gms.suspects == set() and sent(s, START_FLUSH) == []


@pytest.mark.parametrize("header", [
    [START_FLUSH], [START_FLUSH, "FID"], [START_FLUSH, "FID", 5, ["UID", 2]],
    [START_FLUSH, "FID", [], ["UID", "x"]], [START_FLUSH, "FID", [b"short"], ["UID", 2]],
    [START_FLUSH, "FID", [], ["UID"]], [FLUSH_OK], [FLUSH_CUT], [FLUSH_DONE],
    [NOT_MEMBER, "UID"], [NOT_MEMBER, "UID", "x"], [NOT_MEMBER, b"short", 9],
    [NOT_MEMBER, "UID", float("inf")], [MERGE_REQ], [MERGE_RSP, "FID"],
], ids=repr)
def test_malformed_flush_and_membership_headers_are_counted_never_raised(header):
    s = member()

    def fill(x):
        if type(x) is list:
            return [fill(y) for y in x]
        return {"UID": s.a.uid, "FID": [s.a.uid, 1]}.get(x, x) if type(x) is str else x
    s.up(Message(s.local, b"", INTERNAL, {5: fill(header)}, s.a),
         Message(None, b"app", 0, {}, s.a))
    assert s.gms.stats["malformed_header"] == 1
    assert [m.payload for m in s.above.messages] == [b"app"]
    assert len(views(s)) == 1 and sent(s, FLUSH_OK) == []


def test_unclaimed_internal_messages_stop_at_the_top():
    """GMS passes INTERNAL messages without its header up; the Top hands only application
    messages to the host."""
    from raygroups.stack.layer import Top
    s = member()
    top = Top()
    top.init(s.ctx)
    s.gms.above, top.below = top, s.gms
    app = Message(None, b"app", 0, {}, s.a)
    s.up(Message(None, b"stack", INTERNAL, {}, s.a), app)
    assert s.host.delivered == [[app]]


def test_a_view_after_a_flush_makes_its_cut_stable():
    """The VIEW goes out only once every member of the flush held the cut, so at install
    NAKACK may purge up to it (a fast series of views resets STABLE's rounds, and every
    member would keep every VIEW of a large group's formation)."""
    from raygroups.stack.events import Stability
    s = member()
    a, c = s.a, s.c
    newer = View(ViewId(a, 6), (a, s.local, c))
    cut = [[a.uid, 7, a.uid], [s.local.uid, 3, s.local.uid], [c.uid, 2, a.uid]]
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(newer), [], cut]}, a))
    assert views(s)[-1] == newer
    [st] = s.below.events_of(Stability)
    assert st.digest == {a: 7, s.local: 3, c: 2}
    # a view without a cut (a join response, or a VIEW with nothing to catch up) does not
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(View(ViewId(a, 7), (a, s.local, c)))}, a))
    assert len(s.below.events_of(Stability)) == 1
    # nor one its coordinator marks unstable: a member of it was not flushed, or flushed
    # from an older view, and may still need part of the cut (STABLE decides then)
    unflushed = View(ViewId(a, 8), (a, s.local, c))
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(unflushed), [], cut, None,
                                           False]}, a))
    assert views(s)[-1] == unflushed and len(s.below.events_of(Stability)) == 1


# -- wire versions --------------------------------------------------------------------------
def join_req_at(s, who, versions):
    """``who``'s JOIN_REQ with the same agreed settings as ``s`` and wire versions
    ``versions``."""
    return Message(s.local, b"", CONTROL,
                   {5: [JOIN_REQ, who.name, None, s.gms.config.agreed, list(versions)]}, who)


def test_the_views_version_is_the_lowest_highest_of_its_members_ranges():
    a, b, c = (Address.random(n, random.Random(i)) for i, n in enumerate("ABC"))
    for versions, want in [((), 1), (((1, 1), (1, 2)), 1), (((1, 2), (1, 2), (1, 2)), 2),
                           (((1, 2), (2, 2), (1, 2)), 2), (((2, 2), (2, 2), (2, 2)), 2),
                           (((1, 1), (1, 2), (2, 2)), 1)]:  # none in common: 1, which all speak
        members = (a, b, c)[:len(versions) or 3]
        assert View(ViewId(a, 1), members, versions=versions).wire_version == want, versions
    # on the wire: the members' ranges in view order, left out while all are (1, 1) (builds
    # from before versions read those views); equality ignores them
    plain = View(ViewId(a, 4), (a, b), versions=((1, 1), (1, 1)))
    assert len(view_to_wire(plain)) == 3
    wide = View(ViewId(a, 4), (a, b), versions=((1, 2), (1, 1)))
    assert view_to_wire(wide)[3] == [[1, 2], [1, 1]]
    book = AddressBook()
    back = view_from_wire(view_to_wire(wide), book)
    assert back == wide == plain and back.versions == ((1, 2), (1, 1))
    assert view_from_wire(view_to_wire(plain), book).ranges() == {a: (1, 1), b: (1, 1)}
    for bad in ([[1, 2]], [[1, 2], [2, 1]], [[0, 1], [1, 1]], [[1, 2], ["1", 2]], "x"):
        with pytest.raises((ValueError, TypeError)):
            view_from_wire([a.uid, 4, [[a.uid, "A"], [b.uid, "B"]], bad], book)


def test_a_joiner_without_a_version_in_common_is_denied_naming_both_ranges():
    s = coordinator()  # every member at (1, 1)
    x, y = s.addr("X"), s.addr("Y")
    s.up(join_req_at(s, x, (2, 2)), join_req_at(s, y, (1, 2)))
    s.advance(0.1)
    [denied] = sent(s, JOIN_DENIED)
    assert denied.dest == x and hdr(denied) == [
        JOIN_DENIED, [["transport.wire_versions", [1, 1], [2, 2]]]]
    assert s.gms.stats["joins_denied"] == 1
    run_flush(s)
    [rsp] = sent(s, JOIN_RSP)
    assert rsp.dest == y and hdr(rsp)[1][3] == [[1, 1], [1, 1], [1, 1], [1, 2]]
    loopback(s)
    assert views(s)[-1].members[-1] == y and views(s)[-1].wire_version == 1


def test_pending_joiners_count_towards_the_groups_versions():
    s = make()
    s.below.answers[WireVersions] = (1, 2)
    s.down_event(Connect())
    rounds(s, [], [])
    b = s.addr("B")
    s.up(join_req_at(s, b, (1, 2)))
    s.advance(0.01)
    loopback(s)
    s.up(ack(s, b, 2))
    [installed] = s.below.events_of(ViewInstalled)[-1:]
    assert installed.view.versions == ((1, 2), (1, 2)) and installed.view.wire_version == 2
    s.below.take()
    # an old joiner, then a (2, 2) one before the view with the first went out: the group
    # will speak [1, 1], which the second does not
    p, q = s.addr("P"), s.addr("Q")
    s.up(join_req_at(s, p, (1, 1)), join_req_at(s, q, (2, 2)))
    [denied] = sent(s, JOIN_DENIED)
    assert denied.dest == q and hdr(denied)[1] == [["transport.wire_versions", [1, 1], [2, 2]]]
    s.advance(0.1)
    run_flush(s)
    assert [m.dest for m in sent(s, JOIN_RSP)] == [p]


def test_a_denied_joiner_names_both_ranges():
    s = make()
    s.below.answers[WireVersions] = (2, 2)
    s.down_event(Connect())
    a = s.addr("A")
    rounds(s, [PingData(a, ("10.0.0.3", 1), True, True, a)])
    [req] = sent(s, JOIN_REQ)
    assert hdr(req)[4] == [2, 2]
    s.up(Message(s.local, b"", INTERNAL,
                 {5: [JOIN_DENIED, [["transport.wire_versions", [1, 1], [2, 2]]]]}, a))
    [left] = s.above.events_of(Left)
    assert "transport.wire_versions is [1, 1] in the group, [2, 2] here" in left.reason


def test_a_member_installs_a_view_with_its_members_versions():
    s = member()
    view = View(ViewId(s.a, 6), (s.a, s.local, s.c), versions=((1, 2), (1, 2), (1, 2)))
    s.up(Message(None, b"", INTERNAL, {5: view_hdr(view)}, s.a))
    installed = s.below.events_of(ViewInstalled)[-1].view
    assert installed.versions == ((1, 2),) * 3 and installed.wire_version == 2
    # a merge view keeps them too
    x = s.addr("X")
    ours = [view, View(ViewId(x, 4), (x,), versions=((2, 2),))]
    merged = View(ViewId(s.a, 8), (s.a, s.local, s.c, x), versions=((1, 2),) * 3 + ((2, 2),))
    s.up(Message(None, b"", INTERNAL, {5: [VIEW, view_to_wire(merged), [], None,
                                           [[view_to_wire(v) for v in ours], []]]}, s.a))
    installed = s.below.events_of(ViewInstalled)[-1].view
    assert isinstance(installed, MergeView) and installed.versions[-1] == (2, 2)
    assert installed.wire_version == 2


def test_a_merge_without_a_version_in_common_is_refused_until_a_view_changes():
    s = coordinator()  # at [1, 1]
    x = s.addr("X")
    s.gms.up_event(MergeInfo(x, x, 9, True))
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [x.uid, 1], {}, [2, 2]]}, x))
    [rsp] = sent(s, MERGE_RSP, x)
    assert hdr(rsp)[2:] == [False, [["transport.wire_versions", [1, 1], [2, 2]]]]
    assert s.gms.stats["merges_refused"] == 1 and not s.gms.merger.busy
    merger = s.gms.merger
    assert merger._apart(x)  # we do not lead a merge with X while both views stay
    s.gms.up_event(MergeInfo(x, x, 10, True))  # X's view changed: it may speak 1 now
    assert not merger._apart(x)
    # differing agreed settings keep the groups apart for good
    s.up(Message(s.local, b"", INTERNAL, {5: [MERGE_REQ, [x.uid, 2], {"app.k": 1}, [1, 1]]}, x))
    s.gms.up_event(MergeInfo(x, x, 11, True))
    assert merger._apart(x)
