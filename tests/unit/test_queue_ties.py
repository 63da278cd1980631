"""The durable queues' even-split tie (stack/workqueue/ties.py): "most" of a list is more
than half, or exactly the half holding its epoch's tie; any two such quorums of one list
intersect; the tie goes to the first half that creates its store object, for good; each
epoch has a tie of its own."""
import itertools
import json

from raygroups.stack.discovery.store import MemoryStore, ScheduledStoreClient
from raygroups.stack.workqueue import ties

L = [b"a" * 16, b"b" * 16, b"c" * 16, b"d" * 16]


def client(store):
    return ScheduledStoreClient(store, lambda _delay, fn: fn())


def test_exactly_half_is_most_only_for_the_half_holding_the_tie():
    h = frozenset(L[:2])
    assert ties.quorum(L, set(L[:3]))                     # more than half: always
    assert not ties.quorum(L, set(L[:2]))                 # half, no tie known: no
    assert ties.quorum(L, set(L[:2]), h)                  # the tie's half
    assert not ties.quorum(L, set(L[2:]), h)              # the other half
    assert not ties.quorum(L, {L[0], L[2]}, h)            # another half
    assert not ties.quorum(L, {L[0]}, h)                  # less than half: never
    assert ties.half(L, {L[0], L[1], b"x" * 16}) == h and ties.half(L, set(L[:3])) is None
    # the holder counts for the first list of a chain only (the one whose epoch is known)
    assert ties.most_of_each([L, L[:3]], set(L[:2]) | {L[2]}, h)
    assert not ties.most_of_each([L[:3], L], set(L[:2]), h)
    assert ties.name(L, 7) == ties.name(L[::-1], 7) != ties.name(L[:3], 7)
    assert ties.name(L, 7) != ties.name(L, 8)  # the same members, another epoch


def test_any_two_quorums_of_a_list_intersect_whatever_half_holds_its_tie():
    for n in range(1, 7):
        members = [bytes([i]) * 16 for i in range(n)]
        subsets = [set(c) for k in range(n + 1) for c in itertools.combinations(members, k)]
        for tie in [None] + [frozenset(c) for c in itertools.combinations(members, n // 2)
                             if 2 * len(c) == n]:
            quorums = [x for x in subsets if ties.quorum(members, x, tie)]
            assert quorums
            assert all(x & y for x, y in itertools.combinations(quorums, 2)), (n, tie)


def test_the_first_half_to_ask_holds_the_tie_for_good():
    store = MemoryStore()
    got = []
    name = ties.name(L, 3)
    mine, theirs = frozenset(L[:2]), frozenset(L[2:])
    for half in (mine, theirs, mine):
        ties.ask(client(store), "g", name, half, lambda t, h: got.append((t, h)))
    assert got == [(name, mine), (name, mine), (name, mine)]
    assert json.loads(store.files("g")[name])["half"] == sorted(m.hex() for m in mine)


def test_a_store_that_fails_or_holds_garbage_gives_no_tie():
    store = MemoryStore()
    got = []
    name = ties.name(L, 3)
    store.unavailable = True
    ties.ask(client(store), "g", name, frozenset(L[:2]), lambda t, h: got.append(h))
    store.unavailable = False
    store.put("g", name, b"not json")
    ties.ask(client(store), "g", name, frozenset(L[:2]), lambda t, h: got.append(h))
    assert got == [None, None]
    assert store.files("g")[name] == "not json"  # never overwritten


def test_durable_queues_count_ties_only_from_a_store_that_outlives_the_group():
    from raygroups.stack import StackConfig
    from raygroups.stack.runtime.workqueue import queue_ties
    tie = {"primary__tie_breaker": "store"}
    assert queue_ties(StackConfig.local(discovery="file:///shared/dir", **tie), True) == \
        (True, None)
    assert queue_ties(StackConfig.local(discovery="s3://bucket/prefix", **tie), True)[0]
    for url in ("ray-kv://", "memory://x"):
        on, why = queue_ties(StackConfig.local(discovery=url, **tie), True)
        assert not on and url in why and "waits for the other half" in why
    assert queue_ties(StackConfig.local(discovery="file:///shared/dir", **tie), False) == \
        (False, None)                                         # not durable
    assert queue_ties(StackConfig.local(discovery="file:///shared/dir"), True) == \
        (False, None)                                         # no tie-breaker


def test_a_replica_remembers_the_newest_ties_and_store_failures_only():
    """Every answer of the store, a tie or a failure, is one entry: a store failing every
    epoch's tie must not grow a replica without bound."""
    from raygroups.stack.address import Address
    from raygroups.stack.workqueue import Replica, WorkQueueConfig
    now = [0.0]
    r = Replica(Address(b"a" * 16, "m0"), WorkQueueConfig(), clock=lambda: now[0], durable=True)
    many = 3 * ties.MAX_KNOWN
    for k in range(many):
        now[0] = float(k)
        r.on_tie(ties.name(L, k), None)
    assert r.stats["tie_errors"] == many
    assert list(r.tie_failed) == [ties.name(L, k) for k in range(many - ties.MAX_KNOWN, many)]
    r.on_tie(ties.name(L, many - ties.MAX_KNOWN), None)       # failed again: now the newest
    assert next(reversed(r.tie_failed)) == ties.name(L, many - ties.MAX_KNOWN)
    for k in range(many):
        r.on_tie(ties.name(L, k), frozenset(L[:2]))           # answered: no longer failed
    assert len(r.ties) == ties.MAX_KNOWN and ties.name(L, many - 1) in r.ties
    assert r.tie_failed == {}                                 # each failure was answered
