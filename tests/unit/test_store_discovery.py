"""The store discovery layer in a sandwich (virtual clock, in-memory store, no sockets): a join
round (list, read, fill the address cache, probe the coordinator, answer GMS), rounds on an
empty store and with a silent coordinator, the coordinator's writes (a join: one write; a
leave: none), an address missing from the cache fetched from the file, the rendezvous
(MergeInfo for another coordinator, a stale file removed), bootstrap joins without any store
call, and malformed lines."""
from raygroups.stack.address import Address
from raygroups.stack.discovery import Entry, MembersFile, MemoryStore
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.discovery.store import ScheduledStoreClient
from raygroups.stack.discovery.store_discovery import (PROBE, PROBE_RSP, StoreDiscovery,
                                                       StoreDiscoveryConfig)
from raygroups.stack.events import (AddPhysical, DiscoveryTargets, EmitTo, FindMembers,
                                    GetPhysical, Leave, MembershipStatus, MergeInfo, PingData,
                                    ViewInstalled)
from raygroups.stack.message import CONTROL, Message
from raygroups.stack.view import View, ViewId

from .sandwich import Sandwich

OWN = ("10.0.0.1", 7800)
C = "test"


def make(store=None, **cfg):
    opts = dict(url="memory://unit", probe_timeout_s=0.3, rendezvous_interval_s=1.0,
                stale_after_s=5.0)
    opts.update(cfg)
    s = Sandwich(StoreDiscovery(StoreDiscoveryConfig(**opts)), start=False)
    s.store = store if store is not None else MemoryStore()
    s.host.store = ScheduledStoreClient(s.store, s.host.call_later, lambda: 0.001)
    s.phys = {None: OWN}
    s.below.answers[GetPhysical] = lambda ev: s.phys.get(ev.addr)

    def add(ev):
        s.phys[ev.addr] = ev.phys
    s.below.answers[AddPhysical] = add
    s.layer.start()
    s.found = []
    return s


def entry(addr, port, coord=False):
    return Entry(addr.name, addr.uid, "10.0.0.9", port, coord)


def put_file(s, coord, members, counter=3):
    mf = MembersFile([entry(m, 7000 + i, m == coord) for i, m in enumerate(members)],
                     view_id=(coord.uid, counter))
    s.store.put(C, file_name(coord.uid), mf.encode())
    s.store.calls.clear()
    return mf


def probes(s):
    return [e for e in s.below.events if type(e) is EmitTo and e.msg.headers[1][0] == PROBE]


def answer(s, sender, nonce, is_coord=True, joined=True, view=None, coord=None):
    view = view or (sender, 3)
    coord = coord or sender
    hdr = [PROBE_RSP, nonce, sender.name, ["10.0.0.9", 7000], is_coord, joined,
           [view[0].uid, view[1]], coord.uid, ["10.0.0.9", 7000]]
    s.up(Message(s.local, b"", CONTROL, {1: hdr}, sender))


def install(s, *members, counter=1, coord=None):
    v = View(ViewId(coord or members[0], counter), tuple(members))
    s.down_event(ViewInstalled(v))
    return v


def test_join_round_reads_one_file_probes_its_coordinator_and_answers_gms():
    s = make()
    a, b = s.addr("A"), s.addr("B")
    put_file(s, a, [a, b])
    s.down_event(MembershipStatus(False, False))
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert s.store.calls == {"list": 1, "get": 1}
    assert s.phys[a] == ("10.0.0.9", 7000) and s.phys[b] == ("10.0.0.9", 7001)
    [p] = probes(s)
    assert p.phys == ("10.0.0.9", 7000)
    answer(s, a, p.msg.headers[1][1])
    s.advance(0.0)
    assert s.found == [[PingData(a, ("10.0.0.9", 7000), True, True, None)]]
    s.advance(1.0)  # no more probes, no more store calls after the round
    assert len(probes(s)) == 1 and s.store.calls == {"list": 1, "get": 1}


def test_empty_store_and_silent_coordinator_answer_nothing():
    s = make()
    s.down_event(MembershipStatus(False, False))
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert s.found == [[]] and s.store.calls == {"list": 1}
    a = s.addr("A")
    put_file(s, a, [a])
    s.down_event(FindMembers(s.found.append))
    s.advance(0.8)  # 3 probes a timeout (0.3 s), no answer: probed again while another
    assert len(s.found) == 1  # timeout fits in coordinator_wait_s (1 s)
    s.advance(0.2)
    assert len(probes(s)) == 9 and s.found[-1] == []
    s.down_event(FindMembers(s.found.append))  # same etag: the file is not read again
    s.advance(0.4)  # and its coordinator, silent for longer than the wait, is probed once
    assert s.store.calls == {"list": 2, "get": 1} and len(s.found) == 3
    assert len(probes(s)) == 12


