"""Store discovery in the simulator (seed 000), with the simulated store (``sim.store``: a
MemoryStore with conditional writes, per-call latency and an outage switch; every member's
calls counted in ``member.store.calls``).

Campaigns: joins cost at most 2 store reads and the coordinator 1 write; a coordinator change
moves the file (graceful leave: the old one deletes its own; crash: the stale file is removed);
a partition leaves one file per coordinator and the rendezvous merges them into one view and
one file although both sides declared each other dead; a 10 s store outage mid-run never
stops the group and the file catches up; a file left by a whole group killed is removed;
concurrent joins (and a hand edit racing them) never lose a member line; a bootstrap file
starts members with their seeded UUIDs and no discovery round."""
import functools

import pytest

from raygroups.stack import StackConfig
from raygroups.stack.discovery import Entry, MembersFile
from raygroups.stack.discovery.members_file import file_name
from raygroups.stack.sim import Simulation, SimOptions

CLUSTER = "g"
STALE = 5.0


def config(**kw):
    opts = dict(discovery="memory://sim", store__stale_after_s=STALE,
                store__rendezvous_interval_s=1.0)
    opts.update(kw)
    return StackConfig.local(**opts)


def files(sim) -> dict:
    return {n: _parse(n, t) for n, t in sim.store.files(CLUSTER).items()}


@functools.lru_cache(maxsize=1024)
def _parse(name: str, text: str) -> MembersFile:
    """A file's text parsed once: the checks read the store at every step of a run, and the
    same few texts over and over (parsing them again took a third of these tests' time)."""
    return MembersFile.parse(text, source=name)


def live(members):
    return [m for m in members if m.alive]


def one_view(members):
    ms = live(members)
    if not ms or any(m.view is None for m in ms):
        return False
    uids = {m.address.uid for m in ms}
    return len({m.view.view_id for m in ms}) == 1 and \
        all({a.uid for a in m.view.members} == uids for m in ms)


def one_file_listing(sim, members, extra=()):
    """Exactly one file, named after the coordinator, marking it T, listing every live member
    (with its address) and the ``extra`` uids."""
    fs = files(sim)
    ms = live(members)
    if len(fs) != 1 or not one_view(ms):
        return False
    coord = ms[0].view.members[0]
    name, mf = next(iter(fs.items()))
    if name != file_name(coord.uid) or mf.coordinator is None or mf.coordinator.uid != coord.uid:
        return False
    listed = mf.by_uid()
    for m in ms:
        e = listed.get(m.address.uid)
        if e is None or e.phys != m.local_phys or e.name != m.name:
            return False
    return all(u in listed for u in extra)


def reads(m) -> int:
    return m.store.calls["list"] + m.store.calls["get"]


def start_group(sim, n, cfg=None):
    cfg = cfg or config()
    first = sim.add_member(CLUSTER, "m0", cfg)
    sim.run_until(lambda: first.view is not None and files(sim), 10, "founding")
    members = [first]
    for i in range(1, n):
        members.append(sim.add_member(CLUSTER, f"m{i}", cfg))
        sim.run_until(lambda: one_view(members), 30, f"m{i} joined")
    sim.run_until(lambda: one_file_listing(sim, members), 10, "file lists everyone")
    return members


def traffic(sim, members, seconds, counts):
    for _ in range(int(seconds / 0.05)):
        for m in live(members):
            if m.view is not None and m.address in m.view and m.writable \
                    and m.stack.layer("gms").state.value == "member":
                counts[m.address.uid] = counts.get(m.address.uid, 0) + 1
                m.send(m.address.uid + counts[m.address.uid].to_bytes(4, "big"))
        sim.run_for(0.05)


def check_no_errors(sim):
    for m in sim.members:
        if m.stack is not None:
            assert m.stack.errors == 0, f"{m.name}: stack errors; seed {sim.seed}"
            assert m.stack.layer("discovery").stats["callback_errors"] == 0


