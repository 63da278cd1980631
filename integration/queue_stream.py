"""The work queue as a Spark streaming source that Spark's own micro-batch engine drives.

```python
jobs = queue_stream(spark, "orders", "jobs")          # a streaming DataFrame
q = (process(jobs).writeStream                        # process keeps "id" and "redelivered"
       .foreachBatch(exactly_once_sink("/data/out"))  # commit the output, then accept
       .option("checkpointLocation", "/data/ck").start())
q.awaitTermination(); q.lastProgress
```

PySpark 3.5 has no Python streaming DataSource API, so the source is a ticker and a map, as
Kafka's is offsets and a read: Spark's ``rate-micro-batch`` source gives every micro-batch
``partitions`` rows, deterministically from the batch id (row value ``batch * partitions +
p``), which Spark logs in the checkpoint's offset log like any source's offsets. Each row
becomes a task on an executor (``mapInArrow``) that connects its Python worker to Ray once and
acquires up to ``max_messages`` jobs from the member on its own node (Ray's node id of the
task against the members' nodes), through that member's actor handle, under the key
``"<stream>/<batch>/<p>"``. The member keeps what it handed out under that key, so any
re-run of the task (Spark's retry, a recomputed partition, the batch re-run after a restart
from the checkpoint) reads the same jobs again; the stream's ledger (``stream_ledger.py``)
keeps each key on the member it first read from.

Nothing is accepted by the tasks. The sink (``exactly_once_sink``) commits the batch's output,
then asks the stream to ``accept`` the batch: every key at its member, one call per member.
A batch that fails is ``release``d (its jobs come again, flagged redelivered). The
acquisitions are leased to the stream (its driver renews the lease on every member every
third of ``lease_s``): a task that dies holds nothing past its batch, and a driver that dies
holds nothing past its lease. The rows: ``id`` ("publisher:seq"), ``publisher``, ``seq``,
``body``, ``redelivered``, ``member`` (the member read), ``member_node`` and ``task_node``
(Ray node ids of that member and of the task).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from .stream_ledger import ledger

log = logging.getLogger("raygroups.integration")
_STREAMS: dict = {}   # stream name -> the open QueueStream of this driver
_LOCK = threading.Lock()
_WORKER: dict = {}    # in a Spark Python worker: (cluster, namespace) -> [Group, nodes, at]
NODES_TTL_S = 5.0
"""How long a task's process reuses the members' node ids it looked up."""


@dataclass
class QueueStreamConfig:
    partitions: int = 2
    """Partitions (tasks) per micro-batch, each reading up to ``max_messages`` jobs from the
    member on its executor's node. Default 2: one per executor of a 2-executor RayDP; more
    partitions read in parallel, at one more task (and Ray call) each per batch."""
    max_messages: int = 5000
    """Jobs per partition per micro-batch at most (the batch's bound: ``partitions`` times
    this, times the largest job). Larger batches amortize Spark's per-batch cost (a job, a
    commit: tens of ms) over more jobs, at more latency and memory per batch."""
    acquire_timeout_s: float = 0.5
    """How long a task waits for its first job before its partition is empty. Longer: fewer
    empty micro-batches when the queue is idle; shorter: a busy partition does not wait."""
    lease_s: float = 30.0
    """The lease on the stream's acquisitions, renewed by the driver every third of it: how
    long the jobs of a driver that died stay held before the group requeues them."""
    alternate: Optional[str] = None
    """The queue's alternate queue, when the stream declares it."""


@dataclass(frozen=True)
class StreamSpec:
    """What a task needs (pickled into the plan): plain values only."""
    cluster: str
    namespace: str
    gcs_address: str
    queue: str
    stream: str
    client: str
    partitions: int
    max_messages: int
    acquire_timeout_s: float
    lease_s: float


def _schema() -> Any:
    from pyspark.sql.types import (BinaryType, BooleanType, LongType, StringType, StructField,
                                   StructType)
    return StructType([StructField("id", StringType(), False),
                       StructField("publisher", StringType(), False),
                       StructField("seq", LongType(), False),
                       StructField("body", BinaryType(), False),
                       StructField("redelivered", BooleanType(), False),
                       StructField("member", StringType(), True),
                       StructField("member_node", StringType(), True),
                       StructField("task_node", StringType(), True)])


