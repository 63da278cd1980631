"""An exactly-once sink for ``queue_stream`` on any Hadoop filesystem, for ``foreachBatch``.

```python
q = (process(queue_stream(spark, "orders", "jobs")).writeStream
       .foreachBatch(exactly_once_sink("hdfs://nn/out"))     # or file://, s3a://
       .option("checkpointLocation", "hdfs://nn/ck").start())
read_committed(spark, "hdfs://nn/out")                         # everything committed
```

Each micro-batch is written by Spark's own writer (Parquet by default, any format), split by
the ``redelivered`` flag (``partitionBy``), into an attempt directory of its own
(``_data/sink_batch=<writer>.<batch>.<attempt>``: read back, ``sink_batch`` is a column that
says which commit brought each row); the batch is
in the output when its commit marker (``_commits/<writer>/<batch>.<n>``, one small file
naming the attempt) exists, and not before: a batch that failed half way left only an attempt
that no marker names. Then the stream accepts the batch's jobs (by default in the background
while Spark writes the next batch: ``SinkConfig.accept_async``), and an accept record
(``_accepted/<writer>/<batch>.<n>``) says that all of them were accepted.

Deduplication costs what was redelivered, not what the output holds. A job can be in the
output and come again only if its batch was committed and not wholly accepted (the member
holding it died between the two, or the driver did): exactly the batches with a marker and
no accept record, "in doubt". And it then comes flagged ``redelivered`` (or, when Spark
re-runs a batch after a restart, in a batch whose marker exists already). So only the
redelivered part of a batch is read back and checked, against the ids of the batches in
doubt (and of its own batch), and rewritten without the duplicates before the marker is
written. A batch without redelivered rows is written once and never read.

One writer at a time (the streaming query's id, which a restart from the checkpoint keeps):
it holds a lease on the sink (``_writer``, renewed with its batches); another query finds it
and gets ``SinkInUse`` rather than racing it. Markers are per writer and batch, so a later
writer (another query once the first stopped) never overwrites one, and its deduplication
sees the earlier writer's batches in doubt. On S3 (``s3a://``) a marker is one object, whole
or absent; the lease check is not atomic there (nor on a local filesystem) against two
queries started within the same moment.
"""
from __future__ import annotations

import collections
import json
import logging
import re
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

from raygroups.stack import RaygroupsError

from .hadoop_fs import HadoopFS
from .queue_stream import QueueStream, open_stream

DATA = "_data"
"""Where the attempts are (hidden from Spark's readers of the sink's root)."""
BATCH_COL = "sink_batch"
"""The partition column of the attempts: "<writer>.<batch>.<attempt>" of each row."""
log = logging.getLogger("raygroups.integration")
QUERY_ID = "sql.streaming.queryId"
"""The Spark local property that holds the running streaming query's id (in foreachBatch)."""


class SinkInUse(RaygroupsError):
    """Another writer (streaming query) holds the sink: one writer per output path."""


class SinkSchemaError(RaygroupsError, ValueError):
    """The batch lacks a column the sink needs (the id, the redelivered flag)."""


@dataclass
class SinkConfig:
    format: str = "parquet"
    """Spark's output format of the data (any ``DataFrameWriter.format``)."""
    options: dict = field(default_factory=dict)
    """Options of Spark's writer (compression, ...)."""
    id_col: str = "id"
    """The column that identifies a job (``queue_stream``'s "publisher:seq")."""
    flag_col: str = "redelivered"
    """The column that flags a job delivered before: only those rows are checked."""
    writer: Optional[str] = None
    """This writer's name (None: the streaming query's id, else "batch")."""
    writer_lease_s: float = 120.0
    """How long the sink stays this writer's after its last batch (renewed at each batch
    when half of it is gone). Shorter: another query may take over sooner after this one
    stopped; the lease must outlast the longest batch."""
    history: int = 1000
    """Batch results kept in ``results``."""
    accept_async: bool = True
    """As ``foreachBatch``'s function: accept a batch in the background while Spark writes
    the next one (at most one accept pending; Spark moves on once the output is committed,
    and a batch stays in doubt until its accept record exists). False: return after the
    accept (a batch's jobs leave the queue before the next batch starts)."""


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name) or "writer"


