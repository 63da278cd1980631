"""The journal (stack/runtime/journal.py) on real files: round trip, group commit, rotation,
compaction, torn and corrupt tails (every cut of the last record, every flipped byte), a
writer killed with SIGKILL mid-stream, another group's files, a full disk (a real 256 KiB
tmpfs, as root), a failed fsync, the backlog bound, one appender and one syncing thread."""
import errno
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib

import pytest

from raygroups.stack.errors import (JournalBacklog, JournalCorrupt, JournalError, JournalFailed,
                                    JournalFull, JournalMismatch, RaygroupsError)
from raygroups.stack.runtime import journal as jmod
from raygroups.stack.runtime.journal import Journal, JournalConfig

from ..tmpfs import small_tmpfs

FAST = JournalConfig(fsync=False)


def payload(n: int, seed: int = 0, big: int = 2000) -> bytes:
    rng = random.Random(f"{seed}/{n}")
    return rng.randbytes(rng.randint(1, big))


def reopen(d, group="g", cfg=FAST):
    j = Journal(d, group, cfg)
    return j, j.open()


def segments(d):
    return sorted(n for n in os.listdir(d) if n.startswith("seg-"))


def fill(d, count, cfg=FAST, group="g", seed=0, every=1):
    j, rec = reopen(d, group, cfg)
    for n in range(rec.last + 1, rec.last + count + 1):
        assert j.append(payload(n, seed)) == n
        if n % every == 0:
            j.sync()
    j.sync()
    j.close()


def test_round_trip_numbers_modes_and_a_second_opener(tmp_path):
    d = tmp_path / "member"
    j, rec = reopen(d, cfg=JournalConfig())
    assert (rec.last, rec.record_count, rec.has_snapshot, rec.dropped_bytes) == (0, 0, False, 0)
    assert list(rec.records()) == [] and rec.snapshot_bytes() is None
    with pytest.raises(JournalError):
        Journal(d, "g").open()      # the directory's lock
    nums = [j.append(payload(n)) for n in range(1, 101)]
    assert nums == list(range(1, 101)) and j.durable == 0
    assert j.sync() == 100 == j.durable
    j.close()
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(d / n).st_mode) == 0o600 for n in os.listdir(d))
    j, rec = reopen(d, cfg=JournalConfig())
    assert (rec.last, rec.record_count, rec.dropped_bytes) == (100, 100, 0)
    assert list(rec.records()) == list(rec.records(verify=True)) == [
        (n, payload(n)) for n in range(1, 101)]
    assert j.append(b"next") == 101
    j.close()   # not synced: not written
    _, rec = reopen(d)
    assert rec.last == 100


def test_group_commit_one_fdatasync_per_sync(tmp_path):
    j, _ = reopen(tmp_path, cfg=JournalConfig(segment_bytes=1 << 20))
    base = j.stats.fsyncs
    for k in (1, 10, 100, 1000):
        for _ in range(k):
            j.append(b"x" * 100)
        j.sync()
    assert j.stats.fsyncs - base == 4 and j.stats.syncs == 4 and j.durable == 1111
    assert j.sync() == 1111 and j.stats.fsyncs - base == 4   # nothing pending: no fsync
    j.close()


def test_rotation_bounds_segments_and_keeps_numbers(tmp_path):
    cfg = JournalConfig(segment_bytes=8192, fsync=False)
    fill(tmp_path, 300, cfg, every=7)
    segs = segments(tmp_path)
    assert len(segs) > 10
    firsts = [int(s[4:24]) for s in segs]
    assert firsts[0] == 1 and firsts == sorted(firsts)
    for s in segs:   # over the bound only by a record that alone does not fit
        assert os.path.getsize(tmp_path / s) <= 8192 + 2000 + 8
    j, rec = reopen(tmp_path, cfg=cfg)
    assert list(rec.records()) == [(n, payload(n)) for n in range(1, 301)]
    j.close()


