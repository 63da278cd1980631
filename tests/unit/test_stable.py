"""STABLE in a sandwich: gossip, min-merge, STABILITY after hearing from everyone."""
import pytest

from raygroups.stack.events import GetDigest, Stability, ViewInstalled
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.stable import GOSSIP, STABILITY, Stable, StableConfig
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich


def make(digest=None, **cfg):
    opts = dict(desired_avg_gossip_s=1.0, stability_delay_s=0.01)
    opts.update(cfg)
    s = Sandwich(Stable(StableConfig(**opts)))
    s.b, s.c = s.addr("B"), s.addr("C")
    s.digest = digest if digest is not None else {}
    s.below.answers[GetDigest] = lambda ev: dict(s.digest)
    s.view = View(ViewId(s.local, 3), (s.local, s.b, s.c))
    s.vid = [s.local.uid, 3]
    s.down_event(ViewInstalled(s.view))
    return s


def gossip(s, sender, seqnos, vid=None):
    return Message(None, b"", CONTROL, {4: [GOSSIP, vid or s.vid, seqnos]}, sender)


def stability(s, sender, seqnos, vid=None):
    return Message(None, b"", CONTROL, {4: [STABILITY, vid or s.vid, seqnos]}, sender)


def of_type(msgs, typ):
    return [m for m in msgs if m.headers[4][0] == typ]


def test_no_gossip_without_a_view():
    s = Sandwich(Stable(StableConfig(desired_avg_gossip_s=1.0)))
    s.advance(10.0)
    assert s.below.sent == [] and s.layer.stats["gossips_sent"] == 0


def test_gossip_carries_the_digest_aligned_to_view_members():
    s = make()
    s.digest = {s.c: 7, s.local: 2, s.addr("stranger"): 99}  # B missing: 0
    s.advance(1.0)
    g = of_type(s.below.sent, GOSSIP)
    assert len(g) == 1
    assert g[0].dest is None and g[0].flags == CONTROL
    assert g[0].headers[4] == [GOSSIP, s.vid, [2, 0, 7]]
    assert s.below.events_of(GetDigest) == [GetDigest(sent=False)]


def test_stability_only_after_hearing_from_all_members_with_min_merge():
    s = make()
    s.up(gossip(s, s.local, [5, 3, 9]))
    s.up(gossip(s, s.b, [4, 6, 9]))
    s.advance(0.5)
    assert of_type(s.below.sent, STABILITY) == []  # C not heard from yet
    s.up(gossip(s, s.c, [7, 5, 2]))
    assert of_type(s.below.sent, STABILITY) == []  # after a random stagger
    s.advance(0.01)
    st = of_type(s.below.sent, STABILITY)
    assert [m.headers[4] for m in st] == [[STABILITY, s.vid, [4, 3, 2]]]
    assert st[0].dest is None and st[0].flags == CONTROL


def test_stability_received_passes_stability_down_and_starts_a_new_round():
    s = make()
    s.up(stability(s, s.b, [4, 3, 2]))
    assert s.below.events_of(Stability) == [Stability({s.local: 4, s.b: 3, s.c: 2})]
    assert s.layer.stats["stability_received"] == 1
    # a new round: one member's gossip is not enough
    s.up(gossip(s, s.b, [9, 9, 9]))
    s.advance(0.5)
    assert of_type(s.below.sent, STABILITY) == []


def test_a_stability_heard_cancels_the_own_pending_one():
    s = make()
    for who in (s.local, s.b, s.c):
        s.up(gossip(s, who, [1, 1, 1]))
    s.up(stability(s, s.b, [1, 1, 1]))  # B was faster
    s.advance(0.5)
    assert of_type(s.below.sent, STABILITY) == []


def test_gossip_of_another_membership_resets_the_round():
    """Seed 003: no unilateral action. Evidence of another membership restarts the round;
    the members heard so far must be heard again."""
    s = make()
    s.up(gossip(s, s.local, [1, 1, 1]))
    s.up(gossip(s, s.b, [1, 1, 1]))
    s.up(gossip(s, s.c, [1, 1, 1], vid=[s.local.uid, 4]))
    assert s.layer.stats["other_membership"] == 1
    s.up(gossip(s, s.c, [1, 1, 1]))
    s.advance(0.5)
    assert of_type(s.below.sent, STABILITY) == []
    s.up(gossip(s, s.local, [1, 1, 1]), gossip(s, s.b, [1, 1, 1]))
    s.advance(0.01)
    assert len(of_type(s.below.sent, STABILITY)) == 1


def test_gossip_with_digest_of_wrong_length_counts_as_other_membership():
    s = make()
    s.up(gossip(s, s.local, [1, 1, 1]), gossip(s, s.b, [1, 1, 1]))
    s.up(gossip(s, s.c, [1, 1]))
    s.up(gossip(s, s.c, [1, 1, 1]))
    s.advance(0.5)
    assert s.layer.stats["other_membership"] == 1
    assert of_type(s.below.sent, STABILITY) == []


def test_stability_for_another_view_is_not_applied():
    s = make()
    s.up(stability(s, s.b, [4, 3, 2], vid=[s.local.uid, 2]))
    assert s.below.events_of(Stability) == []


