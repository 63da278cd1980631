"""A journal per member for durable queues: an append-only segment log with checksummed
records, group commit (one fdatasync per ``sync()``, whatever was appended since the last),
snapshots and compaction. The store was chosen by measurement (bench/journal_store.py,
docs/architecture.md, "The journal and durable queues"); durable work queues use it through
stack/runtime/queue_journal.py.

Files, all in one directory per member (``JournalConfig`` sets their modes, 0700 / 0600):

* ``seg-<first record number, 20 digits>.log``: a header, ``MAGIC_SEG | u16 group length |
  u64 first record number | group name (UTF-8) | u32 CRC-32 of all of it``, then records,
  each ``u32 crc | u32 length | payload``. The CRC is zlib's CRC-32 of the length field and
  the payload, its register started at the record's number (mod 2^32): a record read at the
  wrong place, or a stale one, fails it. Record numbers are implicit (the header's first,
  then one more per record) and start at 1. Empty records are refused (so a zeroed tail
  never passes). A segment is closed (fdatasync) once it reaches ``segment_bytes`` before
  the next one is created (header fsynced, then the directory), so after any crash only the
  last segment can have a torn tail.
* ``snap-<upto, 20 digits>.snap``: ``MAGIC_SNAP | u16 group length | u64 upto | group |
  u32 CRC`` then chunks, each ``u32 crc | u32 length | chunk`` (CRC of length and chunk,
  started at the chunk's index), then ``u32 crc | u32 0xFFFFFFFF | u64 chunks | u64 bytes``.
  Written as ``.tmp``, fsynced, renamed, directory fsynced; then older snapshots and the
  segments wholly at or below ``upto`` are deleted (compaction; never the active segment).
* ``LOCK``: an exclusive ``flock`` while the journal is open (one journal per directory).

Recovery (``open``): the newest snapshot (it must be whole: it was renamed into place only
after its fsync, so damage there is ``JournalCorrupt``), then every segment in order. The
first bad record (a length past the end of the file, or a CRC that fails) of the *last*
segment ends recovery: it and the rest of the file are dropped, counted
(``Recovered.dropped_bytes``) and truncated away before new appends. The last segment is
fsynced at every open: after a process crash it may hold records written and never synced,
which recovery reads (from the page cache) and reports as durable. A bad record
in an earlier segment, a gap in the numbers, or a snapshot that does not meet the first
segment is ``JournalCorrupt`` (those bytes were fsynced before anything after them was
written: that is not a torn write, and dropping it could lose records reported durable).
Files of another group raise ``JournalMismatch``. ``*.tmp`` files are deleted.

Threads. ``append`` only takes the record into memory (no system call): it is cheap enough
for an asyncio loop. ``sync`` frames, writes and fdatasyncs everything appended before it
began; it is meant for one worker thread. Any number of threads may append and sync
(a lock orders ``sync`` calls; appends made during a sync wait for the next one); the
numbers ``append`` returns are the order on disk. ``write_snapshot`` may run on a third
thread: it writes its file without the sync lock and takes it only to compact.
``open``/``close`` run alone.

Faults. ENOSPC or EDQUOT while writing or fsyncing a segment raises ``JournalFull``; any
other I/O error there ``JournalFailed``. Either way nothing past ``durable`` is reported
durable, the records of the failed sync are given up (the caller still holds its state),
and every later ``append``/``sync`` raises the same error until the journal is reopened:
a failed fsync is never retried, since Linux may have dropped the dirty pages and a second
fsync would report success ("fsyncgate"). Reopening runs recovery, which truncates what the
failed sync left. A limit: after an EIO, a reopen in the same boot may read back from the page
cache a record that never reached the disk and cannot tell (Linux marks such pages clean);
so an integration should treat ``JournalFailed`` as the member's failure, not reopen at once.
ENOSPC is reported by write() before any page is dirtied (ext4's delayed allocation reserves
blocks at write time; tmpfs allocates them), so ``JournalFull`` loses nothing that way.
A snapshot that fails (a full disk included) deletes its ``.tmp`` and
raises, and leaves the journal usable. Memory is bounded: at most ``max_unsynced_bytes``
of records wait for a sync; past that ``append`` raises ``JournalBacklog``.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Tuple

from ..errors import (ConfigError, JournalBacklog, JournalCorrupt, JournalError, JournalFailed,
                      JournalFull, JournalMismatch)

MAGIC_SEG = b"RGJSEG\x00\x01"
MAGIC_SNAP = b"RGJSNP\x00\x01"
HEAD = struct.Struct("<8sHQ")       # magic, group name length, first record / upto
U32 = struct.Struct("<I")
FRAME = struct.Struct("<II")        # crc, length
TRAILER = struct.Struct("<QQ")      # snapshot: chunks, bytes
END = 0xFFFFFFFF
MAX_RECORD = 1 << 30                # the format's bound; a longer length is a torn frame
MASK = 0xFFFFFFFF
SEG_RE = re.compile(r"^seg-(\d{20})\.log$")
SNAP_RE = re.compile(r"^snap-(\d{20})\.snap$")
WRITE_CHUNK = 1 << 20               # sync joins frames into writes of about this size


@dataclass(frozen=True)
class JournalConfig:
    """The journal's settings (all of them a member's own: nothing here is agreed)."""

    # Rotate to a new segment once the active one holds this many bytes (a record larger
    # than that gets a segment of its own). Compaction deletes whole segments only, so this
    # is also the granularity of what a snapshot frees.
    segment_bytes: int = 64 << 20
    # At most this many bytes of records (payload + 8 per record) wait in memory for a
    # sync; past that ``append`` raises ``JournalBacklog``.
    max_unsynced_bytes: int = 64 << 20
    # The largest record ``append`` takes (<= max_unsynced_bytes).
    max_record_bytes: int = 16 << 20
    # fdatasync segments and snapshots, fsync the directory. False only for tests and
    # benchmarks of the code path: then ``sync`` reports as durable what is merely written.
    fsync: bool = True
    dir_mode: int = 0o700     # the directory, when the journal creates it
    file_mode: int = 0o600    # segments, snapshots, LOCK

    def __post_init__(self):
        if self.segment_bytes < 4096:
            raise ConfigError(f"journal segment_bytes={self.segment_bytes}: at least 4096")
        if not 1 <= self.max_record_bytes <= min(self.max_unsynced_bytes, MAX_RECORD):
            raise ConfigError(f"journal max_record_bytes={self.max_record_bytes}: between 1 "
                              f"and max_unsynced_bytes ({self.max_unsynced_bytes}) and 1 GiB")


@dataclass
class JournalStats:
    appends: int = 0
    syncs: int = 0              # sync() calls that wrote something
    fsyncs: int = 0             # fdatasync/fsync calls, rotations and directories included
    bytes_written: int = 0
    rotations: int = 0
    snapshots: int = 0
    compacted_segments: int = 0


@dataclass
class Recovered:
    """What ``open`` found. Read ``records()`` and ``snapshot_chunks()`` before the next
    ``write_snapshot`` (compaction deletes the files they read); appends may go on meanwhile
    (only what was found at open is read)."""

    snapshot_upto: int = 0          # 0: no snapshot
    has_snapshot: bool = False
    last: int = 0                   # the last intact record (snapshot_upto if none after it)
    record_count: int = 0           # intact records after the snapshot
    dropped_bytes: int = 0          # torn tail bytes dropped (and truncated away)
    _snap_path: Optional[str] = field(default=None, repr=False)
    _segments: List[Tuple[str, int, int]] = field(default_factory=list, repr=False)

    def snapshot_chunks(self) -> Iterator[bytes]:
        """The snapshot's chunks, as written, read one at a time (none if no snapshot)."""
        if self._snap_path is not None:
            with open(self._snap_path, "rb") as f:
                yield from _read_snapshot(f, None, self._snap_path)[1]

    def snapshot_bytes(self) -> Optional[bytes]:
        return b"".join(self.snapshot_chunks()) if self.has_snapshot else None

    def records(self, verify: bool = False) -> Iterator[Tuple[int, bytes]]:
        """``(number, payload)`` of every intact record after the snapshot, in order, read a
        segment at a time. ``open`` checked every checksum (and holds the directory's lock);
        ``verify=True`` checks them again as it reads."""
        upto, unpack = self.snapshot_upto, FRAME.unpack_from
        for path, first, end in self._segments:
            with open(path, "rb") as f:
                buf = f.read(end)
            pos, n = _header_len(buf), first
            if verify:
                for n, start, pos in _frames(memoryview(buf), pos, first, end):
                    if n > upto:
                        yield n, buf[start:pos]
            else:
                while pos + 8 <= end:
                    length = unpack(buf, pos)[1]
                    if n > upto:
                        yield n, buf[pos + 8:pos + 8 + length]
                    pos += 8 + length
                    n += 1
            if pos != end:
                raise JournalCorrupt(f"{path} changed after open (read to byte {pos} of {end})")