def test_compaction_keeps_only_what_follows_the_snapshot(tmp_path):
    cfg = JournalConfig(segment_bytes=8192, fsync=False)
    fill(tmp_path, 200, cfg)
    j, rec = reopen(tmp_path, cfg=cfg)
    with pytest.raises(ValueError):
        j.write_snapshot([b"s"], 201)      # beyond durable
    j.write_snapshot(iter([b"state-", b"at-", b"120"]), 120)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("snap-")) == [
        f"snap-{120:020d}.snap"]
    firsts = [int(s[4:24]) for s in segments(tmp_path)]
    assert firsts[0] <= 121 and (len(firsts) == 1 or firsts[1] > 121)   # only wholly <= 120 went
    with pytest.raises(ValueError):
        j.write_snapshot([b"s"], 100)      # older than the last snapshot
    for n in range(201, 251):
        j.append(payload(n))
    j.sync()
    j.write_snapshot([b"x" * 5000] * 3, 240)
    j.close()
    assert len([n for n in os.listdir(tmp_path) if n.startswith("snap-")]) == 1
    j, rec = reopen(tmp_path, cfg=cfg)
    assert (rec.snapshot_upto, rec.last, rec.record_count) == (240, 250, 10)
    assert rec.snapshot_bytes() == b"x" * 15000
    assert list(rec.records()) == [(n, payload(n)) for n in range(241, 251)]
    assert j.append(b"after") == 251
    j.close()


def test_a_snapshot_alone_recovers_and_numbers_go_on_after_it(tmp_path):
    fill(tmp_path, 30)
    j, _ = reopen(tmp_path)
    j.write_snapshot([b"only"], 30)
    j.close()
    for s in segments(tmp_path):
        os.unlink(tmp_path / s)
    j, rec = reopen(tmp_path)
    assert (rec.snapshot_upto, rec.last, rec.snapshot_bytes()) == (30, 30, b"only")
    assert list(rec.records()) == [] and j.append(b"x") == 31 and j.sync() == 31
    j.close()
    _, rec = reopen(tmp_path)
    assert list(rec.records()) == [(31, b"x")]


def test_a_failed_snapshot_leaves_no_file_and_the_journal_usable(tmp_path):
    fill(tmp_path, 10)
    j, _ = reopen(tmp_path)

    def chunks():
        yield b"a"
        raise RuntimeError("producer failed")
    with pytest.raises(RuntimeError):
        j.write_snapshot(chunks(), 5)
    assert not [n for n in os.listdir(tmp_path) if n.startswith("snap-")]
    assert j.append(b"y") == 11 and j.sync() == 11
    j.close()


def _last_record_span(d, count):
    """(path, start, end) of record ``count``'s frame in the last segment."""
    path = d / segments(d)[-1]
    buf = path.read_bytes()
    pos = jmod._header_len(buf)
    first = int(path.name[4:24])
    for n, _, stop in jmod._frames(memoryview(buf), pos, first, len(buf)):
        if n == count:
            return path, pos, stop
        pos = stop
    raise AssertionError("record not found")


def _check_torn(d, keep, dropped):
    j, rec = reopen(d)
    assert (rec.last, rec.dropped_bytes) == (keep, dropped)
    assert list(rec.records()) == [(n, payload(n)) for n in range(1, keep + 1)]
    assert j.append(b"after the tear") == keep + 1 and j.sync() == keep + 1
    j.close()
    j, rec = reopen(d)
    got = list(rec.records())
    assert rec.dropped_bytes == 0 and got[-1] == (keep + 1, b"after the tear")
    assert got[:-1] == [(n, payload(n)) for n in range(1, keep + 1)]
    j.close()


def test_a_torn_tail_at_every_offset_is_dropped_counted_and_appends_go_on(tmp_path):
    src = tmp_path / "src"
    fill(src, 20)
    path, start, end = _last_record_span(src, 20)
    offsets = list(range(start + 1, end))    # start itself: the record simply never began
    for cut in offsets:
        d = tmp_path / f"cut{cut}"
        shutil.copytree(src, d)
        os.truncate(d / path.name, cut)
        _check_torn(d, 19, cut - start)
        shutil.rmtree(d)


def test_a_flipped_byte_anywhere_in_the_tail_record_is_dropped(tmp_path):
    src = tmp_path / "src"
    fill(src, 20)
    path, start, end = _last_record_span(src, 20)
    rng = random.Random(5)
    for off in range(start, end):
        d = tmp_path / f"flip{off}"
        shutil.copytree(src, d)
        with open(d / path.name, "r+b") as f:
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ (1 << rng.randrange(8))]))
        _check_torn(d, 19, end - start)
        shutil.rmtree(d)