def sim_for(seed, loss=0.0, buggify=True):
    """BUGGIFY on, but in the tests that count store calls (a perturbation may cost a
    discovery round more, as a lost packet may)."""
    sim = Simulation(seed, buggify=buggify)
    sim.options = SimOptions(loss=loss, delay_s=(0.0005, 0.003),
                             store_delay_s=(0.001, sim.rng.choice([0.005, 0.05])))
    return sim


@pytest.mark.seeds(100)
def test_joins_cost_two_reads_and_one_write(sim_seed):
    sim = sim_for(sim_seed, buggify=False)
    first = sim.add_member(CLUSTER, "m0", config())
    sim.run_until(lambda: first.view is not None and files(sim), 10, "founding")
    # no file: the first member lists twice (GMS's two empty rounds), founds, writes its file
    assert reads(first) == 2 and first.store.calls["put"] == 1, first.store.calls
    assert list(files(sim)) == [file_name(first.address.uid)]
    members = [first]
    for i in range(1, sim.rng.randint(3, 10)):
        coord = members[0]
        puts = coord.store.calls["put"]
        m = sim.add_member(CLUSTER, f"m{i}", config())
        members.append(m)
        sim.run_until(lambda: one_file_listing(sim, members), 30, f"m{i} joined and written")
        assert dict(m.store.calls) == {"list": 1, "get": 1}, (m.name, m.store.calls, sim_seed)
        assert coord.store.calls["put"] - puts == 1, (coord.store.calls, sim_seed)
        assert m.stack.layer("discovery").stats["probes_sent"] >= 1
    check_no_errors(sim)


@pytest.mark.seeds(20)
def test_a_joiner_cut_off_from_the_files_coordinator_for_a_while_still_joins_it(sim_seed):
    """Everything between the joiner and the coordinator its file names is lost for longer
    than GMS's empty rounds (2 x the probe timeout), then flows again: the joiner keeps
    probing for ``coordinator_wait_s`` and joins; it does not found a group beside the file
    (which, with the rendezvous off, would never merge)."""
    sim = sim_for(sim_seed, buggify=False)
    cfg = config(store__rendezvous_interval_s=3600.0)
    first = sim.add_member(CLUSTER, "m0", cfg)
    sim.run_until(lambda: first.view is not None and files(sim), 10, "founding")
    joiner = sim.add_member(CLUSTER, "m1", cfg)
    sim.cut(first, joiner)
    probe = joiner.stack.layer("discovery").config.probe_timeout_s
    # past two rounds and their store calls; within coordinator_wait_s (1 s) and a round
    sim.run_for(sim.rng.uniform(3 * probe + 0.05, 1.0 - 2 * probe))
    assert joiner.view is None, (joiner.view, sim_seed)
    sim.heal()
    sim.run_until(lambda: one_view([first, joiner]), 10, "m1 joined m0's group")
    assert list(files(sim)) == [file_name(first.address.uid)]
    check_no_errors(sim)


@pytest.mark.seeds(100)
@pytest.mark.regressions(13200041,  # the next coordinator had founded alone (a put) before
                         14400116)  # the coordinator was not the first member started
def test_coordinator_change_moves_the_file(sim_seed):
    sim = sim_for(sim_seed, loss=sim_seed % 3 * 0.02)
    members = start_group(sim, sim.rng.randint(3, 7))
    # in view order: the coordinator is not always the first started (a member that founded
    # alone and merged in may lead the merged view; seed 14400116)
    by_uid = {m.address.uid: m for m in members}
    members = [by_uid[a.uid] for a in members[0].view.members]
    old = members[0]
    old_file = file_name(old.address.uid)
    graceful = sim.rng.random() < 0.5
    # puts the next coordinator made before the change (a member that founded alone before
    # it merged in wrote its own file then)
    puts_before = members[1].store.calls["put"]
    if graceful:
        old.leave()
    else:
        sim.crash(old)
    rest = members[1:]
    sim.run_until(lambda: one_view(rest), 30, "survivors agree")
    new = rest[0].view.members[0]
    sim.run_until(lambda: file_name(new.uid) in files(sim), 10, "the new coordinator's file")
    if graceful:  # the old coordinator deleted its own file on its way out
        sim.run_until(lambda: old_file not in files(sim), 2, "old file deleted by its owner")
    else:  # kill -9: silent coordinator, older view id -> stale, removed
        assert old_file in files(sim)
        sim.run_until(lambda: old_file not in files(sim), 3 * STALE, "stale file removed")
        assert rest[0].stack.layer("discovery").stats["files_deleted_stale"] + sum(
            m.stack.layer("discovery").stats["files_deleted_stale"] for m in rest[1:]) == 1
    sim.run_until(lambda: one_file_listing(sim, rest), 10, "one file")
    # a member that leaves is not written out: the new file was written once
    assert new == rest[0].address, (new, rest[0].address)
    assert rest[0].store.calls["put"] - puts_before == 1, (rest[0].store.calls, puts_before)
    check_no_errors(sim)