def batch_keys(stream: str, batch: int, partitions: int) -> list:
    """The acquisition keys of micro-batch ``batch``'s partitions."""
    return [f"{stream}/{batch}/{p}" for p in range(partitions)]


# ==========================================================================================
# in the tasks
# ==========================================================================================
def _worker_group(spec: StreamSpec, refresh: bool = False) -> tuple:
    """(Group, {member: node id}) in this process, looked up again after ``NODES_TTL_S``."""
    from raygroups.actors import Group

    from .task_view import connect_to
    connect_to(spec.gcs_address, spec.namespace)
    entry = _WORKER.get((spec.cluster, spec.namespace))
    if entry is None:
        entry = _WORKER[(spec.cluster, spec.namespace)] = [
            Group.attach(spec.cluster, spec.namespace), {}, 0.0]
    if refresh or not entry[1] or time.monotonic() - entry[2] > NODES_TTL_S:
        entry[1] = {m["name"]: m["node_id"] for m in entry[0].members()
                    if m.get("role") != "arbitrator"}  # it holds no queue to read
        entry[2] = time.monotonic()
    return entry[0], entry[1]


def _candidates(nodes: dict, here: str, part: int) -> list:
    """Members to read from, best first: those on this node (by partition), then others."""
    local = sorted(m for m, n in nodes.items() if n == here)
    others = sorted(m for m in nodes if m not in local)
    k = part % len(local) if local else 0
    rest = part % len(others) if others else 0
    return local[k:] + local[:k] + others[rest:] + others[:rest]


def read_partition(spec: StreamSpec, batch: int, part: int) -> tuple:
    """(deliveries, member, its node, this task's node) of one partition of one batch."""
    import ray

    from .colocation import this_node
    group, nodes = _worker_group(spec)
    here = this_node()
    led = ledger(spec.cluster, spec.stream, spec.namespace)
    key = f"{spec.stream}/{batch}/{part}"
    member = ray.get(led.bind.remote(batch, key, _candidates(nodes, here, part)[0]))
    tried: list = []
    while True:
        try:
            got = group.queue(spec.queue, member=member, create=False,
                              lease_s=spec.lease_s).acquire_keyed(
                key, spec.max_messages, spec.acquire_timeout_s, client=spec.client)
            return got, member, nodes.get(member), here
        except Exception as e:  # the bound member failed: bind the key to another
            tried.append(member)
            group, nodes = _worker_group(spec, refresh=True)
            left = [m for m in _candidates(nodes, here, part) if m not in tried]
            if not left:
                raise
            log.warning("%s: %s failed (%s: %s); reading from %s", key, member,
                        type(e).__name__, e, left[0])
            member = ray.get(led.bind.remote(batch, key, left[0], failed=member))


