"""Rendezvous hashing (integration/rendezvous.py), without Spark: Spark's own xxhash64 (values
computed by Spark 3.5 pinned below), the same owner everywhere (a stable hash, not
``hash()``), and a view change moves only the keys of the members that changed, about 1/N of
them. Keys come from a seeded RNG; the seed is printed. tests/integration/test_spark_stream.py
compares with the JVM's answer on random keys and views."""
import random
import subprocess
import sys
from collections import Counter

from raygroups.integration.rendezvous import moved, owner, owners, weight

SEED = 8081


def _keys(n=20_000):
    print(f"rendezvous keys from seed {SEED}")
    rng = random.Random(SEED)
    return [rng.choice([rng.getrandbits(40), f"cust-{rng.getrandbits(32):x}"])
            for _ in range(n)]


MEMBERS = [f"node-{i}" for i in range(8)]


# Spark 3.5.7: SELECT xxhash64('m-1', <key>) (a long, a string, a binary column; a boolean
# literal; a null long)
SPARK_XXHASH64_M1 = [(1, -877847411405862152), (42, 5294670119533114778),
                     (-7, -8926721674190083989), ("a", 1312872643830458528),
                     ("hello world, a longer string of >32 bytes!!", -709985929470652280),
                     (b"x", 8823514153707627573), (b"", -7409013946591838740),
                     (b"abcdefghi", 8714123096641894531), (True, -5707241460573782414),
                     (None, 7771714450839613231)]


def test_the_weight_is_sparks_xxhash64():
    for key, spark in SPARK_XXHASH64_M1:
        assert weight("m-1", key) == spark, key


def test_the_hash_is_stable_across_processes_and_runs():
    here = owners(["a", 1, b"x", 2.5, None], MEMBERS)
    code = ("from raygroups.integration.rendezvous import owners; "
            f"print(owners(['a', 1, b'x', 2.5, None], {MEMBERS!r}))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345"})
    assert other.stdout.strip() == repr(here)
    assert owner("a", MEMBERS) == owner("a", list(reversed(MEMBERS)))  # order-free


def test_key_types_hash_as_spark_columns_of_their_type():
    # an int is a long, a str its UTF-8 bytes (as a binary column holding them), a bool the
    # int 1 or 0: so 1 and True differ, "1" and b"1" do not, and 1.0 is its IEEE bits
    assert len({weight("m", k) for k in (1, "1", 1.0, True, None)}) == 5
    assert weight("m", "1") == weight("m", b"1")
    assert weight("m", 0.0) == weight("m", -0.0)


def test_keys_spread_evenly():
    counts = Counter(owners(_keys(), MEMBERS))
    assert set(counts) == set(MEMBERS)
    assert max(counts.values()) < 1.25 * min(counts.values())


def test_a_leave_moves_only_the_leavers_keys():
    keys = _keys()
    before = dict(zip(keys, owners(keys, MEMBERS)))
    gone = MEMBERS[3]
    after = [m for m in MEMBERS if m != gone]
    changed = set(moved(keys, MEMBERS, after))
    assert changed == {k for k, o in before.items() if o == gone}
    assert abs(len(changed) / len(keys) - 1 / len(MEMBERS)) < 0.03


def test_a_join_moves_only_the_keys_the_joiner_takes():
    keys = _keys()
    after = MEMBERS + ["node-new"]
    changed = moved(keys, MEMBERS, after)
    assert changed and all(owner(k, after) == "node-new" for k in changed)
    assert abs(len(changed) / len(keys) - 1 / len(after)) < 0.03


def test_several_changes_move_the_keys_of_the_changed_members_only():
    keys = _keys()
    after = [m for m in MEMBERS if m not in ("node-1", "node-6")] + ["node-x"]
    old = dict(zip(keys, owners(keys, MEMBERS)))
    new = dict(zip(keys, owners(keys, after)))
    for k in keys:
        if old[k] != new[k]:
            assert old[k] in ("node-1", "node-6") or new[k] == "node-x"