@pytest.mark.seeds(30)
@pytest.mark.regressions(16650099)  # a loss burst as long as two probe rounds split m1 off
def test_a_coordinator_that_leaves_during_its_files_write_still_deletes_it(sim_seed):
    """The coordinator leaves while a write of its file (a joiner's line) is in flight on a
    slow store: its delete waits for that write, whose result comes after its stack
    stopped; the delete must still go (it was dropped: CI saw the founder's file stay)."""
    sim = sim_for(sim_seed)
    members = start_group(sim, 3, config(store__rendezvous_interval_s=3600.0))
    old = members[0]
    sim.options.store_delay_s = (0.3, 0.3)  # every store call from now on is slow
    puts = old.store.calls["put"]
    members.append(sim.add_member(CLUSTER, "m3", config(store__rendezvous_interval_s=3600.0)))
    sim.run_until(lambda: old.store.calls["put"] > puts, 10, "the coordinator writes the joiner")
    old.leave()
    sim.run_until(lambda: not old.alive, 1, "the coordinator left, its stack stopped")
    sim.run_until(lambda: file_name(old.address.uid) not in files(sim), 2,
                  "its file deleted once the write ended")
    sim.run_until(lambda: one_file_listing(sim, members[1:]), 10, "one file")
    check_no_errors(sim)


@pytest.mark.seeds(100)
def test_partition_two_files_then_merge_to_one(sim_seed):
    sim = sim_for(sim_seed, loss=sim_seed % 2 * 0.02)
    members = start_group(sim, sim.rng.randint(4, 9), config(store__stale_after_s=60.0))
    shuffled = members[:]
    sim.rng.shuffle(shuffled)
    cut = sim.rng.randint(1, len(members) - 1)
    side_a, side_b = shuffled[:cut], shuffled[cut:]
    sim.partition(side_a, side_b)
    sim.run_until(lambda: one_view(side_a) and one_view(side_b), 30, "two partitions")
    coords = {s[0].view.members[0] for s in (side_a, side_b)}
    sim.run_until(lambda: set(files(sim)) == {file_name(c.uid) for c in coords}, 10,
                  "one file per coordinator")
    for side in (side_a, side_b):  # each file names its coordinator and lists its side
        c = side[0].view.members[0]
        mf = files(sim)[file_name(c.uid)]
        assert mf.coordinator.uid == c.uid
        assert {m.address.uid for m in side} <= set(mf.by_uid())
    sim.run_for(sim.rng.uniform(0.5, 3.0))
    sim.heal()
    # neither side multicasts to the other: only the files tell them about each other
    sim.run_until(lambda: one_view(members), 30, "merged")
    sim.run_until(lambda: one_file_listing(sim, members), 10, "one file after the merge")
    merged = sum(m.stack.layer("discovery").stats["merge_infos"] for m in members)
    assert merged > 0
    check_no_errors(sim)


