"""SWIM's gossip mode (stack/swim.py, swim_reconnect.py, gossip.py) one part at a time, in a
sandwich with a manual clock: a joiner is a member once its contact answered; the dead are
remembered and told of their death, by the reconnect round and in answer to anything they
send, and refute it; a refutation wins over the tombstone; a member that left is neither
told nor refutes. Each test fails when its mechanism is taken out (each was run once against
such a mutation)."""
from raygroups.stack.events import (Connect, EmitTo, FindMembers, GetPhysical, MembersChanged,
                                    PingData, Subscribe, ViewInstalled)
from raygroups.stack.gossip import GossipConfig, GossipMembership
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.swim import (ALIVE, LEFT, PING, PUSH_PULL, REMOVE, RUMORS, SUBSCRIBE,
                                  SUSPECT, SUSPECT_S, UNSUB_ACK, Swim, SwimConfig)

from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

INTERVAL = 1.0
RECONNECT = 2.0


def member(n_others=2, **cfg):
    """A gossip-mode member that started alone and then heard of ``n_others`` members."""
    phys = {}
    s = Sandwich(Swim(SwimConfig(**{"mode": "gossip", "probe_interval_s": INTERVAL,
                                    "reconnect_interval_s": RECONNECT,
                                    "suspicion_min_s": 1e6,  # (nobody answers our probes)
                                    "push_pull_interval_s": 0, **cfg})),
                 answers={GetPhysical: lambda ev: phys.get(ev.addr, ("10.0.0.1", 7800))})
    s.down_event(Subscribe(None))
    others = [s.addr(f"m{i}") for i in range(n_others)]
    for i, a in enumerate(others):
        phys[a] = (f"10.0.1.{i}", 7800)
        from_(s, a, RUMORS, 0, rumors=[(ALIVE, a.uid, 0, [a.name, *phys[a]], 3)])
    s.advance(0)
    s.below.take()
    return s, others, phys


def from_(s, sender, typ, seq, *rest, rumors=()):
    """A message from ``sender``; rumors (kind, uid, incarnation, extra, rounds left) are
    created now."""
    rumors = [[*r, s.host.wall()] for r in rumors]
    s.up(Message(s.local, b"", CONTROL, {7: [typ, seq, *rest, rumors]}, sender=sender))


def bury(s, addr, left=False):
    """``addr`` declared dead (or gone, ``left``) by another member's REMOVE."""
    other = next(a for a in s.layer.nodes if a != addr)
    from_(s, other, RUMORS, 0, rumors=[(REMOVE, addr.uid, 0, LEFT if left else None, 3)])
    s.advance(0)
    assert addr not in s.layer.nodes


def tells(s, addr):
    """The messages that told ``addr`` of its death: (physical address or None, rumors):
    our ALIVE and its REMOVE, alone (not a REMOVE piggybacked on a message to it)."""
    out = [(e.phys, e.msg) for e in s.below.events if type(e) is EmitTo]
    out += [(None, m) for m in s.below.sent]
    return [(phys, m.headers[7][-1]) for phys, m in out
            if m.dest == addr and m.headers[7][0] == RUMORS and
            [r[:2] for r in m.headers[7][-1]] == [[ALIVE, s.local.uid], [REMOVE, addr.uid]]]


def taken_events(s) -> list:
    out = list(s.below.events)
    s.below.events.clear()
    return out


def clear(s):
    s.below.take()
    s.below.events.clear()


def test_the_reconnect_round_tells_a_remembered_dead_member_at_its_remembered_address():
    s, (a, b), phys = member()
    bury(s, b)
    clear(s)
    s.advance(10 * RECONNECT)
    told = tells(s, b)
    # each round tries b with probability dead / live = 1/2 (Serf's reconnect)
    assert 2 <= len(told) <= 10
    for where, rumors in told:
        assert where == phys[b]
        assert [(r[0], r[1], r[2]) for r in rumors] == [(ALIVE, s.local.uid, 0),
                                                       (REMOVE, b.uid, 0)]
    assert s.layer.stats["reconnect_probes"] == len(told)


def test_a_message_from_a_member_held_dead_is_answered_with_its_death_once_per_interval():
    s, (a, b), phys = member(reconnect_interval_s=0)  # no reconnect round: the answer alone
    bury(s, b)
    clear(s)
    from_(s, b, PING, 1, None)
    from_(s, b, PING, 2, None)
    assert len(tells(s, b)) == 1
    s.advance(INTERVAL)
    from_(s, b, PING, 3, None)
    assert len(tells(s, b)) == 2 and s.layer.stats["told_dead"] == 2


def test_a_refutation_brings_a_buried_member_back_and_its_old_incarnation_does_not():
    s, (a, b), phys = member()
    bury(s, b)
    from_(s, b, RUMORS, 0, rumors=[(ALIVE, b.uid, 0, [b.name, *phys[b]], 3)])  # an announce
    s.advance(0)
    assert b not in s.layer.nodes
    from_(s, b, RUMORS, 0, rumors=[(ALIVE, b.uid, 1, [b.name, *phys[b]], 3)])  # its refutation
    s.advance(0)
    assert b in s.layer.nodes and b not in s.layer.tombstones and not len(s.layer.dead)
    assert s.above.events_of(MembersChanged)[-1].members == tuple(sorted((s.local, a, b)))
    assert s.layer.stats["reconnected"] == 1