def _header_len(buf) -> int:
    return HEAD.size + HEAD.unpack_from(buf, 0)[1] + U32.size


def _frames(mv: memoryview, pos: int, number: int, end: int):
    """Yield ``(number, payload start, payload stop)`` of each intact frame from ``pos``;
    stop at the end or the first bad one (the caller compares the last stop with ``end``)."""
    crc32, unpack = zlib.crc32, FRAME.unpack_from
    while pos + 8 <= end:
        crc, length = unpack(mv, pos)
        stop = pos + 8 + length
        if length == 0 or stop > end or crc32(mv[pos + 4:stop], number & MASK) != crc:
            return
        yield number, pos + 8, stop
        number += 1
        pos = stop


def _frame_crc(length: int, payload, seed: int) -> int:
    return zlib.crc32(payload, zlib.crc32(U32.pack(length), seed & MASK))


def _header(magic: bytes, group: bytes, number: int) -> bytes:
    head = HEAD.pack(magic, len(group), number) + group
    return head + U32.pack(zlib.crc32(head))


def _parse_header(buf: bytes, magic: bytes, path: str):
    """``(group, number, header length)``, or None if the header is not whole and intact."""
    if len(buf) < HEAD.size:
        return None
    m, glen, number = HEAD.unpack_from(buf, 0)
    end = HEAD.size + glen
    if m != magic or len(buf) < end + 4 or U32.unpack_from(buf, end)[0] != zlib.crc32(buf[:end]):
        return None
    return bytes(buf[HEAD.size:end]), number, end + 4