@pytest.mark.seeds(40)
@pytest.mark.regressions(900021)  # a live coordinator's file deleted from a stale view
def test_joiner_that_finds_several_files_joins_one_of_their_coordinators(sim_seed):
    sim = sim_for(sim_seed, buggify=False)
    cfg = config(store__stale_after_s=60.0)
    members = start_group(sim, sim.rng.randint(3, 6), cfg)
    cut = sim.rng.randint(1, len(members) - 1)
    side_a, side_b = members[:cut], members[cut:]
    for a in side_a:  # the two sides cannot talk; a newcomer reaches both
        for b in side_b:
            sim.cut(a, b)
    sim.run_until(lambda: one_view(side_a) and one_view(side_b), 30, "two partitions")
    coords = {s[0].view.members[0] for s in (side_a, side_b)}
    sim.run_until(lambda: set(files(sim)) == {file_name(c.uid) for c in coords}, 10,
                  "one file per coordinator")
    j = sim.add_member(CLUSTER, "new", cfg)
    sides = {s[0].view.members[0]: s for s in (side_a, side_b)}
    sim.run_until(lambda: j.view is not None and j.view.members[0] in sides
                  and one_view(sides[j.view.members[0]] + [j]), 30, "joined one side")
    # it read the listing and one of the files (2 reads, like any join), then joined that
    # file's coordinator; the other side does not know it
    assert dict(j.store.calls) == {"list": 1, "get": 1}, (j.store.calls, sim_seed)
    other = side_b if sides[j.view.members[0]] is side_a else side_a
    print(f"seed {sim_seed}: joined side {'a' if other is side_b else 'b'}")
    assert all(j.address not in m.view for m in other)
    sim.heal()
    everyone = members + [j]
    sim.run_until(lambda: one_view(everyone), 30, "merged")
    sim.run_until(lambda: one_file_listing(sim, everyone), 10, "one file after the merge")
    check_no_errors(sim)


@pytest.mark.seeds(100)
def test_store_outage_never_stops_the_group_and_the_file_catches_up(sim_seed):
    sim = sim_for(sim_seed)
    cfg = config(store__store_wait_s=30.0)
    members = start_group(sim, sim.rng.randint(3, 7), cfg)
    counts = {}
    traffic(sim, members, 0.5, counts)
    sim.store.unavailable = True
    outage_ends = sim.now + 10.0
    what = sim.rng.choice(["crash-coord", "leave-coord", "join", "crash-member"])
    if what == "crash-coord":
        sim.crash(members[0])
    elif what == "leave-coord":
        members[0].leave()
    elif what == "crash-member":
        sim.crash(sim.rng.choice(members[1:]))
    else:
        members.append(sim.add_member(CLUSTER, "late", cfg))
    originals = [m for m in members if m.alive and m.name != "late"
                 and not (what == "leave-coord" and m is members[0])]
    before = {m.name: len(m.views) for m in originals}
    traffic(sim, live(members), 8.0, counts)
    if what != "join":  # views change and messages flow without the store
        assert one_view(originals), [m.view for m in originals]
        assert all(len(m.views) > before[m.name] for m in originals)
    sim.run_for(outage_ends - sim.now)
    sim.store.unavailable = False
    traffic(sim, live(members), 1.0, counts)
    group = [m for m in members if m.alive and m.left is None]
    sim.run_until(lambda: one_view(group), 30, "one view after the outage")
    sim.run_until(lambda: one_file_listing(sim, group), 4 * STALE, "the file caught up")

    def got(m):
        out = {}
        for msg in m.delivered:
            out[msg.payload[:16]] = out.get(msg.payload[:16], 0) + 1
        return out
    # every message of the members that stayed reaches the others (the last ones may still
    # be in flight, or wait behind a stalled member), once
    sim.run_until(lambda: all(got(m).get(s.address.uid, 0) >= counts[s.address.uid]
                              for m in originals for s in originals), 30, "all delivered")
    for m in originals:
        for s in originals:
            assert got(m).get(s.address.uid, 0) == counts[s.address.uid], (m.name, s.name)
    errs = sum(m.stack.layer("discovery").stats["store_errors"] for m in members)
    assert errs > 0 or what == "crash-member"
    check_no_errors(sim)