class ExactlyOnceSink:
    """The sink (see the module doc). Call it as ``foreachBatch``'s function, or
    ``commit(df, batch_id)`` then ``accept(batch_id)`` to act between the two.

    ``results``: per batch (the last ``SinkConfig.history``), {"batch", "writer", "n" (the
    batch's commits before), "rerun", "checked" (rows read back: the redelivered ones, or
    all of a re-run), "dropped" (duplicates among them), "committed", "abandoned" (a
    partition moved member: released, not committed), "started_at", "committed_at", and
    after the accept
    "accepted", "not_accepted", "failed_members", "accepted_at"}."""

    def __init__(self, path: str, stream: Any = None, config: Optional[SinkConfig] = None):
        """``stream``: the ``QueueStream`` (or its DataFrame, or its name) whose batches
        this writes; None: this driver's only open one (found at the first batch); False:
        no queue (the batches are only written, as from an in-memory DataFrame)."""
        self.path, self.config = path, config or SinkConfig()
        self._stream_arg = stream
        self._fs: Optional[HadoopFS] = None
        self._markers: dict = {}           # marker path -> its JSON (markers never change)
        self._lease = ("", 0.0)            # (writer, until) as last written
        self._pending: dict = {}           # batch -> (writer, marker rel path or None)
        self.results: collections.deque = collections.deque(maxlen=self.config.history)
        self._accepter: Optional[ThreadPoolExecutor] = None
        self._accepting: Optional[Future] = None
        self._lock = threading.Lock()  # results: the accepting thread updates them

    # -- helpers --------------------------------------------------------------------------
    def stream(self) -> Optional[QueueStream]:
        s = self._stream_arg
        if s is False:
            return None
        if isinstance(s, QueueStream):
            return s
        if s is not None and hasattr(s, "queue_stream"):
            return s.queue_stream
        return open_stream(s)

    def fs(self, spark: Any) -> HadoopFS:
        if self._fs is None:
            self._fs = HadoopFS(spark, self.path)
        return self._fs

    def _writer(self, spark: Any) -> str:
        return _clean(self.config.writer or spark.sparkContext.getLocalProperty(QUERY_ID)
                      or "batch")

    def _take_lease(self, fs: HadoopFS, writer: str) -> None:
        now = time.time()
        lease = self.config.writer_lease_s
        if self._lease[0] == writer and self._lease[1] - now > lease / 2:
            return
        raw = fs.read("_writer")
        cur = json.loads(raw) if raw else None
        if cur and cur["writer"] != writer and cur["until"] > now:
            raise SinkInUse(f"{fs.uri} is written by {cur['writer']} until "
                            f"{time.strftime('%H:%M:%S', time.localtime(cur['until']))}: one "
                            f"writer at a time (give this query its own path)")
        fs.create("_writer", json.dumps({"writer": writer, "until": now + lease}).encode(),
                  overwrite=True)
        check = json.loads(fs.read("_writer") or b"{}")
        if check.get("writer") != writer:
            raise SinkInUse(f"{fs.uri} was taken by {check.get('writer')} meanwhile")
        self._lease = (writer, now + lease)

    def _marker(self, fs: HadoopFS, rel: str) -> dict:
        if rel not in self._markers:
            self._markers[rel] = json.loads(fs.read(rel))
        return self._markers[rel]

    def _names(self, fs: HadoopFS, top: str) -> set:
        return {f"{w}/{n}" for w in fs.list(top) for n in fs.list(f"{top}/{w}")
                if not n.startswith(".") and not n.endswith((".tmp", ".crc"))}

    def in_doubt(self, spark: Any) -> list:
        """The committed batches not known to be wholly accepted: ["<writer>/<batch>.<n>"]."""
        fs = self.fs(spark)
        return sorted(self._names(fs, "_commits") - self._names(fs, "_accepted"))

    def _data_paths(self, fs: HadoopFS, markers: list) -> list:
        out = []
        for rel in markers:
            m = self._marker(fs, f"_commits/{rel}")
            out += [fs.url(f"{m['attempt']}/{p}") for p in m["parts"]]
        return out

    def _reader(self, spark: Any) -> Any:
        return spark.read.format(self.config.format)

    def _dedup(self, spark: Any, fs: HadoopFS, attempt: str, parts: list,
               suspect: list) -> dict:
        """Rewrite the suspect parts of ``attempt`` without the ids already in the output
        (batches in doubt) or elsewhere in the batch; {"checked", "dropped"}."""
        cfg = self.config
        base = fs.url(attempt)
        sus = self._reader(spark).option("basePath", base).load(
            [fs.url(f"{attempt}/{p}") for p in suspect])
        seen_paths = self._data_paths(fs, self.in_doubt(spark))
        seen_paths += [fs.url(f"{attempt}/{p}") for p in parts if p not in suspect]
        keep = sus.dropDuplicates([cfg.id_col])
        if seen_paths:
            seen = self._reader(spark).option("basePath", fs.url(DATA)).load(seen_paths) \
                .select(cfg.id_col)
            keep = keep.join(seen, cfg.id_col, "left_anti")
        tmp = f"{attempt}/_dedup"
        keep.write.format(cfg.format).options(**cfg.options).partitionBy(cfg.flag_col) \
            .save(fs.url(tmp))
        checked = sus.count()
        new_parts = [p for p in fs.list(tmp) if p.startswith(cfg.flag_col + "=")]
        kept = self._reader(spark).option("basePath", fs.url(tmp)).load(
            [fs.url(f"{tmp}/{p}") for p in new_parts]).count() if new_parts else 0
        for p in suspect:
            fs.delete(f"{attempt}/{p}")
        for p in new_parts:
            if not fs.rename(f"{tmp}/{p}", f"{attempt}/{p}"):
                raise OSError(f"could not move {tmp}/{p} into {attempt}")
        fs.delete(tmp)
        return {"checked": checked, "dropped": checked - kept}

    # -- the two steps --------------------------------------------------------------------
    def commit(self, df: Any, batch_id: int) -> dict:
        """Write micro-batch ``batch_id`` and commit it (see the module doc). On an error
        before the commit, the stream releases the batch's jobs and the error is raised."""
        cfg = self.config
        missing = [c for c in (cfg.id_col, cfg.flag_col) if c not in df.columns]
        if missing:
            raise SinkSchemaError(f"the batch has no {' and no '.join(map(repr, missing))} "
                                  f"column (keep queue_stream's id and redelivered columns; "
                                  f"its columns: {df.columns})")
        spark = df.sparkSession
        fs = self.fs(spark)
        writer = self._writer(spark)
        stream = self.stream()
        self._take_lease(fs, writer)
        prior = [int(n.rsplit(".", 1)[1]) for n in fs.list(f"_commits/{writer}")
                 if n.startswith(f"{batch_id}.") and not n.endswith((".tmp", ".crc"))]
        n = max(prior) + 1 if prior else 0
        attempt = f"{DATA}/{BATCH_COL}={writer}.{batch_id}.{uuid.uuid4().hex[:8]}"
        res = {"batch": batch_id, "writer": writer, "n": n, "rerun": bool(prior),
               "checked": 0, "dropped": 0, "committed": False, "abandoned": False,
               "started_at": time.time()}
        try:
            df.write.format(cfg.format).options(**cfg.options).partitionBy(cfg.flag_col) \
                .save(fs.url(attempt))
            if stream is not None and stream.rebound(batch_id):
                # a partition was read twice from two members: its output may mix them
                # (known once the write ran the tasks; checked before deduplication reads
                # anything: every job of the batch comes again, flagged, and is checked then)
                fs.delete(attempt)
                stream.release(batch_id)
                res["abandoned"] = True
                self._record(res)
                return res
            parts = [p for p in fs.list(attempt) if p.startswith(cfg.flag_col + "=")]
            suspect = parts if prior else [p for p in parts if p == f"{cfg.flag_col}=true"]
            if suspect:
                res.update(self._dedup(spark, fs, attempt, parts, suspect))
                parts = [p for p in fs.list(attempt) if p.startswith(cfg.flag_col + "=")]
            marker = None
            if parts:
                marker = f"_commits/{writer}/{batch_id}.{n}"
                body = {"writer": writer, "batch": batch_id, "n": n, "attempt": attempt,
                        "parts": parts, "at": time.time()}
                if not fs.create(marker, json.dumps(body).encode()):
                    raise SinkInUse(f"{marker} exists: another writer named {writer}")
                self._markers[marker] = body
                res["committed"] = True
            else:
                fs.delete(attempt)
        except BaseException:
            fs.delete(attempt)
            if stream is not None:
                stream.release(batch_id)
            raise
        self._pending[batch_id] = (writer, marker)
        res["committed_at"] = time.time()
        self._record(res)
        return res

    def _record(self, res: dict) -> None:
        with self._lock:
            self.results.append(res)

    def batch_results(self) -> list:
        """A copy of ``results`` (the accepting thread updates them)."""
        with self._lock:
            return [dict(r) for r in self.results]

    def accept(self, batch_id: int) -> dict:
        """Accept micro-batch ``batch_id``'s jobs (after ``commit``), and record that all
        were accepted: {"settled", "failed", "failed_members"}."""
        writer, marker = self._pending.pop(batch_id, (None, None))
        stream = self.stream()
        if stream is None:
            return {"settled": 0, "failed": 0, "failed_members": []}
        got = stream.accept(batch_id)
        if marker is not None and not got["failed"] and not got["failed_members"]:
            fs = self._fs
            rel = marker.replace("_commits/", "_accepted/", 1)
            fs.create(rel, json.dumps({"settled": got["settled"], "at": time.time()}).encode(),
                      overwrite=True)
        with self._lock:
            for r in reversed(self.results):
                if r["batch"] == batch_id:
                    r.update(accepted=got["settled"], not_accepted=got["failed"],
                             failed_members=got["failed_members"], accepted_at=time.time())
                    break
        return got

    def __call__(self, df: Any, batch_id: int) -> None:
        res = self.commit(df, batch_id)
        self.flush()
        if res["abandoned"]:
            return
        if not self.config.accept_async:
            self.accept(batch_id)
            return
        if self._accepter is None:
            self._accepter = ThreadPoolExecutor(1, thread_name_prefix="raygroups-accept")
        self._accepting = self._accepter.submit(self._accept_in_background, batch_id)

    def _accept_in_background(self, batch_id: int) -> dict:
        """``accept``, unless this process shut Ray down meanwhile (the query was stopped
        and Ray with it): a Ray call would start Ray again (auto-init); the batch stays in
        doubt, and its jobs come again to the next query, which drops them."""
        import ray
        if not ray.is_initialized():
            return {"settled": 0, "failed": 0, "failed_members": [], "skipped": True}
        return self.accept(batch_id)

    def flush(self) -> None:
        """Wait for the accept of the last batch (when ``accept_async``); its error, if it
        failed (the batch stays in doubt, and its jobs come again), is logged."""
        pending, self._accepting = self._accepting, None
        if pending is not None:
            try:
                pending.result()
            except Exception as e:  # noqa: BLE001 - the batch stays in doubt: safe
                log.warning("sink %s: an accept failed: %s", self.path, e)

    # -- reading --------------------------------------------------------------------------
    def committed(self, spark: Any) -> list:
        """The commit markers ["<writer>/<batch>.<n>"], in no particular order."""
        return sorted(self._names(self.fs(spark), "_commits"))

    def read(self, spark: Any) -> Any:
        """Everything committed, as a DataFrame (None when nothing is)."""
        fs = self.fs(spark)
        paths = self._data_paths(fs, self.committed(spark))
        if not paths:
            return None
        return self._reader(spark).option("basePath", fs.url(DATA)).load(paths)


def exactly_once_sink(path: str, stream: Any = None,
                      config: Optional[SinkConfig] = None) -> ExactlyOnceSink:
    """The exactly-once sink at ``path`` (any Hadoop URI or a local path) for
    ``writeStream.foreachBatch``; see the module doc and ``ExactlyOnceSink``."""
    return ExactlyOnceSink(path, stream, config)


def read_committed(spark: Any, path: str, config: Optional[SinkConfig] = None) -> Any:
    """What the sink at ``path`` committed, as a DataFrame (None when nothing is)."""
    return ExactlyOnceSink(path, False, config).read(spark)