def _reader(spec: StreamSpec) -> Any:
    def read(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        for rb in batches:
            for value in rb.column("value").to_pylist():
                batch, part = divmod(int(value), spec.partitions)
                got, member, member_node, here = read_partition(spec, batch, part)
                n = len(got)
                yield pa.RecordBatch.from_arrays([
                    pa.array([f"{d.id[0]}:{d.id[1]}" for d in got], pa.string()),
                    pa.array([d.id[0] for d in got], pa.string()),
                    pa.array([int(d.id[1]) for d in got], pa.int64()),
                    pa.array([bytes(d.body) for d in got], pa.binary()),
                    pa.array([bool(d.redelivered) for d in got], pa.bool_()),
                    pa.array([member] * n, pa.string()),
                    pa.array([member_node] * n, pa.string()),
                    pa.array([here] * n, pa.string())],
                    names=["id", "publisher", "seq", "body", "redelivered", "member",
                           "member_node", "task_node"])
    return read


# ==========================================================================================
# in the driver
# ==========================================================================================
class QueueStream:
    """The driver's side of a ``queue_stream``: the lease, the ledger, and the settling of a
    batch after its output is committed (``accept``) or when it failed (``release``)."""

    def __init__(self, spark: Any, group: Any, queue: str, name: str,
                 config: QueueStreamConfig):
        import ray

        from raygroups.actors import Group
        if config.partitions < 1 or config.max_messages < 1:
            raise ValueError("partitions and max_messages must be >= 1")
        if not ray.is_initialized():
            ray.init()
        self.group = Group.attach(group) if isinstance(group, str) else group
        self.config, self.name, self.queue = config, name, queue
        self.handle = self.group.queue(queue, alternate=config.alternate, lease_s=config.lease_s)
        self.spec = StreamSpec(
            cluster=self.group.cluster, namespace=self.group.namespace,
            gcs_address=ray.get_runtime_context().gcs_address, queue=queue, stream=name,
            client=f"stream:{name}:{uuid.uuid4().hex[:12]}", partitions=config.partitions,
            max_messages=config.max_messages, acquire_timeout_s=config.acquire_timeout_s,
            lease_s=config.lease_s)
        self.ledger = ledger(self.group.cluster, name, self.group.namespace, create=True)
        ticker = (spark.readStream.format("rate-micro-batch")
                  .option("rowsPerBatch", config.partitions)
                  .option("numPartitions", config.partitions).load())
        self.df = ticker.mapInArrow(_reader(self.spec), _schema())
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, daemon=True,
                                         name=f"raygroups-stream-{name}")
        self._renewer.start()

    def __repr__(self) -> str:
        return f"QueueStream({self.group.cluster!r}, {self.queue!r}, name={self.name!r})"

    def _renew(self) -> None:
        import ray
        while not self._stop.wait(self.config.lease_s / 3):
            if not ray.is_initialized():
                return  # Ray was shut down here: a call would start it again (auto-init)
            try:
                members = self._holders()
            except Exception as e:  # noqa: BLE001 - the group is gone for now
                log.debug("stream %s: no members to renew at: %s", self.name, e)
                continue
            for m in members:
                try:
                    self.handle.on(m).renew(self.spec.client)
                except Exception as e:  # noqa: BLE001 - gone: what it held is requeued
                    log.debug("stream %s: lease renewal at %s failed: %s", self.name, m, e)

    def rebound(self, batch: int) -> bool:
        """Whether a partition of ``batch`` moved to another member (see stream_ledger)."""
        import ray
        return ray.get(self.ledger.batch.remote(batch))[1]

    def _settle_keys(self, member: str, op: str, keys: list) -> dict:
        """``settle_keys`` at ``member``; keys it still holds something under afterwards (it
        refused for now: a view change), or whose call failed (a partition, a timeout, or
        the member died), are owed by the handle (``WorkQueueHandle.settle_keys(...,
        owe=True)``): settled again while the member is in the group, at the next batch's
        settle and at each tick of the handle's lease keeper. Otherwise the member would
        hold those jobs, leased to this stream, for as long as the stream lives."""
        return self.handle.on(member).settle_keys(op, keys, owe=True)

    def owed(self) -> int:
        """Keys whose settling a member refused for now, to be settled again."""
        return self.handle.owed()["keys"]

    def settle_owed(self) -> int:
        """Settle the owed keys again now (also before each batch's settle, and at each tick
        of the handle's lease keeper); how many jobs were settled. Keys of a member no
        longer in the group are dropped (its acquisitions were requeued), and so are those
        it holds nothing under any more (an earlier try took effect); the rest stay owed."""
        return self.handle.settle_owed()

    def _holders(self) -> list:
        """The group's members that hold the queue (not its arbitrator)."""
        from raygroups.actors.placement import is_arbitrator
        return [m for m in self.group.member_names() if not is_arbitrator(m)]

    def _settle_at(self, member: str, op: str, mine: list, orphans: list) -> dict:
        """Settle a batch's keys bound at ``member`` (and release the orphans a moved key
        left there): {"settled", "failed", "gone"}."""
        got = {"settled": 0, "failed": 0, "gone": False}
        try:
            if mine:
                got.update(self._settle_keys(member, op, mine))
            if orphans:
                self._settle_keys(member, "release", orphans)
        except Exception as e:  # noqa: BLE001 - owed (settled again while the member is in
            got["gone"] = bool(mine)  # the group; its jobs requeue if it left)
            log.warning("stream %s: %s at %s failed: %s", self.name, op, member, e)
        return got

    def _settle(self, batch: int, op: str) -> dict:
        import ray
        self.settle_owed()
        bound, rebound = ray.get(self.ledger.batch.remote(batch))
        every = batch_keys(self.name, batch, self.config.partitions)
        by_member: dict = {}
        for key, member in bound.items():
            by_member.setdefault(member, []).append(key)
        members = sorted(set(by_member) | (set(self._holders()) if rebound else set()))
        calls = [(m, op, by_member.get(m, []),
                  [k for k in every if k not in by_member.get(m, [])] if rebound else [])
                 for m in members]
        with ThreadPoolExecutor(max(1, len(calls))) as pool:  # the members at once
            done = list(pool.map(lambda c: self._settle_at(*c), calls))
        ray.get(self.ledger.forget.remote(batch))
        return {"settled": sum(d["settled"] for d in done),
                "failed": sum(d["failed"] for d in done),
                "failed_members": [m for (m, *_), d in zip(calls, done)
                                   if d["failed"] or d["gone"]]}

    def accept(self, batch: int) -> dict:
        """Accept everything micro-batch ``batch`` read (after its output is committed):
        {"settled": jobs, "failed": jobs a member refused, "failed_members": members that
        failed (died: their jobs were not accepted and come again, flagged redelivered)}.
        Jobs a live member refused for now are owed: accepted again later (``settle_owed``)."""
        return self._settle(batch, "accept")

    def release(self, batch: int) -> dict:
        """Put everything micro-batch ``batch`` read back on the queue (the batch failed)."""
        return self._settle(batch, "release")

    def close(self, forget: bool = False) -> None:
        """Stop renewing the lease (what the stream holds is requeued when it runs out).
        ``forget``: also end the ledger (a query restarted later then reads afresh)."""
        self._stop.set()
        with _LOCK:
            if _STREAMS.get(self.name) is self:
                del _STREAMS[self.name]
        if forget:
            import ray
            ray.kill(self.ledger)


