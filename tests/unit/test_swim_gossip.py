"""SWIM's gossip mode (stack/swim.py, gossip.py) one part at a time, in a sandwich with a
manual clock: a joiner is a member once its contact answered, only a member answers a
subscription, and a joiner whose contact stays silent tries again. Each test fails when its
mechanism is taken out (each was run once against such a mutation)."""
from raygroups.stack.events import (Connect, FindMembers, GetPhysical, MembersChanged, PingData,
                                    Subscribe)
from raygroups.stack.gossip import GossipConfig, GossipMembership
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.swim import ALIVE, PUSH_PULL, RUMORS, SUBSCRIBE, Swim, SwimConfig

from .sandwich import Sandwich

INTERVAL = 1.0


def from_(s, sender, typ, seq, *rest, rumors=()):
    """A message from ``sender``; rumors (kind, uid, incarnation, extra, rounds left) are
    created now."""
    rumors = [[*r, s.host.wall()] for r in rumors]
    s.up(Message(s.local, b"", CONTROL, {7: [typ, seq, *rest, rumors]}, sender=sender))


def taken_events(s) -> list:
    out = list(s.below.events)
    s.below.events.clear()
    return out


def test_a_joiner_is_no_member_until_its_contact_answers_and_asks_until_then():
    """A joiner that listed itself at once (and was discovered as a member) and stopped
    asking when anyone else appeared in its list founded a group of its own whenever its
    SUBSCRIBE or the answer was lost, and others joined that group through it."""
    s = Sandwich(Swim(SwimConfig(mode="gossip", probe_interval_s=INTERVAL)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    contact, other = s.addr("contact"), s.addr("other")
    s.down_event(Subscribe(contact))
    s.advance(2.5 * INTERVAL)
    asked = [m.dest for m in s.below.take() if m.headers[7][0] == SUBSCRIBE]
    assert asked == [contact] * 3
    from_(s, other, RUMORS, 0, rumors=[(ALIVE, other.uid, 0, ["other", "10.0.0.3", 7800], 3)])
    s.advance(INTERVAL)  # another member's announcement: still no member, still asking
    assert not s.above.events_of(MembersChanged) and not s.layer.active
    assert [m.dest for m in s.below.take() if m.headers[7][0] == SUBSCRIBE] == [contact]
    s.up(Message(s.local, b"", CONTROL, {7: [PUSH_PULL, 0, [
        [contact.uid, 0, ["contact", "10.0.0.2", 7800]],
        [s.local.uid, 0, ["me", "10.0.0.1", 7800]]], []]}, sender=contact))
    s.advance(0)
    assert s.above.events_of(MembersChanged)[-1].members == tuple(sorted((s.local, contact,
                                                                          other)))
    s.advance(3 * INTERVAL)
    assert not [m for m in s.below.take() if m.headers[7][0] == SUBSCRIBE]


def test_only_a_member_answers_a_subscription():
    s = Sandwich(Swim(SwimConfig(mode="gossip", probe_interval_s=INTERVAL)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    contact, newcomer = s.addr("contact"), s.addr("newcomer")
    s.down_event(Subscribe(contact))  # joining itself
    s.below.take()
    from_(s, newcomer, SUBSCRIBE, 0, ["newcomer", "10.0.0.4", 7800], 0)
    assert [m for m in s.below.take() if m.dest == newcomer] == []
    assert s.layer.stats["subscribe_ignored"] == 1


def test_a_joiner_whose_contact_stays_silent_discovers_again_and_tries_another():
    s = Sandwich(GossipMembership(GossipConfig(join_timeout_s=2.0)))
    found = [PingData(s.addr(n), None, False, True) for n in ("a", "b", "c")]
    s.down_event(Connect())
    for attempt in range(3):
        [find] = [e for e in taken_events(s) if type(e) is FindMembers]
        find.callback(found)
        [sub] = [e for e in taken_events(s) if type(e) is Subscribe]
        if attempt == 0:
            assert sub.contact == min(p.addr for p in found)
        s.advance(2.0)
    assert s.layer.stats["join_timeouts"] == 3