def test_a_zeroed_tail_and_a_damaged_earlier_record_of_the_last_segment(tmp_path):
    fill(tmp_path, 20)
    path, start, end = _last_record_span(tmp_path, 20)
    with open(path, "ab") as f:
        f.write(bytes(4096))                  # a zero-filled tail (extent allocated, no data)
    size = os.path.getsize(path)
    _, s15, _ = _last_record_span(tmp_path, 15)
    with open(path, "r+b") as f:
        f.seek(s15 + 12)
        f.write(b"\xff")
    _check_torn(tmp_path, 14, size - s15)


def test_a_zeroed_frame_fails_even_where_its_crc_would_pass(tmp_path):
    # An all-zero frame (crc 0, length 0) passes the CRC check at exactly one record number
    # mod 2^32 (found by solving the CRC's linear map); the refusal of empty records is what
    # drops it there. Files made by hand: a snapshot upto V - 1, then a segment at V.
    v = 1842940573
    assert zlib.crc32(bytes(4), v) == 0
    tail = jmod.U32.pack(jmod.END) + jmod.TRAILER.pack(0, 0)
    (tmp_path / f"snap-{v - 1:020d}.snap").write_bytes(
        jmod._header(jmod.MAGIC_SNAP, b"g", v - 1) + jmod.U32.pack(zlib.crc32(tail)) + tail)
    (tmp_path / f"seg-{v:020d}.log").write_bytes(jmod._header(jmod.MAGIC_SEG, b"g", v) + bytes(64))
    j, rec = reopen(tmp_path)
    assert (rec.snapshot_upto, rec.last, rec.record_count) == (v - 1, v - 1, 0)
    assert rec.dropped_bytes == 64
    assert rec.snapshot_bytes() == b"" and j.append(b"r") == v and j.sync() == v
    j.close()


def test_damage_before_the_last_segment_is_corruption_not_a_tail(tmp_path):
    cfg = JournalConfig(segment_bytes=8192, fsync=False)
    fill(tmp_path, 100, cfg)
    first = tmp_path / segments(tmp_path)[0]
    with open(first, "r+b") as f:
        f.seek(os.path.getsize(first) - 3)
        f.write(b"\x00\x01\x02")
    with pytest.raises(JournalCorrupt):
        reopen(tmp_path, cfg=cfg)
    assert len(segments(tmp_path)) > 1       # nothing was dropped


WRITER = r"""
import random, sys
from raygroups.stack.runtime.journal import Journal, JournalConfig
d, seed = sys.argv[1], int(sys.argv[2])
def payload(n):
    rng = random.Random(f"{seed}/{n}")
    return rng.randbytes(rng.randint(1, 50000))
j = Journal(d, "g", JournalConfig(segment_bytes=1 << 20))
rec = j.open()
print("open", rec.last, rec.dropped_bytes, flush=True)
n = rec.last
rng = random.Random(seed)
while True:
    for _ in range(rng.randint(1, 60)):
        n += 1
        assert j.append(payload(n)) == n
    print("durable", j.sync(), flush=True)
"""


def test_kill_9_during_writes_keeps_every_record_reported_durable(tmp_path):
    seed = 11
    d = tmp_path / "j"
    rng = random.Random(seed)
    reported = 0
    for rnd in range(4):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(d), str(seed)],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().split()
        assert line[0] == "open" and int(line[1]) >= reported, line
        deadline = time.monotonic() + rng.uniform(0.3, 1.0)
        while time.monotonic() < deadline:
            parts = p.stdout.readline().split()
            assert parts and parts[0] == "durable", parts
            reported = max(reported, int(parts[1]))
        os.kill(p.pid, signal.SIGKILL)   # mid-write or mid-sync, wherever it is
        p.wait()
        p.stdout.close()
        j, rec = reopen(d, cfg=JournalConfig())
        got = list(rec.records(verify=True))
        assert rec.last >= reported > 0
        assert [n for n, _ in got] == list(range(1, rec.last + 1))
        random_bytes = lambda n: random.Random(f"{seed}/{n}")  # noqa: E731
        for n, data in got:
            r = random_bytes(n)
            assert data == r.randbytes(r.randint(1, 50000)), n
        j.close()
        reported = rec.last   # the next writer goes on from here