def joining_with_a_file():
    """A joiner whose store holds one file, of coordinator A, in its first join round (the
    file read, the first probe out): (sandwich, A)."""
    s = make()
    s.down_event(MembershipStatus(False, False))
    a = s.addr("A")
    put_file(s, a, [a])
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    return s, a


def test_a_coordinator_that_answered_once_is_waited_for_afresh_when_it_falls_silent():
    """A join round the coordinator answered (its JOIN may then time out), then a round in
    which it is silent: the second waits the whole ``coordinator_wait_s`` again, not what
    is left of a wait counted from the first round's probe."""
    s, a = joining_with_a_file()
    answer(s, a, probes(s)[0].msg.headers[1][1])
    s.advance(2.0)  # longer than the wait: the answer restarted it
    assert len(s.found) == 1 and s.found[0][0].addr == a
    sent = len(probes(s))
    s.down_event(FindMembers(s.found.append))
    s.advance(0.55)  # silent: probed again, not given up after one probe timeout (0.3 s)
    assert len(s.found) == 1 and len(probes(s)) - sent == 6
    s.advance(0.45)
    assert s.found[-1] == [] and len(probes(s)) - sent == 9


def test_member_that_is_not_coordinator_points_to_it():
    s = make()
    a, b, c = s.addr("A"), s.addr("B"), s.addr("C")
    put_file(s, a, [a, b])
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    answer(s, a, probes(s)[0].msg.headers[1][1], is_coord=False, view=(c, 9), coord=c)
    s.advance(0.0)
    assert s.found == [[PingData(a, ("10.0.0.9", 7000), False, True, c)]]


def test_coordinator_writes_on_joins_not_on_leaves_and_deletes_its_file_when_leaving():
    s = make()
    me = s.local
    install(s, me)
    s.advance(0.01)
    name = file_name(me.uid)
    assert s.store.calls == {"put": 1}
    b, c = s.addr("B"), s.addr("C")
    s.phys[b], s.phys[c] = ("10.0.0.2", 1), ("10.0.0.3", 1)
    install(s, me, b, c, counter=2)
    s.advance(0.01)
    mf = MembersFile.parse(s.store.get(C, name)[0])
    assert [e.name for e in mf] == ["me", "B", "C"] and mf.coordinator.uid == me.uid
    assert mf.view_id == (me.uid, 2) and s.store.calls["put"] == 2
    install(s, me, c, counter=3)  # B left: not written out
    s.advance(0.01)
    assert s.store.calls["put"] == 2
    s.down_event(Leave())
    install(s, c, counter=4, coord=me)  # the view without us
    s.advance(0.01)
    assert s.store.list(C) == {}


def test_address_missing_from_the_cache_is_fetched_from_the_file():
    s = make()
    a, b = s.addr("A"), s.addr("B")
    put_file(s, a, [a, b, s.local])
    install(s, a, b, s.local)
    s.advance(0.01)
    assert s.store.calls == {"get": 1}
    assert AddPhysical(b, ("10.0.0.9", 7001)) in s.below.events
    assert s.layer.stats["address_fetches"] == 1
    install(s, a, b, s.local, counter=2)  # now known: no more reads
    s.advance(2.0)
    assert s.store.calls == {"get": 1}


def test_rendezvous_reports_other_coordinators_and_removes_stale_files():
    s = make()
    me, x, y = s.local, s.addr("X"), s.addr("Y")
    install(s, me, counter=7)
    s.advance(0.01)
    put_file(s, x, [x], counter=4)
    put_file(s, y, [y], counter=9)
    s.advance(1.1)  # a rendezvous: list, read both files
    assert s.store.calls["list"] >= 1 and s.store.calls["get"] == 2
    nonce = probes(s)[-1].msg.headers[1][1]
    answer(s, x, nonce, view=(x, 4))
    [info] = s.above.events_of(MergeInfo)
    assert info == MergeInfo(x, x, 4, True)
    assert ("10.0.0.9", 7000) in s.down_event(DiscoveryTargets())
    for _ in range(40):  # X keeps answering, Y is silent (and its view id is newer)
        s.advance(0.25)
        answer(s, x, nonce, view=(x, 4))
    files = s.store.list(C)
    assert file_name(x.uid) in files and file_name(y.uid) in files
    s.advance(10.0)  # 3 x stale_after_s of silence: Y's whole group is gone
    assert file_name(y.uid) not in s.store.list(C)
    s.advance(5.0)  # X falls silent too; its view (4) is older than ours (7): stale sooner
    assert file_name(x.uid) not in s.store.list(C)
    assert s.layer.stats["files_deleted_stale"] == 2