def test_new_view_restarts_the_round():
    s = make()
    s.up(gossip(s, s.local, [1, 1, 1]), gossip(s, s.b, [1, 1, 1]))
    v4 = View(ViewId(s.local, 4), (s.local, s.b))
    s.down_event(ViewInstalled(v4))
    assert s.below.events_of(ViewInstalled)[-1].view == v4  # passed down
    vid4 = [s.local.uid, 4]
    s.up(gossip(s, s.local, [1, 1], vid=vid4))
    s.advance(0.5)
    assert of_type(s.below.sent, STABILITY) == []
    s.up(gossip(s, s.b, [2, 0], vid=vid4))
    s.advance(0.01)
    assert [m.headers[4] for m in of_type(s.below.sent, STABILITY)] == [[STABILITY, vid4, [1, 0]]]


def test_max_bytes_triggers_an_early_gossip():
    s = make(max_bytes=100, desired_avg_gossip_s=1000.0)
    s.up(Message(None, b"x" * 60, 0, {}, s.b))
    assert s.below.sent == []
    s.up(Message(None, b"x" * 60, 0, {}, s.b))
    assert len(of_type(s.below.sent, GOSSIP)) == 1
    assert len(s.above.messages) == 2


@pytest.mark.parametrize("header", [5, [], [GOSSIP, None], [9, "VID", [1, 1, 1]],
                                    [GOSSIP, "VID", [1, "2", 3]], [GOSSIP, "VID", [1, None, 3]],
                                    [STABILITY, "VID", [1, 2.5, 3]], [GOSSIP, "VID", [1, True, 3]]],
                         ids=repr)
def test_malformed_headers_are_counted_never_raised(header):
    s = make()
    header = [s.vid if x == "VID" else x for x in header] if type(header) is list else header
    s.up(Message(None, b"", CONTROL, {4: header}, s.b), Message(None, b"app", 0, {}, s.b))
    assert s.layer.stats["malformed_header"] == 1
    assert s.below.events_of(Stability) == []
    assert [m.payload for m in s.above.messages] == [b"app"]


def test_large_views_send_digests_to_the_coordinator_which_alone_sends_stability():
    # coord_only_above=2: the 3-member view counts as large
    s = make({}, coord_only_above=2)
    s.advance(1.0)
    [g] = of_type(s.below.sent, GOSSIP)
    assert g.dest == s.local and g.flags == CONTROL  # we are members[0], the coordinator
    s.below.take()
    s.up(gossip(s, s.local, [5, 3, 4]), gossip(s, s.b, [4, 3, 9]), gossip(s, s.c, [6, 2, 4]))
    s.advance(0.01)
    [st] = of_type(s.below.sent, STABILITY)
    assert st.dest is None and st.headers[4] == [STABILITY, s.vid, [4, 2, 4]]
    # a member that is not the coordinator sends its digest to it, and applies STABILITY
    m = make({}, coord_only_above=2)
    view = View(ViewId(m.b, 4), (m.b, m.local, m.c))
    m.down_event(ViewInstalled(view))
    m.vid = [m.b.uid, 4]
    m.advance(1.0)
    assert {x.dest for x in of_type(m.below.sent, GOSSIP)} == {m.b}
    m.up(stability(m, m.b, [1, 2, 3]))
    [ev] = m.below.events_of(Stability)
    assert ev.digest == {m.b: 1, m.local: 2, m.c: 3}


def test_an_all_stable_member_gossips_only_every_idle_gossip_rounds():
    """Once the last STABILITY equals our digest and nothing was delivered since, no round
    can agree on more than our digest: we gossip every idle_gossip_rounds rounds only (that
    one completes a round for a member that lost the STABILITY), without asking NAKACK for
    the digest again. A delivery makes us gossip at the next round."""
    s = make(digest=None, idle_gossip_rounds=4)
    s.digest = {s.local: 2, s.b: 3, s.c: 4}
    s.advance(1.0)
    assert [m.headers[4][2] for m in of_type(s.below.sent, GOSSIP)] == [[2, 3, 4]]
    s.up(stability(s, s.b, [2, 3, 4]))
    asked = len(s.below.events_of(GetDigest))
    s.below.sent.clear()
    s.advance(3.0)
    assert of_type(s.below.sent, GOSSIP) == [] and s.layer.stats["gossips_idle"] == 3
    s.advance(1.0)  # the fourth round: the rare one, the same digest
    assert [m.headers[4][2] for m in of_type(s.below.sent, GOSSIP)] == [[2, 3, 4]]
    assert len(s.below.events_of(GetDigest)) == asked
    s.below.sent.clear()
    s.digest[s.b] = 4
    s.up(Message(None, b"x", 0, {}, s.b))  # delivered: gossip at the next round
    s.advance(1.0)
    assert [m.headers[4][2] for m in of_type(s.below.sent, GOSSIP)] == [[2, 4, 4]]


def test_a_member_ahead_of_the_last_stability_gossips_every_round():
    """Our digest holds more than the last STABILITY: the next rounds need us, every one
    (nothing delivered since: the same digest, without asking NAKACK again)."""
    s = make(idle_gossip_rounds=4)
    s.digest = {s.local: 2, s.b: 5, s.c: 4}
    s.advance(1.0)
    s.up(stability(s, s.b, [2, 3, 4]))  # C had delivered less of B's
    asked = len(s.below.events_of(GetDigest))
    s.below.sent.clear()
    s.advance(3.0)
    assert [m.headers[4][2] for m in of_type(s.below.sent, GOSSIP)] == [[2, 5, 4]] * 3
    assert len(s.below.events_of(GetDigest)) == asked and s.layer.stats["gossips_idle"] == 0
