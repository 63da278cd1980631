"""The replicated work queue as a Spark source, at-least-once made effectively-once.

```python
jobs = read_queue(spark, "orders", "jobs", max_messages=10_000)   # acquire -> DataFrame
out = process(jobs)                                   # keeps the "id" column
DedupSink(spark, "/data/out").commit(out)             # the output, deduplicated by id
jobs.queue_batch.commit()                             # accept, only after the output is in
# on failure: jobs.queue_batch.release()              # back on the queue, redelivered

source = QueueSource(spark, "orders", "jobs", DedupSink(spark, "/data/out"))
result = source.run_batch(process)                    # all of the above, one micro-batch
```

A micro-batch's messages are acquired (held by one member actor, invisible to other
consumers), turned into a DataFrame (``id`` "publisher:seq", ``publisher``, ``seq``, ``body``,
``redelivered``, ``member``), processed, and written: the sink drops rows whose id it already
holds, then commits the batch atomically (written to a hidden directory, renamed into place).
Only then are the messages accepted. A failure before the commit releases them; a crash of the
member that holds them requeues them; an accept that fails after the commit (the member died
in between) means they come again, and the sink drops them: every job once in the output. An
accept that a live member refuses for now (a view change) is owed by the queue handle and
made again while the member is in the group, before the next batch and at each tick of the
handle's lease keeper (``QueueBatch.pending``; the rule is ``WorkQueueHandle``'s,
actors/queue_owed.py): the member would otherwise hold those jobs, leased to this process,
for as long as it runs.
"""
from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from raygroups.stack.workqueue import AcquireTimeout

ID_COL = "id"


@dataclass
class QueueSourceConfig:
    max_messages: int = 10_000
    """Messages per micro-batch at most (the batch's bound, with ``max_bytes``)."""
    max_bytes: int = 64 * 1024 * 1024
    """Body bytes per micro-batch at most (checked after each acquire call)."""
    chunk: int = 500
    """Messages asked for per acquire call (one Ray call)."""
    acquire_timeout_s: float = 2.0
    """How long a batch waits for its first message (then the batch is empty)."""
    idle_timeout_s: float = 0.05
    """How long each further acquire call waits; a call that gets nothing ends the batch."""
    member: Optional[str] = None
    """Acquire through this member (None: whichever member the group handle uses)."""
    alternate: Optional[str] = None
    """The queue's alternate queue, when the source declares it."""


def _schema() -> Any:
    from pyspark.sql.types import (BinaryType, BooleanType, LongType, StringType, StructField,
                                   StructType)
    return StructType([StructField(ID_COL, StringType(), False),
                       StructField("publisher", StringType(), False),
                       StructField("seq", LongType(), False),
                       StructField("body", BinaryType(), False),
                       StructField("redelivered", BooleanType(), False),
                       StructField("member", StringType(), True)])


def delivery_id(d: Any) -> str:
    return f"{d.id[0]}:{d.id[1]}"