@pytest.mark.seeds(100)
@pytest.mark.regressions(16070392)  # the group's coordinator was not its founder
def test_file_of_a_killed_group_is_removed(sim_seed):
    sim = sim_for(sim_seed)
    old = start_group(sim, sim.rng.randint(2, 5))
    # the file is named after the group's coordinator, not always the founder (16070392)
    stale_name = file_name(old[0].view.coordinator.uid)
    for m in old:
        sim.crash(m)
    sim.run_for(sim.rng.uniform(0, 2))
    new = sim.add_member(CLUSTER, "n0", config())
    # it reads the file, the coordinator does not answer: it founds a new group
    sim.run_until(lambda: new.view is not None and file_name(new.address.uid) in files(sim),
                  10, "founding next to a stale file")
    assert stale_name in files(sim)
    sim.run_until(lambda: stale_name not in files(sim), 4 * STALE + 5, "stale file removed")
    more = [new] + [sim.add_member(CLUSTER, f"n{i}", config()) for i in range(1, 3)]
    sim.run_until(lambda: one_file_listing(sim, more), 30, "the new group's file")
    check_no_errors(sim)


@pytest.mark.seeds(100)
def test_concurrent_joins_never_lose_a_member_line(sim_seed):
    sim = sim_for(sim_seed, loss=sim_seed % 2 * 0.01)
    rng = sim.rng
    cold = rng.random() < 0.3  # everybody at once on an empty store: founders, then merges
    members = [] if cold else start_group(sim, 1)
    hand = Entry("Z", (999).to_bytes(16, "big"), "10.9.9.9", 7800)
    k = rng.randint(4, 12)
    for i in range(k):
        members.append(sim.add_member(CLUSTER, f"j{i}", config()))
        sim.run_for(rng.uniform(0, 0.002))
    edited = False
    if not cold:  # a person adds a line while the coordinator rewrites the file
        sim.run_for(rng.uniform(0.0, 0.05))
        name, mf = next(iter(files(sim).items()))
        sim.store.put(CLUSTER, name, MembersFile(mf.entries + [hand], view_id=mf.view_id).encode())
        edited = True
    sim.run_until(lambda: one_view(members), 60, "everybody joined")
    extra = [hand.uid] if edited else []
    sim.run_until(lambda: one_file_listing(sim, members, extra), 30, "every line in the file")
    coord = members[0].view.members[0]
    mf = files(sim)[file_name(coord.uid)]
    assert len(mf) == len(members) + len(extra)
    check_no_errors(sim)


@pytest.mark.seeds(50)
def test_bootstrap_file_starts_members_without_discovery(sim_seed):
    sim = sim_for(sim_seed, buggify=False)
    n = sim.rng.randint(3, 8)
    # the file a person (or ``generate_bootstrap``) wrote: names, seeded UUIDs 1..n, addresses
    probe = [sim.add_member(CLUSTER, f"b{i}", start=False) for i in range(n)]
    boot = MembersFile([Entry(m.name, (i + 1).to_bytes(16, "big"), *m.local_phys, i == 0)
                        for i, m in enumerate(probe)])
    cfg = config(bootstrap=boot)
    for m in probe:
        m.config = cfg
    for m in probe:  # started in file order
        m._boot()
        sim.run_for(sim.rng.uniform(0, 0.01))
    sim.run_until(lambda: one_view(probe), 30, "bootstrap group")
    assert probe[0].view.members[0].uid == (1).to_bytes(16, "big")  # the first coordinator
    assert sorted(int.from_bytes(a.uid, "big") for a in probe[0].view.members) == \
        list(range(1, n + 1))
    for m in probe[1:]:  # no discovery round: no store read, no probe
        assert reads(m) == 0 and m.stack.layer("discovery").stats["probes_sent"] == 0
    sim.run_until(lambda: one_file_listing(sim, probe), 10, "1.list")
    assert list(files(sim)) == ["1.list"]
    # a restart takes a fresh random UUID and joins through the store
    victim = probe[-1]
    sim.restart(victim)
    sim.run_until(lambda: one_view(probe), 30, "rejoined")
    assert int.from_bytes(victim.address.uid, "big") > 1 << 32
    sim.run_until(lambda: one_file_listing(sim, probe), 10, "file lists the new incarnation")
    check_no_errors(sim)