def test_a_stale_file_written_again_with_the_same_content_is_probed_again():
    """X was cut off: we deleted its file as stale, and X wrote it again unchanged (same
    content, same etag). It is a live coordinator again, to probe and announce to once the
    partition heals, not a file we are still deleting."""
    s = make()
    me, x = s.local, s.addr("X")
    install(s, me, counter=7)
    s.advance(0.01)
    put_file(s, x, [x], counter=4)
    s.advance(6.5)  # silent past stale_after_s, its view older than ours: deleted
    assert file_name(x.uid) not in s.store.list(C)
    put_file(s, x, [x], counter=4)  # X's rendezvous: its own file is gone, written again
    s.advance(1.1)
    s.below.events.clear()
    s.advance(1.0)
    [nonce] = {p.msg.headers[1][1] for p in probes(s)}
    answer(s, x, nonce, view=(x, 4))
    assert ("10.0.0.9", 7000) in s.down_event(DiscoveryTargets())


def test_a_file_of_a_member_of_our_view_is_obsolete_only_when_older_than_our_view():
    """X's file from before it joined our view is obsolete; Y's file of a view newer than
    ours is not: our view is stale (Y left it and leads a partition of its own)."""
    s = make()
    me, x, y = s.local, s.addr("X"), s.addr("Y")
    install(s, me, x, y, counter=7)
    s.advance(0.01)
    put_file(s, x, [x], counter=4)
    put_file(s, y, [y], counter=8)
    s.advance(1.1)  # a rendezvous: list, read both files
    files = s.store.list(C)
    assert file_name(x.uid) not in files and file_name(y.uid) in files
    assert s.layer.stats["files_deleted_merged"] == 1


def test_bootstrap_member_joins_without_store_calls_or_probes():
    first = Address((1).to_bytes(16, "big"), "A")
    s = make()
    s.layer.boot = MembersFile([Entry("A", first.uid, "10.0.0.5", 7800, True),
                                Entry("me", s.local.uid, *OWN)])
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert s.found == [[PingData(first, ("10.0.0.5", 7800), True, True)]]
    assert probes(s) == [] and s.store.calls == {}  # listed: no discovery round at all
    assert s.layer.stats["bootstrap_joins"] == 1
    # a joiner not in the file asks the first coordinator instead (a probe, still no store)
    s.layer.boot = MembersFile([Entry("A", first.uid, "10.0.0.5", 7800, True)])
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert probes(s)[0].phys == ("10.0.0.5", 7800) and s.store.calls == {}
    # the first coordinator itself founds the group at once
    s.layer.boot = MembersFile([Entry("me", s.local.uid, *OWN, True)])
    s.layer.round = None
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert s.found[-1] == [] and s.store.calls == {}


def test_bootstrap_coordinator_does_not_rewrite_its_file_for_listed_joiners():
    """The first coordinator of a bootstrap file reads its file before writing; a joiner
    listed in it that arrives while that read is in flight needs no write either."""
    s = make()
    me, b = s.local, s.addr("B")
    boot = MembersFile([Entry("me", me.uid, *OWN, True), entry(b, 7001)],
                       view_id=(me.uid, 0))
    s.store.put(C, file_name(me.uid), boot.encode())
    s.store.calls.clear()
    s.layer.boot = boot
    s.phys[b] = ("10.0.0.9", 7001)
    install(s, me)
    install(s, me, b, counter=2)  # B joins before the read of our file came back
    s.advance(0.5)
    assert s.store.calls == {"get": 1}
    assert s.layer.stats["files_written"] == 0


def test_malformed_lines_are_counted_and_the_rest_used():
    s = make()
    a = s.addr("A")
    s.store.put(C, file_name(a.uid), f"garbage\nA {a.uuid_hex} 10.0.0.9:7000 T\nB 2 nope F\n".encode())
    s.down_event(FindMembers(s.found.append))
    s.advance(0.01)
    assert s.layer.stats["malformed_lines"] == 2
    assert probes(s)[0].phys == ("10.0.0.9", 7000)


from hypothesis import given, settings, strategies as st  # noqa: E402

scalars = (st.none() | st.booleans() | st.integers(-2, 2 ** 16)
           | st.binary(min_size=15, max_size=17) | st.text(max_size=8))
# nested two deep, without st.recursive (whose leaf limit made replays inconsistent)
values = scalars | st.lists(scalars, max_size=4) | st.lists(st.lists(scalars, max_size=3),
                                                             max_size=3)


@settings(max_examples=300, deadline=None)
@given(values, st.sampled_from([PROBE, PROBE_RSP]), st.lists(values, min_size=3, max_size=8),
       st.integers(0, 3))
def test_garbage_discovery_headers_never_raise(value, typ, fields, nonce):
    """Whatever arrives under the discovery header is handled or counted as malformed."""
    s, a = joining_with_a_file()
    x = s.addr("X")
    for hdr in (value, [typ] + fields, [typ, nonce] + fields[:7]):
        s.up(Message(s.local, b"", CONTROL, {1: hdr}, x))
    s.advance(1.0)
    assert s.layer.stats["callback_errors"] == 0