def queue_stream(spark: Any, group: Any, queue: str, name: Optional[str] = None,
                 config: Optional[QueueStreamConfig] = None) -> Any:
    """A streaming DataFrame of the jobs of ``queue`` in ``group`` (a name or a ``Group``),
    read by the executors' tasks from the members on their nodes (see the module doc). Its
    ``queue_stream`` attribute is the ``QueueStream``. ``name``: the stream's name (default:
    the queue's), one query at a time per name: a query restarted from its checkpoint uses
    the same name (this driver's earlier stream of that name is closed; the new one takes over
    what it held)."""
    cfg = config or QueueStreamConfig()
    name = name or queue
    if "/" in name:
        raise ValueError(f"a stream name has no '/': {name!r}")
    stream = QueueStream(spark, group, queue, name, cfg)
    with _LOCK:
        old = _STREAMS.get(name)
        _STREAMS[name] = stream
    if old is not None:
        old.close()
    stream.df.queue_stream = stream
    return stream.df


def open_stream(name: Optional[str] = None) -> QueueStream:
    """This driver's open stream ``name`` (None: the only one). ValueError when there is
    none, or several and no name."""
    with _LOCK:
        if name is not None:
            if name not in _STREAMS:
                raise ValueError(f"no open queue stream {name!r} in this driver "
                                 f"(open: {sorted(_STREAMS)})")
            return _STREAMS[name]
        if len(_STREAMS) != 1:
            raise ValueError(f"{len(_STREAMS)} queue streams are open in this driver "
                             f"({sorted(_STREAMS)}): name the sink's stream")
        return next(iter(_STREAMS.values()))