def test_a_journal_of_another_group_is_refused(tmp_path):
    fill(tmp_path / "a", 5, group="orders")
    with pytest.raises(JournalMismatch) as e:
        reopen(tmp_path / "a", group="billing")
    assert isinstance(e.value, RaygroupsError) and "orders" in str(e.value)
    j, _ = reopen(tmp_path / "a", group="orders")
    j.write_snapshot([b"s"], 5)
    j.close()
    for s in segments(tmp_path / "a"):        # only the snapshot says whose it is now
        os.unlink(tmp_path / "a" / s)
    with pytest.raises(JournalMismatch):
        reopen(tmp_path / "a", group="billing")


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KiB tmpfs mounted at tmp_path/disk (root only)."""
    with small_tmpfs(tmp_path / "disk", "256k") as mnt:
        yield mnt


def test_a_full_disk_raises_journal_full_and_reports_nothing_unsynced(small_disk):
    d = small_disk / "member"
    cfg = JournalConfig(segment_bytes=64 << 10)
    j, _ = reopen(d, cfg=cfg)
    durable, n = 0, 0
    with pytest.raises(JournalFull) as e:
        while True:
            for _ in range(7):
                n += 1
                j.append(payload(n, big=3000))
            durable = j.sync()
            assert durable == n
    assert isinstance(e.value, RaygroupsError) and f"durable up to record {durable}" in str(e.value)
    assert j.durable == durable > 0
    with pytest.raises(JournalFull):      # refused until reopened
        j.append(b"more")
    with pytest.raises(JournalFull):
        j.sync()
    assert j.durable == durable
    j.close()
    j, rec = reopen(d, cfg=cfg)           # the disk is still full
    assert rec.last >= durable
    assert list(rec.records(verify=True)) == [(k, payload(k, big=3000))
                                              for k in range(1, rec.last + 1)]
    with pytest.raises(JournalFull):      # a snapshot that cannot fit: no .tmp left, usable
        j.write_snapshot([b"z" * 65536] * 8, rec.last)
    assert not [f for f in os.listdir(d) if f.endswith(".tmp") or f.startswith("snap-")]
    j.close()


def test_a_failed_fsync_is_not_retried_the_journal_refuses_until_reopened(tmp_path, monkeypatch):
    # os.fdatasync made to fail: the contract after a failed fsync (a real EIO needs a
    # failing device; the full disk above goes through the same path on a real write)
    j, _ = reopen(tmp_path, cfg=JournalConfig())
    j.append(b"a")
    assert j.sync() == 1

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(jmod.os, "fdatasync", eio)
    j.append(b"b")
    with pytest.raises(JournalFailed):
        j.sync()
    monkeypatch.undo()
    assert j.durable == 1
    with pytest.raises(JournalFailed):
        j.append(b"c")
    with pytest.raises(JournalFailed):
        j.sync()
    j.close()
    rec = j.open()                        # the same object, reopened: usable again
    assert rec.last >= 1 and j.append(b"d") == rec.last + 1 and j.sync() == rec.last + 1
    j.close()


def test_memory_is_bounded_by_max_unsynced_bytes(tmp_path):
    cfg = JournalConfig(max_unsynced_bytes=10_000, max_record_bytes=5_000, fsync=False)
    j, _ = reopen(tmp_path, cfg=cfg)
    j.append(b"x" * 4000)
    j.append(b"x" * 4000)
    with pytest.raises(JournalBacklog):
        j.append(b"x" * 4000)
    with pytest.raises(ValueError):
        j.append(b"x" * 5001)
    with pytest.raises(ValueError):
        j.append(b"")
    assert j.sync() == 2 and j.unsynced_bytes == 0
    assert j.append(b"x" * 4000) == 3
    j.close()


def test_one_appender_thread_and_one_syncing_thread(tmp_path):
    cfg = JournalConfig(segment_bytes=16384, fsync=False)
    j, _ = reopen(tmp_path, cfg=cfg)
    total, done, seen = 3000, threading.Event(), []

    def syncer():
        while not done.is_set():
            seen.append(j.sync())
        seen.append(j.sync())
    t = threading.Thread(target=syncer)
    t.start()
    for n in range(1, total + 1):
        while True:
            try:
                assert j.append(payload(n, big=300)) == n
                break
            except JournalBacklog:
                time.sleep(0.001)
    done.set()
    t.join()
    assert seen == sorted(seen) and seen[-1] == total == j.durable
    j.close()
    j, rec = reopen(tmp_path, cfg=cfg)
    assert list(rec.records()) == [(n, payload(n, big=300)) for n in range(1, total + 1)]
    j.close()
