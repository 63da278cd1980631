"""The Spark pipeline of the fault campaign across hosts: jobs published to a work queue and
processed by Spark on RayDP in micro-batches (``QueueSource`` into a ``DedupSink``, as in the
README's demo), on the head host, while the faults go on.

    python -m tests.hosts.pipeline --group G --out hist.jsonl --sink DIR --stop STOPFILE

Each publish is recorded as the clients record theirs (tests/hosts/client.py: ``op``
"pipe_publish", ``at`` invoke | ok | fail | info) and each micro-batch's result as ``op``
"pipe_batch". Once ``--stop`` exists it publishes no more, processes until the queue is empty
(depth 0 three times running), records ``op`` "pipe_done" and exits 0.

Like a streaming job under a supervisor, the process exits 3 when Spark cannot start or a
batch hangs past ``--stuck-s`` (a fault took Spark's master or executor, or the Ray driver,
down), and bed.py starts it again, with a fresh Spark session, into the same sink: what it
had committed but not accepted comes again and the sink drops it. A process killed with its
host starts again when the host boots. The checker (tests/hosts/checker.py,
``pipeline_once``) reads the sink's Parquet files itself.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
import uuid

from .client import Recorder, recorded

QUEUE = "pipeline"
RESTART = 3


class Watchdog:
    """Exits the process (``RESTART``) when a step takes longer than its bound."""

    def __init__(self, rec: Recorder):
        self.rec = rec
        self.step, self.deadline = "", None
        threading.Thread(target=self._run, daemon=True).start()

    def arm(self, step: str, seconds: float) -> None:
        self.step, self.deadline = step, time.monotonic() + seconds

    def _run(self) -> None:
        while True:
            time.sleep(1.0)
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.rec("pipe_batch", "info", err=f"stuck in {self.step}: restarting")
                os._exit(RESTART)


def stopped_for(path: str) -> float:
    """Seconds since the stop file appeared (-1: not there)."""
    try:
        return time.time() - os.path.getmtime(path)
    except OSError:
        return -1.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--per-batch", type=int, default=20, help="jobs published per round")
    ap.add_argument("--drain-s", type=float, default=150.0,
                    help="after --stop, give up processing after this long")
    ap.add_argument("--stuck-s", type=float, default=90.0,
                    help="a Spark start or a batch that takes longer restarts the process")
    a = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    rec = Recorder(a.out, f"pipe-{uuid.uuid4().hex[:6]}")
    if stopped_for(a.stop) > a.drain_s:
        rec("pipe_done", "fail")
        return 0
    dog = Watchdog(rec)
    dog.arm("the Spark start", a.stuck_s)
    import ray
    import raydp

    from raygroups.actors import Group
    from raygroups.integration.queue_source import DedupSink, QueueSource, QueueSourceConfig
    from raygroups.integration.spark_session import start_spark
    seq = 0
    try:
        ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        g = Group.attach(a.group)
        if stopped_for(a.stop) < 0:  # jobs wait on the queue while Spark starts (seconds)
            publish(g.queue(QUEUE, lease_s=10.0), rec, a.per_batch, seq)
            seq += a.per_batch
        # start_spark: Spark's master actor, whose node's raylet RayDP gives the driver JVM,
        # on this driver's node (after a head restart its raylet's socket is named anew)
        spark = start_spark("campaign-pipeline", executors=1, memory="512M",
                            configs={"spark.sql.shuffle.partitions": "2"})
    except Exception as e:  # a fault took Spark's master or executor down as it started
        rec("spark", "info", err=f"{type(e).__name__}: {e}"[:200],
            trace=traceback.format_exc()[-2000:])
        return RESTART
    rec("spark", "ok")
    sink = DedupSink(spark, a.sink)
    source = q = None
    empty = failures = 0
    while True:
        stopped = stopped_for(a.stop)
        if empty >= 3 or stopped > a.drain_s:
            break
        dog.arm("a micro-batch", a.stuck_s)
        try:
            if source is None:
                q = g.queue(QUEUE, lease_s=10.0)
                source = QueueSource(spark, g, QUEUE, sink,
                                     QueueSourceConfig(max_messages=100, acquire_timeout_s=1.0))
            if stopped < 0:
                publish(q, rec, a.per_batch, seq)
                seq += a.per_batch
            res = source.run_batch(lambda df: df.select("id", "body"))
            rec("pipe_batch", "ok", size=res.size, written=res.written,
                duplicates=res.duplicates, accepted=res.accepted, unsettled=res.unsettled,
                pending=res.pending, retried=res.retried, errors=res.errors[:3])
            empty = empty + 1 if stopped >= 0 and res.size == 0 and q.depth() == 0 else 0
            failures = 0
        except Exception as e:  # the member or the group failed: try again
            rec("pipe_batch", "info", err=f"{type(e).__name__}: {e}"[:200])
            source = q = None
            empty = 0
            failures += 1
            if failures >= 5:  # Spark itself, most likely: a fresh session
                return RESTART
            time.sleep(1.0)
    dog.arm("the end", a.stuck_s)
    rec("pipe_done", "ok" if empty >= 3 else "fail")
    raydp.stop_spark()
    return 0


def publish(q, rec: Recorder, n: int, seq: int) -> None:
    for k in range(seq + 1, seq + n + 1):
        body = f"{rec.client}:{k}"
        recorded(rec, "pipe_publish", lambda: q.publish(body.encode()), body=body)


if __name__ == "__main__":
    sys.exit(main())