def test_a_member_told_of_its_death_refutes_to_its_group_and_to_the_teller():
    """The teller may be in no list of ours (it held us dead because we held it dead), and
    our multicast may not reach it: it gets the refutation directly."""
    s, (a, b), phys = member()
    z = s.addr("z")
    from_(s, z, RUMORS, 0, rumors=[(ALIVE, z.uid, 3, ["z", "10.0.2.1", 7800], 1),
                                   (REMOVE, s.local.uid, 0, None, 1)])
    assert s.layer.inc == 1
    refuted = {m.dest for m in s.below.sent for r in m.headers[7][-1]
               if r[0] == ALIVE and r[1] == s.local.uid and r[2] == 1}
    assert refuted == {None, z}  # the multicast, and z


def test_a_member_that_left_is_neither_told_nor_reconnected_and_a_leaver_does_not_refute():
    s, (a, b), phys = member()
    bury(s, b, left=True)
    clear(s)
    from_(s, b, PING, 1, None)
    s.advance(10 * RECONNECT)
    assert tells(s, b) == [] and not len(s.layer.dead)
    # the leaver's side: unsubscribed, confirmed, then told of its death
    s.down_event(Subscribe(None))
    from_(s, a, UNSUB_ACK, 0)
    from_(s, a, RUMORS, 0, rumors=[(REMOVE, s.local.uid, 0, None, 1)])
    assert s.layer.inc == 0 and s.layer.stats["refutations"] == 0


def test_the_dead_kept_for_reconnection_are_bounded_in_number_and_in_time():
    s, others, phys = member(n_others=6, reconnect_max=3, reconnect_for_s=50.0)
    for addr in others[:5]:
        bury(s, addr)
    assert list(s.layer.dead.entries) == others[2:5]  # the three buried last
    s.advance(60.0)
    clear(s)
    s.advance(10 * RECONNECT)
    assert not len(s.layer.dead) and all(tells(s, addr) == [] for addr in others)


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


def push_pulls(s, dest):
    """Our whole-list messages to ``dest`` that ask for its list back."""
    return [m for m in s.below.sent if m.dest == dest and m.headers[7][0] == PUSH_PULL and
            m.headers[7][1] == 1]


def test_a_probe_from_a_member_we_do_not_list_is_answered_with_our_list_once_per_interval():
    # two groups formed apart (a joiner founded its own while its contact's answer was
    # lost): a member of the other group lists us and probes us; we swap lists with it at
    # once, so the groups merge in a few probe rounds rather than at a random push-pull
    s, (a, b), phys = member()
    stranger = s.addr("x")
    clear(s)
    from_(s, stranger, PING, 1, None)
    from_(s, stranger, PING, 2, None)
    s.advance(0)
    [pp] = push_pulls(s, stranger)
    assert {e[0] for e in pp.headers[7][2]} == {s.local.uid, a.uid, b.uid}
    clear(s)
    s.advance(INTERVAL)
    from_(s, stranger, PING, 3, None)
    assert len(push_pulls(s, stranger)) == 1
    clear(s)
    from_(s, a, PING, 4, None)  # a member we list: no whole list for a probe
    assert push_pulls(s, a) == []


def test_a_probe_from_a_stranger_gets_no_list_in_views_mode_nor_from_a_joiner():
    # views mode: a member outside our view is GMS's merge to find, not SWIM's
    v = Sandwich(Swim(SwimConfig(mode="views", push_pull_interval_s=0)),
                 answers={GetPhysical: ("10.0.0.1", 7800)})
    v.down_event(ViewInstalled(View(ViewId(v.local, 1), (v.local, v.addr("a")))))
    v.below.take()
    from_(v, v.addr("x"), PING, 1, None)
    assert [m for m in v.below.sent if m.headers[7][0] == PUSH_PULL] == []
    j = Sandwich(Swim(SwimConfig(mode="gossip", push_pull_interval_s=0)))
    j.down_event(Subscribe(j.addr("contact")))
    j.below.take()
    x = j.addr("x")
    from_(j, x, PING, 1, None)
    assert push_pulls(j, x) == [] and not j.layer.active


def test_gossip_mode_keeps_no_set_of_suspects():
    """Only views mode pings its suspects each round (and drops them from the set it keeps
    for that once refuted): gossip mode adds nobody, so churn cannot grow the set."""
    s, others, _ = member(n_others=20)
    for a in others:
        from_(s, others[0], RUMORS, 0, rumors=[(SUSPECT, a.uid, 0, others[0].uid, 3)])
    s.advance(0)
    assert sum(n.state == SUSPECT_S for n in s.layer.nodes.values()) >= 19
    assert s.layer.suspected == set()


def verified_at_once(n_others, suspects, **cfg):
    """How many of ``suspects`` fresh suspicions (each heard from m0) a gossip member
    verifies at once: the suspects it puts next in its probe order."""
    s, others, _ = member(n_others=n_others, **cfg)
    before = len(s.layer.order)
    heard = others[1:1 + suspects]
    for i in range(0, len(heard), 16):
        from_(s, others[0], RUMORS, 0,
              rumors=[(SUSPECT, a.uid, 0, others[0].uid, 3) for a in heard[i:i + 16]])
    assert all(s.layer.nodes[a].state == SUSPECT_S for a in heard)
    return len(s.layer.order) - before


def test_about_verifiers_members_of_a_large_gossip_group_probe_a_suspect_at_once():
    """Lifeguard's confirmations come from members that probe a suspect when they hear of it:
    every member of a small group does, one in N / ``suspicion_verifiers`` of a large one.
    With every member verifying, 300 members split in halves confirmed each suspicion 15
    times, where k = 3 count."""
    assert verified_at_once(7, 5) == 5                       # 8 members: all verify
    assert verified_at_once(7, 5, suspicion_verifiers=0) == 0
    many = verified_at_once(400, 300)                        # 300 x 8 / 400: 6 expected
    assert 1 <= many <= 15, many
