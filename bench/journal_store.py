"""Which store for the durable queue's journal: our own segment log, SQLite in WAL mode, or
LMDB, measured on this machine's disk doing the same thing.

One writer appends records of 100 B and 1 KB in batches of 1, 10, 100 and 1000 records, one
durable commit per batch (group commit):

* journal: stack/runtime/journal.py (``append`` each record, then ``sync()``: one
  fdatasync per batch; CRC-32 framed records in 64 MiB segments);
* sqlite: the standard library's sqlite3, ``journal_mode=WAL``, ``synchronous=FULL``, a
  table ``(n INTEGER PRIMARY KEY, data BLOB)``, one transaction (executemany) per batch;
* lmdb: the ``lmdb`` package (if installed), one write transaction per batch
  (``putmulti(append=True)``, 8-byte big-endian keys), ``sync=True``.

For each cell it prints records/s, MB/s (payload) and fsyncs per record. The fsyncs are
counted by strace (fsync, fdatasync, msync, sync_file_range, syncfs; children followed) in a
separate run of the same workload, less a run that only opens and closes the store. Then
recovery: 1,000,000 records of 100 B written (batches of 1000), closed, the files' pages
dropped from the page cache (fsync + POSIX_FADV_DONTNEED on each file: nothing global),
then open + read every record (cold), and once more (warm). Ratios are journal / peer,
measured in the same run.

Targets (the journal's user is the replicated queue, 43,913 msg/s active-passive and
54,095 msg/s active-active in README.md; a record is one applied batch of commands, so one
record per message bounds it from above): >= 55,000 records/s of 100 B with 1000 records
per fsync, and recovery of 1,000,000 records in <= 5 s from a cold page cache. At 100 records
per fsync every store is bound by the disk's fsync latency (printed first: the bare
write + fdatasync of 108 bytes), not by its own cost; group commit makes the batches as
large as the load while one sync runs (55,000/s x 3.6 ms = 200 records), so the batch of
1000 measures what the store itself adds.

    python bench/journal_store.py            # about 2-3 minutes
    python bench/journal_store.py --quick    # about a minute: 0.5 s cells, 200,000 to recover
    python bench/journal_store.py --dir /mnt/disk --seed 7
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

from raygroups.stack.runtime.journal import Journal, JournalConfig

try:
    import lmdb
except ImportError:            # reported in the output
    lmdb = None

SIZES = (100, 1024)
BATCHES = (1, 10, 100, 1000)
TARGET_RATE = 55_000           # records/s of 100 B at batch 1000
TARGET_RECOVERY_S = 5.0        # 1,000,000 records, cold
KEY = struct.Struct(">Q")
SYNC_CALLS = ("fsync", "fdatasync", "msync", "sync_file_range", "syncfs")


class JournalStore:
    name = "journal"

    def __init__(self, d):
        self.j = Journal(d, "bench", JournalConfig())
        self.j.open()

    def append_batch(self, recs):
        append = self.j.append
        for r in recs:
            append(r)
        self.j.sync()

    def close(self):
        self.j.close()

    @staticmethod
    def recover(d):
        j = Journal(d, "bench", JournalConfig())
        n = sum(1 for _ in j.open().records())
        j.close()
        return n


class SqliteStore:
    name = "sqlite"

    def __init__(self, d):
        self.con = self._connect(d)
        self.con.execute("CREATE TABLE IF NOT EXISTS r (n INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        self.n = 0

    @staticmethod
    def _connect(d):
        con = sqlite3.connect(os.path.join(d, "journal.db"), isolation_level=None)
        assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        con.execute("PRAGMA synchronous=FULL")
        return con

    def append_batch(self, recs):
        n = self.n
        self.con.execute("BEGIN")
        self.con.executemany("INSERT INTO r (n, data) VALUES (?, ?)",
                             [(n + i + 1, r) for i, r in enumerate(recs)])
        self.con.execute("COMMIT")
        self.n = n + len(recs)

    def close(self):
        self.con.close()

    @classmethod
    def recover(cls, d):
        con = cls._connect(d)
        n = sum(1 for _ in con.execute("SELECT n, data FROM r ORDER BY n"))
        con.close()
        return n


class LmdbStore:
    name = "lmdb"

    def __init__(self, d):
        self.env = lmdb.open(d, map_size=16 << 30, sync=True, metasync=True)
        self.n = 0

    def append_batch(self, recs):
        n = self.n
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti([(KEY.pack(n + i + 1), r) for i, r in enumerate(recs)],
                                  append=True)
        self.n = n + len(recs)

    def close(self):
        self.env.close()

    @staticmethod
    def recover(d):
        env = lmdb.open(d, map_size=16 << 30, sync=True, metasync=True)
        with env.begin() as txn:
            n = sum(1 for _ in txn.cursor())
        env.close()
        return n


STORES = {"journal": JournalStore, "sqlite": SqliteStore, "lmdb": LmdbStore}


def pool(seed: int, size: int, count: int = 1024):
    rng = random.Random(f"{seed}/{size}")
    return [rng.randbytes(size) for _ in range(count)]


def batches(recs, batch):
    assert batch <= len(recs)
    i, n = 0, len(recs)
    while True:
        if i + batch > n:
            i = 0
        yield recs[i:i + batch]
        i += batch


def filesystem(path: str) -> str:
    path = os.path.realpath(path)
    best = ("?", "?", "/", "")
    with open("/proc/mounts") as f:
        for line in f:
            src, mnt, fstype, opts = line.split()[:4]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[2]):
                best = (fstype, src, mnt, opts)
    return f"{best[0]} ({best[1]} on {best[2]}, {best[3]})"


def drop_cache(d: str) -> None:
    """Drop these files' pages (clean after the fsync) from the page cache."""
    for root, _, files in os.walk(d):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def run_cell(store_cls, base, recs, batch, seconds):
    d = tempfile.mkdtemp(prefix=f"{store_cls.name}-", dir=base)
    try:
        s = store_cls(d)
        gen = batches(recs, batch)
        n = nb = 0
        t0 = time.perf_counter()
        while True:
            b = next(gen)
            s.append_batch(b)
            n += len(b)
            nb += 1
            el = time.perf_counter() - t0
            if el >= seconds and nb >= 3:
                break
        s.close()
        return n, el
    finally:
        shutil.rmtree(d, ignore_errors=True)


