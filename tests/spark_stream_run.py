"""A streaming query on real RayDP over a multi-node Ray, through faults: the scenario of
tests/integration/test_spark_stream_nodes.py, in a process of its own (a driver holds one Ray
connection, and this one starts its own multi-node Ray).

    python -m tests.spark_stream_run --jobs 10000 --json out.json

A Ray of ``--nodes`` raylets on loopback (``ray.cluster_utils.Cluster``), two members per
node, Spark's executors placed one per member node (``colocate_with``); ``--jobs`` jobs
published, then a query (``queue_stream`` -> ``exactly_once_sink`` through ``foreachBatch``,
with a checkpoint) in which
* the first task that reads jobs fails once after reading them (Spark retries it: the retry
  must read the same jobs, or they would stay held and the run would not finish);
* after batch ``--kill-at`` is committed, a member it read from is killed before the accept
  (its jobs come again, redelivered, and the sink drops them);
* after batch ``--crash-at`` is committed the query dies before the accept, and a new query
  restarts from the checkpoint (Spark re-runs that batch: the sink drops what it committed).
The figures go to ``--json``: published and output ids, duplicates, each row's task node
against its member's node, the executors' nodes, the sink's per-batch results.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from . import local_cluster

WAIT_S = 600.0


def _fail_first_reader(flag: str):
    """A process step whose first task attempt with rows fails once (after its rows were
    read from the queue), leaving the ids it saw in ``flag``."""
    def step(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext
        for rb in batches:
            if rb.num_rows and TaskContext.get().attemptNumber() == 0:
                try:
                    fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    fd = None
                if fd is not None:
                    with os.fdopen(fd, "w") as f:
                        json.dump(rb.column("id").to_pylist(), f)
                    raise RuntimeError("injected task failure after reading jobs")
            yield pa.RecordBatch.from_arrays(
                [*rb.columns, pc.binary_length(rb.column("body")).cast(pa.int64())],
                names=[*rb.schema.names, "size"])
    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1500, help="jobs per partition per batch")
    ap.add_argument("--kill-at", type=int, default=1)
    ap.add_argument("--crash-at", type=int, default=2)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import ray
    import raydp

    from raygroups.actors import Group
    from raygroups.integration import (QueueStreamConfig, colocate_with, exactly_once_sink,
                                       queue_stream, task_nodes)
    from pyspark.sql.types import LongType, StructField, StructType

    t0 = time.monotonic()
    c = local_cluster.start(args.nodes, num_cpus=2)
    work = tempfile.mkdtemp(prefix="rg-stream-")
    out: dict = {"jobs": args.jobs}
    g = spark = None
    try:
        g = Group.launch(f"stream-{os.getpid()}", members_per_node=2, metrics_interval_s=0)
        nodes = {m["name"]: m["node_id"] for m in g.members()}
        spark = raydp.init_spark("raygroups-stream", num_executors=args.nodes,
                                 executor_cores=1, executor_memory="1G",
                                 **colocate_with(g, executor_cores=1, executor_memory="1G"),
                                 configs={"spark.ui.enabled": "false",
                                          "spark.ui.showConsoleProgress": "false",
                                          "spark.task.maxFailures": "4"})
        spark.sparkContext.setLogLevel("FATAL")
        out["member_nodes"] = nodes
        out["executor_nodes"] = sorted({n for _, n in task_nodes(spark, 2 * args.nodes)})
        out["started_s"] = time.monotonic() - t0

        q = g.queue("jobs")
        published = set()
        for k in range(0, args.jobs, 1000):
            published |= {f"{p}:{s}" for p, s in q.publish_many(
                [f"job-{i}".encode() for i in range(k, min(k + 1000, args.jobs))])}
        flag = os.path.join(work, "failed-task.json")
        sink = exactly_once_sink(os.path.join(work, "out"))
        cfg = QueueStreamConfig(partitions=args.nodes, max_messages=args.batch,
                                acquire_timeout_s=0.5)
        events: dict = {"killed": None, "crashed": None}

        def run_batch(df, batch_id):
            res = sink.commit(df, batch_id)
            if res["abandoned"]:
                return
            stream = sink.stream()
            if batch_id >= args.kill_at and events["killed"] is None and res["committed"]:
                bound, _ = ray.get(stream.ledger.batch.remote(batch_id))
                victim = sorted(set(bound.values()))[-1]
                events["killed"] = {"member": victim, "batch": batch_id}
                g.kill(victim)
            elif (batch_id >= args.crash_at and events["crashed"] is None
                  and res["committed"]):
                events["crashed"] = {"batch": batch_id}
                raise RuntimeError("the query dies between the commit and the accept")
            sink.accept(batch_id)

        def start():
            jobs = queue_stream(spark, g, "jobs", config=cfg)
            step = _fail_first_reader(flag)
            schema = StructType(jobs.schema.fields + [StructField("size", LongType(), False)])
            return (jobs.mapInArrow(step, schema).writeStream.foreachBatch(run_batch)
                    .option("checkpointLocation", os.path.join(work, "ck")).start())

        t1 = time.monotonic()
        query = start()
        deadline = time.monotonic() + WAIT_S
        done = 0
        restarts = 0
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if not query.isActive:
                assert events["crashed"] is not None and restarts == 0, query.exception()
                out["first_query_error"] = str(query.exception()).splitlines()[0][:200]
                restarts += 1
                query = start()  # the same checkpoint: Spark re-runs the batch it lost
                continue
            if q.info().get("depth", 1):  # not everything accepted yet
                continue
            df = sink.read(spark)
            done = df.select("id").distinct().count() if df is not None else 0
            if done >= len(published):
                break
        out["elapsed_s"] = time.monotonic() - t1
        query.stop()
        rows = sink.read(spark).select("id", "member", "member_node", "task_node",
                                       "sink_batch").collect()
        ids = [r.id for r in rows]
        failed_ids = json.load(open(flag)) if os.path.exists(flag) else []
        out.update(
            published=len(published), output=len(ids), distinct=len(set(ids)),
            missing=len(published - set(ids)), extra=len(set(ids) - published),
            rows_on_member_node=sum(r.task_node == r.member_node for r in rows),
            task_nodes=sorted({r.task_node for r in rows}),
            members_read=sorted({r.member for r in rows}),
            failed_task_ids=len(failed_ids),
            failed_task_ids_in_output=sum(1 for i in failed_ids if i in set(ids)),
            restarts=restarts, events=events, results=sink.batch_results(),
            in_doubt=sink.in_doubt(spark))
        print(json.dumps({k: v for k, v in out.items() if k != "results"}, indent=1))
    finally:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        if spark is not None:
            raydp.stop_spark()
        if g is not None:
            g.shutdown()
        local_cluster.stop(c)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