@dataclass
class QueueBatch:
    """One micro-batch: its deliveries and their DataFrame. Settle once: ``commit()`` after
    the output is committed, or ``release()``."""
    deliveries: list
    df: Any
    handle: Any
    settled: Optional[str] = None
    unsettled: int = 0
    """Deliveries whose settling failed for good: their member no longer holds them (they
    were requeued and come again, or an earlier try settled them), or left the group (as
    ``commit``, ``release`` and ``retry`` saw; the handle counts the rest, ``owed()``)."""
    errors: list = field(default_factory=list)

    @property
    def pending(self) -> list:
        """Deliveries whose settling failed other than by their member's "not held" answer
        (QueueNotPrimary in a view change, QueueOutcomeUnknown, a call that timed out or did
        not reach the member across a partition): the member may still hold them, leased to
        this process, and then they are not redelivered while it lives. The handle owes them
        (``WorkQueueHandle.settle_many(..., owe=True)``) and settles them again at each tick
        of its lease keeper; ``retry()`` does it now."""
        return [d for d in self.deliveries if self.handle.owes(d)]

    @property
    def ids(self) -> list:
        return [delivery_id(d) for d in self.deliveries]

    def __len__(self) -> int:
        return len(self.deliveries)

    def _settle(self, op: str) -> int:
        if self.settled is not None:
            raise RuntimeError(f"this batch was already settled ({self.settled})")
        self.settled = op
        by_member: dict = {}
        for d in self.deliveries:
            by_member.setdefault(d.member, []).append(d)
        done = 0
        for member, ds in sorted(by_member.items()):
            try:
                self.handle.settle_many(op, ds, owe=True)
                done += len(ds)
            except Exception as e:  # noqa: BLE001 - refused for now (a view change) or the
                owed = sum(1 for d in ds if self.handle.owes(d))  # call did not get through:
                self.unsettled += len(ds) - owed  # owed; "not held": nothing left to settle
                self._error(member, e)
        return done

    def _error(self, member: str, e: Exception) -> None:
        if len(self.errors) < 10:
            self.errors.append(f"{member}: {type(e).__name__}: {e}")

    def retry(self) -> int:
        """Settle the ``pending`` deliveries again now, as they were to be settled; how many
        were. Those of a member no longer in the group are dropped (its acquisitions were
        requeued: they come again); those a member still refuses stay pending."""
        ds = self.pending
        if not ds:
            return 0
        done = self.handle.settle_owed(only=ds)
        self.unsettled += len(ds) - done - len(self.pending)
        return done

    def commit(self) -> int:
        """Accept every message (after the output is committed); the number accepted."""
        return self._settle("accept")

    def release(self) -> int:
        """Put every message back on the queue; the number released."""
        return self._settle("release")


def _group(group: Any) -> Any:
    if isinstance(group, str):
        from raygroups.actors import Group
        return Group.attach(group)
    return group


def acquire_batch(spark: Any, handle: Any, cfg: QueueSourceConfig,
                  max_messages: Optional[int] = None) -> QueueBatch:
    """Acquire up to ``max_messages`` (default ``cfg.max_messages``) messages into a batch."""
    limit = cfg.max_messages if max_messages is None else max_messages
    got: list = []
    size = 0
    wait = cfg.acquire_timeout_s
    while len(got) < limit and size < cfg.max_bytes:
        try:
            more = handle.acquire_many(min(cfg.chunk, limit - len(got)), timeout_s=wait)
        except AcquireTimeout:
            more = []
        except Exception:
            if not got:
                raise
            break  # the batch is what was acquired so far (never left held unprocessed)
        if not more:
            break
        got.extend(more)
        size += sum(len(d.body) for d in more)
        wait = cfg.idle_timeout_s
    rows = [(delivery_id(d), d.id[0], int(d.id[1]), bytes(d.body), bool(d.redelivered),
             d.member) for d in got]
    df = spark.createDataFrame(rows, _schema())
    return QueueBatch(got, df, handle)


def read_queue(spark: Any, group: Any, queue: str, max_messages: int = 10_000,
               config: Optional[QueueSourceConfig] = None) -> Any:
    """Acquire up to ``max_messages`` messages of ``queue`` in ``group`` (a name or a
    ``Group``) as a DataFrame. Its ``queue_batch`` (a ``QueueBatch``) settles them:
    ``commit()`` once the output is committed, ``release()`` on failure."""
    cfg = config or QueueSourceConfig()
    handle = _group(group).queue(queue, alternate=cfg.alternate, member=cfg.member)
    batch = acquire_batch(spark, handle, cfg, max_messages)
    batch.df.queue_batch = batch
    return batch.df