def child(name, size, batch, nbatch, d, seed):
    """Under strace: open, append nbatch batches, close."""
    s = STORES[name](d)
    gen = batches(pool(seed, size), batch)
    for _ in range(nbatch):
        s.append_batch(next(gen))
    s.close()


def count_syncs(name, size, batch, nbatch, base, seed):
    d = tempfile.mkdtemp(prefix=f"strace-{name}-", dir=base)
    out = os.path.join(d, "strace.txt")
    try:
        os.mkdir(os.path.join(d, "s"))
        subprocess.run(["strace", "-f", "-qq", "-c", "-o", out, "-e",
                        "trace=" + ",".join(SYNC_CALLS), sys.executable, os.path.abspath(__file__),
                        "--child", name, str(size), str(batch), str(nbatch),
                        os.path.join(d, "s"), str(seed)], check=True)
        calls = 0
        with open(out) as f:
            for line in f:
                cols = line.split()
                if cols and cols[-1] in SYNC_CALLS:
                    calls += int(cols[3])
        return calls
    finally:
        shutil.rmtree(d, ignore_errors=True)


def recovery(store_cls, base, recs, total):
    d = tempfile.mkdtemp(prefix=f"recover-{store_cls.name}-", dir=base)
    try:
        s = store_cls(d)
        gen = batches(recs, 1000)
        t0 = time.perf_counter()
        n = 0
        while n < total:
            b = next(gen)[:total - n]
            s.append_batch(b)
            n += len(b)
        s.close()
        write_s = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
        drop_cache(d)
        t0 = time.perf_counter()
        got = store_cls.recover(d)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        got2 = store_cls.recover(d)
        warm = time.perf_counter() - t0
        assert got == got2 == total, (store_cls.name, got, got2, total)
        return write_s, size, cold, warm
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fsync_latency(base, count=100):
    """The bare cost of the disk: write 108 bytes and fdatasync, ``count`` times (ms each)."""
    path = os.path.join(base, "probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t0 = time.perf_counter()
        for _ in range(count):
            os.write(fd, bytes(108))
            os.fdatasync(fd)
        return (time.perf_counter() - t0) / count * 1e3
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/var/tmp", help="where the stores' temp dirs go (a disk)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=1.5, help="per throughput cell")
    ap.add_argument("--recover", type=int, default=1_000_000, help="records to recover")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="record sizes in bytes, comma-separated (default 100,1024)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-strace", action="store_true", help="skip the fsync counts")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        name, size, batch, nbatch, d, seed = a.child
        child(name, int(size), int(batch), int(nbatch), d, int(seed))
        return
    if a.quick:
        a.seconds, a.recover = 0.5, min(a.recover, 200_000)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    names = ["journal", "sqlite"] + (["lmdb"] if lmdb is not None else [])
    base = tempfile.mkdtemp(prefix="journal_store-", dir=a.dir)
    strace = shutil.which("strace") is not None and not a.no_strace
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=os.path.dirname(os.path.abspath(__file__))
                                ).stdout.strip() or "?"
    except OSError:
        commit = "?"
    print(f"journal_store: seed {seed}  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  commit {commit}  "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"directory {base}: {filesystem(base)}; write + fdatasync of 108 B: "
          f"{fsync_latency(base):.2f} ms")
    print(f"sqlite {sqlite3.sqlite_version} (WAL, synchronous=FULL); "
          + (f"lmdb {'.'.join(map(str, lmdb.version()))} (py-lmdb {lmdb.__version__})"
             if lmdb is not None else "lmdb: the lmdb package is not installed here; skipped"))
    print(f"each cell {a.seconds:g} s; fsyncs/record "
          + ("by strace over a separate run, less open+close" if strace else "not counted"))
    results = {}
    try:
        setup = {}
        if strace:
            for name in names:
                setup[name] = count_syncs(name, 100, 1, 0, base, seed)
        for size in map(int, a.sizes.split(",")):
            recs = pool(seed, size)
            print(f"\n{size} B records")
            head = f"{'batch':>6} " + "".join(f"| {n:>8} rec/s {'MB/s':>6} {'fs/rec':>6} "
                                              for n in names)
            head += "| " + "  ".join(f"j/{n[:2]}" for n in names[1:])
            print(head)
            for batch in BATCHES:
                row = f"{batch:>6} "
                for name in names:
                    n, el = run_cell(STORES[name], base, recs, batch, a.seconds)
                    rate = n / el
                    fs = float("nan")
                    if strace and (not a.quick or batch in (1, 100)):
                        nb = max(3, min(50 if batch >= 1000 else 200, (64 << 20) // (batch * size)))
                        calls = count_syncs(name, size, batch, nb, base, seed)
                        fs = (calls - setup[name]) / (nb * batch)
                    results[(name, size, batch)] = (rate, fs)
                    row += f"| {rate:>14,.0f} {rate * size / 1e6:>6.1f} {fs:>6.3f} "
                jr = results[("journal", size, batch)][0]
                row += "| " + "  ".join(f"{jr / results[(n, size, batch)][0]:>4.2f}x"
                                        for n in names[1:])
                print(row, flush=True)
        print(f"\nrecovery: {a.recover:,} records of 100 B written in batches of 1000, closed, "
              f"page cache dropped for the files; open + read every record")
        print(f"{'store':>8} {'write s':>8} {'rec/s':>10} {'on disk':>9} {'cold s':>7} "
              f"{'warm s':>7}")
        recs = pool(seed, 100)
        for name in names:
            w, size, cold, warm = recovery(STORES[name], base, recs, a.recover)
            results[(name, "recover")] = (w, cold, warm)
            print(f"{name:>8} {w:>8.2f} {a.recover / w:>10,.0f} {size / 2**20:>7.1f}Mi "
                  f"{cold:>7.2f} {warm:>7.2f}", flush=True)
        jw, jc, jwarm = results[("journal", "recover")]
        for name in names[1:]:
            w, c, wm = results[(name, "recover")]
            print(f"journal / {name}: recovery cold {jc / c:.2f}x the time, warm "
                  f"{jwarm / wm:.2f}x; writing {jw / w:.2f}x the time")
        print(f"\ntargets: >= {TARGET_RATE:,} records/s of 100 B at batch 1000; recovery of "
              f"1,000,000 records <= {TARGET_RECOVERY_S:g} s cold"
              + ("" if a.recover == 1_000_000 else f" (scaled to {a.recover:,}: "
                 f"<= {TARGET_RECOVERY_S * a.recover / 1e6:.2g} s)"))
        for name in names:
            rate = results.get((name, 100, 1000), (float("nan"),))[0]
            cold = results[(name, "recover")][1]
            ok = rate >= TARGET_RATE and cold <= TARGET_RECOVERY_S * a.recover / 1e6
            if rate != rate:
                ok = "100 B not measured: not judged"
            print(f"{name:>8}: {rate:,.0f} rec/s at batch 1000, recovery "
                  f"{cold:.2f} s: {ok if isinstance(ok, str) else 'met' if ok else 'NOT met'}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