def _read_exact(f, n: int) -> bytes:
    b = f.read(n)
    return b if len(b) == n else b""


def _read_snapshot(f, group: Optional[bytes], path: str):
    """``(upto, chunk iterator)``; the iterator raises ``JournalCorrupt`` on damage."""
    head = f.read(HEAD.size + 65535 + 4)
    parsed = _parse_header(head, MAGIC_SNAP, path)
    if parsed is None:
        raise JournalCorrupt(f"snapshot {path}: bad header")
    g, upto, hlen = parsed
    if group is not None and g != group:
        raise JournalMismatch(f"snapshot {path} belongs to group {g.decode(errors='replace')!r}, "
                              f"not {group.decode(errors='replace')!r}")
    f.seek(hlen)

    def chunks():
        i = total = 0
        while True:
            fr = _read_exact(f, 8)
            if not fr:
                raise JournalCorrupt(f"snapshot {path}: ends without its trailer")
            crc, length = FRAME.unpack(fr)
            if length == END:
                tr = _read_exact(f, TRAILER.size)
                if (not tr or zlib.crc32(fr[4:] + tr, i & MASK) != crc
                        or TRAILER.unpack(tr) != (i, total) or f.read(1)):
                    raise JournalCorrupt(f"snapshot {path}: bad trailer")
                return
            chunk = _read_exact(f, length)
            if len(chunk) != length or _frame_crc(length, chunk, i) != crc:
                raise JournalCorrupt(f"snapshot {path}: chunk {i} damaged")
            i += 1
            total += length
            yield chunk
    return upto, chunks()


def _io_error(e: OSError, what: str) -> JournalError:
    """``JournalFull`` for ENOSPC/EDQUOT, else ``JournalFailed``; ``what`` ends the message."""
    cls = JournalFull if e.errno in (errno.ENOSPC, errno.EDQUOT) else JournalFailed
    return cls(f"journal: {e.strerror or e} ({errno.errorcode.get(e.errno, e.errno)}); {what}")