class DedupSink:
    """Parquet output under ``path`` (a local or shared POSIX directory), one directory per
    committed batch (``batch=N``), deduplicated by the ``id_col`` column: ``commit`` drops the
    rows whose id is already in the output (or twice in the batch), writes the rest to a hidden
    directory and renames it into place (a batch is in the output entirely or not at all).
    One writer at a time per ``path`` (a second one racing for a batch number fails its
    rename, and its batch is released)."""

    def __init__(self, spark: Any, path: str, id_col: str = ID_COL):
        self.spark, self.path, self.id_col = spark, os.path.abspath(path), id_col
        os.makedirs(self.path, exist_ok=True)

    def _batches(self) -> list:
        return sorted(int(n.split("=", 1)[1]) for n in os.listdir(self.path)
                      if n.startswith("batch="))

    def committed_ids(self) -> Any:
        """A DataFrame of the ids in the output (None when it is empty)."""
        if not self._batches():
            return None
        return self.spark.read.parquet(self.path).select(self.id_col)

    def commit(self, df: Any) -> dict:
        """{"batch", "written", "duplicates"}: rows written and rows dropped as duplicates."""
        df = df.cache()  # the stage's output is computed once
        out = df.dropDuplicates([self.id_col])
        have = self.committed_ids()
        if have is not None:
            out = out.join(have, self.id_col, "left_anti")
        out = out.cache()
        n = (self._batches() or [0])[-1] + 1
        tmp = os.path.join(self.path, f"_tmp-{n}-{uuid.uuid4().hex[:8]}")
        try:
            total, written = df.count(), out.count()
            out.write.parquet(tmp)
            os.rename(tmp, os.path.join(self.path, f"batch={n}"))
        finally:
            out.unpersist()
            df.unpersist()
            shutil.rmtree(tmp, ignore_errors=True)
        return {"batch": n, "written": written, "duplicates": total - written}

    def read(self) -> Any:
        """Everything committed (None when nothing is)."""
        return self.spark.read.parquet(self.path) if self._batches() else None


@dataclass
class BatchResult:
    size: int
    written: int = 0
    duplicates: int = 0
    redelivered: int = 0
    accepted: int = 0
    unsettled: int = 0
    pending: int = 0
    """This batch's deliveries a live member refused to settle for now: owed by the handle,
    settled again at the start of later batches (``QueueSource.run_batch``) and at each tick
    of the handle's lease keeper."""
    retried: int = 0
    """Owed deliveries of earlier batches settled at the start of this one."""
    released: int = 0
    errors: list = field(default_factory=list)
    view: Optional[str] = None
    error: Optional[str] = None


class QueueSource:
    """Micro-batches of ``queue`` in ``group`` through ``process`` into ``sink``
    (a ``DedupSink``): accept after commit, release on failure, dedupe by id."""

    def __init__(self, spark: Any, group: Any, queue: str, sink: DedupSink,
                 config: Optional[QueueSourceConfig] = None):
        self.spark, self.sink = spark, sink
        self.config = config or QueueSourceConfig()
        self.handle = _group(group).queue(queue, alternate=self.config.alternate,
                                          member=self.config.member)

    def next_batch(self, max_messages: Optional[int] = None) -> QueueBatch:
        return acquire_batch(self.spark, self.handle, self.config, max_messages)

    def run_batch(self, process: Callable[[Any], Any], max_messages: Optional[int] = None,
                  before_commit: Optional[Callable[[QueueBatch], Any]] = None) -> BatchResult:
        """One micro-batch: acquire, ``process(df)`` (a DataFrame that keeps the ``id``
        column), commit to the sink, accept. On an exception before the sink's commit, the
        batch is released and the exception re-raised. ``before_commit(batch)``: a hook
        (tests and the demo kill a member there)."""
        retried = self._retry()
        batch = self.next_batch(max_messages)
        res = BatchResult(size=len(batch), retried=retried,
                          redelivered=sum(1 for d in batch.deliveries if d.redelivered))
        if not batch.deliveries:
            return res
        try:
            out = process(batch.df)
            if before_commit is not None:
                before_commit(batch)
            got = self.sink.commit(out)
        except BaseException:
            res.released = batch.release()
            raise
        res.written, res.duplicates = got["written"], got["duplicates"]
        res.accepted = batch.commit()
        res.unsettled, res.pending, res.errors = batch.unsettled, len(batch.pending), batch.errors
        return res

    def _retry(self) -> int:
        """Settle again what earlier batches left owed (an accept refused during a view
        change: the output is committed, and the member would hold the messages, leased to
        this process, for as long as it lives); how many were settled."""
        return self.handle.settle_owed()