class Journal:
    """See the module's docstring. ``Journal(directory, group, config).open()`` first."""

    def __init__(self, directory, group: str, config: Optional[JournalConfig] = None):
        self.directory = os.fspath(directory)
        self.group = group
        self.config = config or JournalConfig()
        self.stats = JournalStats()
        self._gb = group.encode()
        if len(self._gb) > 65535:
            raise ConfigError("journal group name: at most 65535 bytes")
        self._lock = threading.Lock()      # append <-> sync: pending, numbers, failure
        self._io = threading.Lock()        # sync, compaction, close: the segment files
        self._snap_lock = threading.Lock()  # one write_snapshot at a time
        self._stats_lock = threading.Lock()  # the sync and the snapshot threads both count
        self._pending: List[bytes] = []
        self._unsynced = 0                 # bytes pending or being synced (+8 per record)
        self._next = 1
        self._durable = 0
        self._failed: Optional[JournalError] = None
        self._open = False
        self._fd = -1                      # the active segment
        self._seg_size = 0                 # its size in bytes
        self._seg_count = 0                # its records
        self._segments: List[Tuple[int, str]] = []   # (first record, path), the active last
        self._snap_upto = 0
        self._lock_fd = -1

    # -- properties ----------------------------------------------------------------------
    @property
    def durable(self) -> int:
        """The highest record number fsynced (0: none)."""
        return self._durable

    @property
    def last_appended(self) -> int:
        return self._next - 1

    @property
    def unsynced_bytes(self) -> int:
        return self._unsynced

    def _count(self, **kw: int) -> None:
        with self._stats_lock:
            for k, v in kw.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    # -- open / close --------------------------------------------------------------------
    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _fsync_dir(self) -> None:
        if self.config.fsync:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._count(fsyncs=1)

    def open(self) -> Recovered:
        """Recover (see the module's docstring) and get ready to append after the last
        intact record. Raises ``JournalMismatch``, ``JournalCorrupt``, or ``JournalError``
        if another journal holds the directory."""
        if self._open:
            raise JournalError("journal already open")
        cfg = self.config
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, mode=cfg.dir_mode, exist_ok=True)
            os.chmod(self.directory, cfg.dir_mode)
        self._lock_fd = os.open(self._path("LOCK"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                cfg.file_mode)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise JournalError(f"journal {self.directory} is open elsewhere") from None
        try:
            rec = self._recover()
        except BaseException:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise
        self._open = True
        return rec

    def _recover(self) -> Recovered:
        rec = Recovered()
        self._failed, self._pending, self._unsynced = None, [], 0   # a reopen starts afresh
        names = sorted(os.listdir(self.directory))
        changed = False
        for name in names:
            if name.endswith(".tmp"):
                os.unlink(self._path(name))
                changed = True
        snaps = sorted(int(m.group(1)) for m in map(SNAP_RE.match, names) if m)
        segs = sorted(int(m.group(1)) for m in map(SEG_RE.match, names) if m)
        if snaps:
            upto = snaps[-1]
            path = self._path(f"snap-{upto:020d}.snap")
            with open(path, "rb") as f:
                u, chunks = _read_snapshot(f, self._gb, path)
                for _ in chunks:
                    pass
            if u != upto:
                raise JournalCorrupt(f"snapshot {path} says upto {u}")
            rec.snapshot_upto, rec.has_snapshot, rec._snap_path = upto, True, path
            for old in snaps[:-1]:   # left by a crash between a rename and the compaction
                os.unlink(self._path(f"snap-{old:020d}.snap"))
                changed = True
        upto = rec.snapshot_upto
        # (first, path, records, intact end, size), in order
        found: List[list] = []
        for i, first in enumerate(segs):
            path = self._path(f"seg-{first:020d}.log")
            with open(path, "rb") as f:
                buf = f.read()
            last_seg = i == len(segs) - 1
            parsed = _parse_header(buf, MAGIC_SEG, path)
            if parsed is None:
                if not last_seg:
                    raise JournalCorrupt(f"segment {path}: bad header, and later segments exist")
                rec.dropped_bytes += len(buf)   # created, header never made it to disk
                os.unlink(path)
                changed = True
                continue
            g, number, hlen = parsed
            if g != self._gb:
                raise JournalMismatch(f"journal {self.directory} belongs to group "
                                      f"{g.decode(errors='replace')!r}, not {self.group!r}")
            if number != first:
                raise JournalCorrupt(f"segment {path}: its header says record {number}")
            count, end = 0, hlen
            for n, _, end in _frames(memoryview(buf), hlen, first, len(buf)):
                count += 1
            found.append([first, path, count, end, len(buf)])
        for i, (first, path, count, end, size) in enumerate(found):
            if i + 1 < len(found):
                if end != size:
                    raise JournalCorrupt(
                        f"segment {path}: record {first + count} damaged at byte {end} of "
                        f"{size}, and later segments exist")
                if found[i + 1][0] != first + count:
                    raise JournalCorrupt(f"segment {path} ends at record {first + count - 1}, "
                                         f"the next begins at {found[i + 1][0]}")
        if found and found[0][0] > upto + 1:
            raise JournalCorrupt(f"records {upto + 1}..{found[0][0] - 1} are missing (the "
                                 f"{'snapshot' if upto else 'journal'} ends at {upto})")
        while len(found) > 1 and found[1][0] <= upto + 1:   # wholly <= upto: compaction's
            os.unlink(found.pop(0)[1])
            changed = True
        last_rec = found[-1][0] + found[-1][2] - 1 if found else 0
        self._next = max(upto, last_rec) + 1
        self._durable = self._next - 1
        self._snap_upto = upto
        if found:
            # Truncate a torn tail, and fsync the last segment in any case: after a process
            # crash it may hold records written but never synced, which recovery has just
            # read (from the page cache) and will now report as durable.
            first, path, count, end, size = found[-1]
            rec.dropped_bytes += size - end
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                if end != size:
                    os.ftruncate(fd, end)
                if self.config.fsync:
                    os.fsync(fd)
                    self._count(fsyncs=1)
            except OSError as e:
                raise _io_error(e, f"recovery could not make {path} durable") from e
            finally:
                os.close(fd)
        if changed:
            self._fsync_dir()
        rec.last = self._next - 1
        rec.record_count = max(0, last_rec - upto)
        rec._segments = [(p, f, e) for f, p, c, e, _ in found if c and f + c - 1 > upto]
        self._segments = [(f, p) for f, p, *_ in found]
        if found and found[-1][0] + found[-1][2] == self._next:
            first, path, count, end, _ = found[-1]
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self._seg_size, self._seg_count = end, count
        else:
            self._new_segment(self._next)
        return rec

    def close(self) -> None:
        """Close the files. Records appended and not synced are not written: ``sync()``
        first. A failed journal closes too (then reopen it)."""
        with self._io:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1
            with self._lock:
                self._open = False
                self._pending = []
                self._unsynced = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- appending -----------------------------------------------------------------------
    def append(self, record: bytes) -> int:
        """Take one record (non-empty bytes); return its number. It is durable once a
        ``sync()`` that began after this call returns a number at or above it."""
        rec = bytes(record)
        n = len(rec)
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if not self._open:
                raise JournalError("journal not open")
            if not 0 < n <= self.config.max_record_bytes:
                raise ValueError(f"journal record of {n} bytes: 1 to max_record_bytes "
                                 f"({self.config.max_record_bytes})")
            if self._unsynced + n + 8 > self.config.max_unsynced_bytes:
                raise JournalBacklog(f"journal: {self._unsynced} bytes wait for a sync "
                                     f"(max_unsynced_bytes {self.config.max_unsynced_bytes})")
            self._pending.append(rec)
            self._unsynced += n + 8
            number = self._next
            self._next += 1
            self.stats.appends += 1
            return number

    def sync(self) -> int:
        """Write and fdatasync every record appended before this call (one fdatasync,
        plus one per segment rotated); return the highest durable record number. Raises
        ``JournalFull``/``JournalFailed`` (then, and from then on, nothing more is
        durable until the journal is reopened)."""
        with self._io:
            with self._lock:
                if self._failed is not None:
                    raise self._failed
                if not self._open:
                    raise JournalError("journal not open")
                batch, self._pending = self._pending, []
                first = self._next - len(batch)
            if not batch:
                return self._durable
            try:
                self._write(batch, first)
                if self.config.fsync:
                    os.fdatasync(self._fd)
                    self._count(fsyncs=1)
            except OSError as e:
                with self._lock:
                    self._failed = _io_error(
                        e, f"durable up to record {self._durable}; reopen the journal to go on")
                    self._pending = []
                    self._unsynced = 0
                raise self._failed from e
            size = sum(len(r) + 8 for r in batch)
            with self._lock:
                self._durable = first + len(batch) - 1
                self._unsynced -= size
            self.stats.syncs += 1
            return self._durable

    def _write_all(self, fd: int, data) -> None:
        mv = memoryview(data)
        while mv:
            mv = mv[os.write(fd, mv):]
        self._count(bytes_written=len(data))

    def _write(self, batch: List[bytes], number: int) -> None:
        parts: List[bytes] = []
        size = 0
        limit = self.config.segment_bytes
        pack = FRAME.pack
        for rec in batch:
            n = len(rec)
            if self._seg_count and self._seg_size + size + n + 8 > limit:
                if parts:
                    self._write_all(self._fd, b"".join(parts))
                    self._seg_size += size
                    parts, size = [], 0
                self._rotate(number)
            parts.append(pack(_frame_crc(n, rec, number), n))
            parts.append(rec)
            size += n + 8
            self._seg_count += 1
            number += 1
            if size >= WRITE_CHUNK:
                self._write_all(self._fd, b"".join(parts))
                self._seg_size += size
                parts, size = [], 0
        if parts:
            self._write_all(self._fd, b"".join(parts))
            self._seg_size += size

    def _rotate(self, first: int) -> None:
        """Close the active segment durably, then start one at record ``first``: a later
        segment exists only once the earlier ones are wholly on disk."""
        if self.config.fsync:
            os.fdatasync(self._fd)
            self._count(fsyncs=1)
        os.close(self._fd)
        self._fd = -1
        self._new_segment(first)
        self.stats.rotations += 1

    def _new_segment(self, first: int) -> None:
        path = self._path(f"seg-{first:020d}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                     self.config.file_mode)
        try:
            head = _header(MAGIC_SEG, self._gb, first)
            self._write_all(fd, head)
            if self.config.fsync:
                os.fdatasync(fd)
                self._count(fsyncs=1)
            self._fsync_dir()
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._seg_size, self._seg_count = fd, len(head), 0
        self._segments.append((first, path))

    # -- snapshots and compaction --------------------------------------------------------
    def write_snapshot(self, chunks: Iterable[bytes], upto: int) -> None:
        """Write the state after record ``upto`` (<= ``durable``) from ``chunks``
        atomically (.tmp, fsync, rename, fsync the directory), then delete older snapshots
        and the segments whose records are all at or below ``upto``. Raises
        ``JournalFull``/``JournalFailed`` (the journal stays usable; the older snapshot and
        the segments stay), or whatever ``chunks`` raises."""
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if not self._open:
                raise JournalError("journal not open")
            if not self._snap_upto <= upto <= self._durable:
                raise ValueError(f"snapshot upto {upto}: between the last snapshot's "
                                 f"({self._snap_upto}) and the durable record ({self._durable})")
        with self._snap_lock:
            final = self._path(f"snap-{upto:020d}.snap")
            tmp = final + ".tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                             self.config.file_mode)
                try:
                    self._write_all(fd, _header(MAGIC_SNAP, self._gb, upto))
                    i = total = 0
                    for chunk in chunks:
                        n = len(chunk)
                        if not 0 <= n < END:
                            raise ValueError(f"snapshot chunk of {n} bytes")
                        self._write_all(fd, FRAME.pack(_frame_crc(n, chunk, i), n))
                        self._write_all(fd, chunk)
                        i += 1
                        total += n
                    tail = U32.pack(END) + TRAILER.pack(i, total)
                    self._write_all(fd, U32.pack(zlib.crc32(tail, i & MASK)) + tail)
                    if self.config.fsync:
                        os.fsync(fd)
                        self._count(fsyncs=1)
                finally:
                    os.close(fd)
                os.replace(tmp, final)
                self._fsync_dir()
            except BaseException as e:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                if isinstance(e, OSError):
                    raise _io_error(e, f"snapshot upto {upto} not written; the older snapshot "
                                       f"and the segments are kept") from e
                raise
            self.stats.snapshots += 1
            self._compact(upto)

    def _compact(self, upto: int) -> None:
        with self._io:
            self._snap_upto = upto
            gone = [n for n in os.listdir(self.directory)
                    if (m := SNAP_RE.match(n)) and int(m.group(1)) < upto]
            while len(self._segments) > 1 and self._segments[1][0] <= upto + 1:
                gone.append(os.path.basename(self._segments.pop(0)[1]))
                self.stats.compacted_segments += 1
            for name in gone:
                os.unlink(self._path(name))
            if gone:
                self._fsync_dir()
