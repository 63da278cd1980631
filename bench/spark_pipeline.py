"""Spark the Spark way, measured: routing by view, the queue -> stream -> sink pipeline, and
the pipeline across a member crash.

On a local Ray cluster (one node, loopback; started here) with RayDP Spark (two executors of
one core) and a 3-member group:

* routing: ``repartition_by_view`` (rendezvous weights as JVM expressions, a native shuffle
  to the owners' partitions) on ``--rows`` rows against ``df.repartition("key")`` on the same
  rows (both written to Spark's ``noop`` sink, best of ``--repeat``); beside them,
  ``by_view`` alone (no shuffle) and a Python UDF calling ``owner()`` per row (the former
  way) on a tenth of the rows. Target: repartition_by_view >= 0.5x repartition("key").
* pipeline, for 100 B and 1 KB jobs (after a warm-up query that connects every Spark Python
  worker to Ray): ``--jobs`` jobs published, then drained by a streaming query
  (``queue_stream`` -> ``foreachBatch(exactly_once_sink)``: jobs/s until every job is
  accepted, after the first micro-batch and from the query's start) against the ceiling, the
  same number of rows of the same size written from an in-memory (cached) DataFrame by the
  same sink in batches of the same size (best of ``--repeat`` each, alternating, after a
  warm-up of both); beside them the same rows made by Python tasks without the queue
  (``mapInArrow``, 2 per batch: Spark's Python path alone) through the same sink, and the
  driver-side ``read_queue`` path (``QueueSource`` + ``DedupSink``). Target: stream >= 0.5x
  the ceiling after the first micro-batch (a query runs long; its start is printed beside).
  Beside it, the stream's CPU per job by process: the members, the executors' JVMs, the
  Spark Python workers (the tasks), the driver (its Python and its JVM) and Ray's own.
* crash: the 100 B pipeline (half of ``--jobs``, in micro-batches of an eighth of them) with
  one of the members it reads from killed once 40% of the jobs are accepted: jobs/s before,
  during the dip (from the kill until the first batch after it that was committed and
  wholly accepted) and after, and that recovery time.

    python bench/spark_pipeline.py [--rows 10000000] [--jobs 90000] [--per-partition 10000]
                                   [--repeat 2] [--quick] [--json out]
"""
from __future__ import annotations

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # a bench module would shadow the standard library's

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

ROUTING_TARGET = 0.5
PIPELINE_TARGET = 0.5
MEMBERS = [f"member-{i}" for i in range(5)]
WAIT_S = 900.0
WARM_BATCHES = 6  # batches of each size through the ceiling and the Python path, unmeasured


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target >= {target}x: {'met' if ratio >= target else 'NOT met'})"


def _timed(action) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def bench_routing(spark, rows: int, repeat: int) -> dict:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    from raygroups.integration import by_view, owner, repartition_by_view
    keys = max(1, rows // 10)
    df = spark.range(rows).select((F.col("id") % keys).alias("key"), F.col("id").alias("v"))

    def noop(d):
        return lambda: d.write.format("noop").mode("overwrite").save()
    best = {"repartition": float("inf"), "repartition_by_view": float("inf"),
            "by_view": float("inf")}
    for _ in range(repeat):  # alternate, best of each: the machine is shared
        best["repartition"] = min(best["repartition"], _timed(noop(df.repartition("key"))))
        best["repartition_by_view"] = min(best["repartition_by_view"], _timed(
            noop(repartition_by_view(df, "key", MEMBERS))))
        best["by_view"] = min(best["by_view"], _timed(noop(by_view(df, "key", MEMBERS))))
    udf_rows = max(1, rows // 10)
    own = F.udf(lambda k: owner(k, MEMBERS), StringType())
    udf_s = _timed(noop(df.limit(udf_rows).withColumn("owner", own("key"))))
    out = {k: {"s": v, "rows_per_s": rows / v} for k, v in best.items()}
    out["python_udf"] = {"s": udf_s, "rows_per_s": udf_rows / udf_s, "rows": udf_rows}
    ratio = out["repartition_by_view"]["rows_per_s"] / out["repartition"]["rows_per_s"]
    out["ratio"], out["target"] = ratio, ROUTING_TARGET
    print(f"\nrouting {rows:,} rows ({keys:,} keys) over {len(MEMBERS)} members "
          f"(best of {repeat}):")
    for name, label in (("repartition", 'df.repartition("key")'),
                        ("repartition_by_view", "repartition_by_view (JVM expressions)"),
                        ("by_view", "by_view, no shuffle"),
                        ("python_udf", f"Python UDF owner() ({udf_rows:,} rows)")):
        print(f"  {label:<40} {out[name]['rows_per_s']:>14,.0f} rows/s  ({out[name]['s']:.1f} s)")
    print(f"  repartition_by_view / repartition(\"key\"): {verdict(ratio, ROUTING_TARGET)}")
    return out


def _publish(q, n: int, size: int) -> set:
    body = b"x" * size
    ids = set()
    for k in range(0, n, 2000):
        ids |= {f"{p}:{s}" for p, s in q.publish_many([body] * min(2000, n - k))}
    return ids


ROLES = ("members", "executors (JVM)", "Python tasks", "driver (Python + JVM)", "Ray itself",
         "other")


def _role(p, me: int) -> str:
    """Who a process is, for the CPU split: a member actor, a Spark executor (RayDP's Java
    Ray actor), a Spark Python worker, the driver (this process and its JVM), Ray's own."""
    try:
        cmd = " ".join(p.cmdline())
        if p.pid == me or (p.ppid() == me and "java" in p.name()):
            return "driver (Python + JVM)"
    except Exception:  # noqa: BLE001 - gone meanwhile
        return "other"
    if "MemberActor" in cmd:
        return "members"
    if "java" in cmd and ("raydp" in cmd.lower() or "RayDPExecutor" in cmd):
        return "executors (JVM)"
    if "pyspark" in cmd:
        return "Python tasks"
    if any(x in cmd for x in ("raylet", "gcs_server", "ray::", "dashboard", "log_monitor")):
        return "Ray itself"
    return "other"


def cpu_snapshot() -> dict:
    """{pid: (role, CPU seconds so far)} of every process of this machine's user."""
    import psutil
    me, out = os.getpid(), {}
    for p in psutil.process_iter():
        try:
            t = p.cpu_times()
            out[p.pid] = (_role(p, me), t.user + t.system)
        except Exception:  # noqa: BLE001 - gone meanwhile
            continue
    return out


def cpu_split(before: dict, after: dict) -> dict:
    """CPU seconds per role between two snapshots (a process that ended meanwhile is not
    counted; one that began is counted whole)."""
    out = dict.fromkeys(ROLES, 0.0)
    for pid, (role, t) in after.items():
        out[role] += t - before.get(pid, (role, 0.0))[1]
    return out


def _drain(spark, g, queue: str, n: int, work: str, per_partition: int,
           kill_at: float = None) -> dict:
    """A streaming query from the queue to the sink until ``n`` jobs are accepted."""
    from pyspark.sql import functions as F

    from raygroups.integration import QueueStreamConfig, exactly_once_sink, queue_stream
    q = g.queue(queue)
    jobs = queue_stream(spark, g, queue, config=QueueStreamConfig(
        partitions=2, max_messages=per_partition, acquire_timeout_s=0.5))
    sink = exactly_once_sink(os.path.join(work, "out"))
    killed: dict = {}
    cpu0 = cpu_snapshot()
    t0 = time.perf_counter()
    query = (jobs.withColumn("size", F.length("body")).writeStream.foreachBatch(sink)
             .option("checkpointLocation", os.path.join(work, "ck")).start())
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            accepted = sum(r.get("accepted") or 0 for r in sink.batch_results())
            if accepted >= n and q.info().get("depth", 1) == 0:
                break
            if kill_at is not None and not killed and accepted >= kill_at * n:
                victim = sorted(g.member_names())[1]  # partition 1 reads from it
                killed.update(member=victim, at=time.time(), accepted=accepted)
                threading.Thread(target=g.kill, args=(victim,), daemon=True).start()
            if not query.isActive or time.monotonic() > deadline:
                raise RuntimeError(f"the query stopped or timed out: {query.exception()}")
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        cpu = cpu_split(cpu0, cpu_snapshot())
    finally:
        query.stop()
        jobs.queue_stream.close(forget=True)
    rows = sink.read(spark).select("id").distinct().count()
    results = sink.batch_results()
    ends = [(r["accepted_at"], r["accepted"]) for r in results if r.get("accepted")]
    return {"s": elapsed, "jobs_per_s": n / elapsed, "rows": rows, "killed": killed,
            "steady_jobs_per_s": _steady(ends), "results": results,
            "cpu_us_per_job": {k: v / n * 1e6 for k, v in cpu.items()}}


def _steady(ends: list) -> float:
    """Jobs/s after the first micro-batch: the jobs of batches 2..k over the time from the
    end of batch 1 to the end of batch k (``ends``: (end time, jobs) per batch); the query's
    start and its first batch (planning, code generation) are left out."""
    ends = sorted(ends)
    if len(ends) < 2:
        return float("nan")
    return sum(j for _, j in ends[1:]) / max(ends[-1][0] - ends[0][0], 1e-9)


def _ceiling(spark, n: int, size: int, batch: int, work: str) -> dict:
    """The same rows from an in-memory DataFrame through the same sink, in the same
    batches."""
    from pyspark.sql import functions as F

    from raygroups.integration import exactly_once_sink
    df = spark.range(n).select(
        F.concat(F.lit("p:"), F.col("id").cast("string")).alias("id"),
        F.lit("p").alias("publisher"), F.col("id").alias("seq"),
        F.expr(f"cast(repeat('x', {size}) as binary)").alias("body"),
        F.lit(False).alias("redelivered"), F.lit("m").alias("member"),
        F.lit("n").alias("member_node"), F.lit("n").alias("task_node"),
        F.lit(size).cast("long").alias("size")).cache()
    df.count()
    sink = exactly_once_sink(os.path.join(work, "ceiling"), stream=False)
    t0 = time.perf_counter()
    ends = []
    for b, lo in enumerate(range(0, n, batch)):
        sink.commit(df.where((F.col("seq") >= lo) & (F.col("seq") < lo + batch)), b)
        ends.append((time.perf_counter(), min(batch, n - lo)))
    elapsed = time.perf_counter() - t0
    df.unpersist()
    return {"s": elapsed, "jobs_per_s": n / elapsed, "steady_jobs_per_s": _steady(ends)}


def _python_rows(per_task: int, size: int):
    """A mapInArrow step that makes ``per_task`` rows of ``size`` bytes per input row, in
    the stream's schema (no queue: Spark's Python path alone)."""
    def gen(batches):
        import pyarrow as pa
        for rb in batches:
            for t in rb.column("id").to_pylist():
                n = per_task
                ids = [f"p{t}:{i}" for i in range(n)]
                yield pa.RecordBatch.from_arrays(
                    [pa.array(ids), pa.array(["p"] * n), pa.array(range(n), pa.int64()),
                     pa.array([b"x" * size] * n, pa.binary()), pa.array([False] * n),
                     pa.array(["m"] * n), pa.array(["n"] * n), pa.array(["n"] * n),
                     pa.array([size] * n, pa.int64())],
                    names=["id", "publisher", "seq", "body", "redelivered", "member",
                           "member_node", "task_node", "size"])
    return gen


def _python_source(spark, n: int, size: int, per_partition: int, work: str) -> dict:
    """The same rows made by Python tasks (2 per batch, as the stream's) through the same
    sink: what Spark's Python path costs without the queue."""
    from raygroups.integration import exactly_once_sink
    schema = ("id string, publisher string, seq long, body binary, redelivered boolean, "
              "member string, member_node string, task_node string, size long")
    sink = exactly_once_sink(os.path.join(work, "python"), stream=False)
    t0 = time.perf_counter()
    ends = []
    for b, lo in enumerate(range(0, n, 2 * per_partition)):
        rows = min(2 * per_partition, n - lo)
        df = spark.range(b * 2, b * 2 + 2, 1, 2).mapInArrow(
            _python_rows(rows // 2, size), schema)
        sink.commit(df, b)
        ends.append((time.perf_counter(), rows))
    elapsed = time.perf_counter() - t0
    return {"s": elapsed, "jobs_per_s": n / elapsed, "steady_jobs_per_s": _steady(ends)}


def _read_queue_path(spark, g, queue: str, n: int, batch: int, work: str) -> dict:
    from raygroups.integration import DedupSink, QueueSource, QueueSourceConfig
    source = QueueSource(spark, g, queue, DedupSink(spark, os.path.join(work, "dedup")),
                         QueueSourceConfig(max_messages=batch, acquire_timeout_s=2.0))
    done = 0
    t0 = time.perf_counter()
    while done < n:
        res = source.run_batch(lambda df: df)
        if res.size == 0:
            raise RuntimeError(f"the queue ran dry after {done} of {n} jobs")
        done += res.accepted
    elapsed = time.perf_counter() - t0
    return {"s": elapsed, "jobs_per_s": n / elapsed}


def bench_pipeline(spark, g, jobs: int, sizes: list, repeat: int, per_partition: int) -> dict:
    batch = 2 * per_partition
    out = {}
    print(f"\npipeline: {jobs:,} jobs, 2 executors, micro-batches of up to {batch:,} jobs "
          f"(2 partitions x {per_partition:,}), best of {repeat}:")
    warm = tempfile.mkdtemp(prefix="rg-bench-warm-")
    try:  # every Python worker connected to Ray and holding its imports, as in a long query
        _publish(g.queue("bench-warmup"), 1000, 100)
        _drain(spark, g, "bench-warmup", 1000, warm, 500)
        for size in sizes:  # the JVM's code warm too: one batch was not enough (a first
            # pass of 3 batches ran at a fifth to a half of the next passes' rate)
            _ceiling(spark, WARM_BATCHES * batch, size, batch, warm)
            _python_source(spark, WARM_BATCHES * batch, size, per_partition, warm)
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    for size in sizes:
        stream = ceiling = python = None
        for r in range(repeat):  # alternate, best of each: the machine is shared
            work = tempfile.mkdtemp(prefix="rg-bench-pipe-")
            try:
                qname = f"bench-{size}-{r}"
                _publish(g.queue(qname), jobs, size)
                got = _drain(spark, g, qname, jobs, os.path.join(work, "s"), per_partition)
                if stream is None or got["jobs_per_s"] > stream["jobs_per_s"]:
                    stream = got
                got = _ceiling(spark, jobs, size, batch, work)
                if ceiling is None or got["jobs_per_s"] > ceiling["jobs_per_s"]:
                    ceiling = got
                got = _python_source(spark, jobs, size, per_partition, work)
                if python is None or got["jobs_per_s"] > python["jobs_per_s"]:
                    python = got
            finally:
                shutil.rmtree(work, ignore_errors=True)
        work = tempfile.mkdtemp(prefix="rg-bench-pipe-")
        try:
            _publish(g.queue(f"bench-{size}-old"), jobs, size)
            old = _read_queue_path(spark, g, f"bench-{size}-old", jobs, batch, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        ratio = stream["steady_jobs_per_s"] / ceiling["steady_jobs_per_s"]
        whole = stream["jobs_per_s"] / ceiling["jobs_per_s"]
        out[size] = {"stream": {k: v for k, v in stream.items() if k != "results"},
                     "ceiling": ceiling, "python_source": python, "read_queue": old,
                     "ratio": ratio, "ratio_to_python_source":
                     stream["steady_jobs_per_s"] / python["steady_jobs_per_s"],
                     "ratio_with_start": whole, "target": PIPELINE_TARGET,
                     "exactly_once": stream["rows"] == jobs}
        print(f"  {size:>5} B jobs, after the first micro-batch: stream "
              f"{stream['steady_jobs_per_s']:>9,.0f} jobs/s | in-memory ceiling "
              f"{ceiling['steady_jobs_per_s']:>9,.0f} jobs/s | the rows made in Python tasks, "
              f"no queue {python['steady_jobs_per_s']:>9,.0f} jobs/s "
              f"(stream / that: {out[size]['ratio_to_python_source']:.2f}x)")
        print(f"          with the query's start and first batch: stream "
              f"{stream['jobs_per_s']:>9,.0f} jobs/s | ceiling {ceiling['jobs_per_s']:>9,.0f} "
              f"jobs/s | read_queue path {old['jobs_per_s']:>9,.0f} jobs/s "
              f"({stream['rows']:,} distinct jobs in the stream's output)")
        split = stream["cpu_us_per_job"]
        print(f"          the stream's CPU per job (µs, whole query; {sum(split.values()):.1f} in "
              f"all, two cores): " + ", ".join(f"{k} {v:.1f}" for k, v in split.items()))
        print(f"          stream / ceiling: {verdict(ratio, PIPELINE_TARGET)}; with the start "
              f"{whole:.2f}x; stream / read_queue path "
              f"{stream['jobs_per_s'] / old['jobs_per_s']:.2f}x")
    return out


def bench_crash(spark, g, jobs: int) -> dict:
    work = tempfile.mkdtemp(prefix="rg-bench-crash-")
    per_partition = max(1, jobs // 8)  # 4 micro-batches or more: a timeline around the kill
    try:
        q = g.queue("bench-crash")
        _publish(q, jobs, 100)
        run = _drain(spark, g, "bench-crash", jobs, work, per_partition, kill_at=0.4)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kill = run["killed"]
    res = [r for r in run["results"] if r.get("accepted_at")]
    start = min(r["started_at"] for r in run["results"])
    before = [r for r in res if r["accepted_at"] <= kill["at"]]
    after = [r for r in res if r["accepted_at"] > kill["at"]]
    healed = next((r for r in after if r["started_at"] > kill["at"] and r["accepted"]
                   and not r["failed_members"] and not r["not_accepted"]), None)
    end = max(r["accepted_at"] for r in res)

    def rate(rs, t0, t1):
        return sum(r["accepted"] for r in rs) / max(t1 - t0, 1e-9)
    recovered_at = healed["accepted_at"] if healed else end
    dip = [r for r in after if r["accepted_at"] <= recovered_at]
    rest = [r for r in after if r["accepted_at"] > recovered_at]
    out = {"jobs": jobs, "killed": kill["member"], "recovery_s": recovered_at - kill["at"],
           "before_jobs_per_s": rate(before, start, kill["at"]),
           "dip_jobs_per_s": rate(dip, kill["at"], recovered_at),
           "after_jobs_per_s": rate(rest, recovered_at, end) if rest else None,
           "exactly_once": run["rows"] == jobs,
           "dropped": sum(r["dropped"] for r in run["results"]),
           "batches": len(run["results"])}
    print(f"\ncrash: {jobs:,} jobs of 100 B, {kill['member']} killed after "
          f"{kill['accepted']:,} accepted:")
    print(f"  before {out['before_jobs_per_s']:,.0f} jobs/s | dip {out['dip_jobs_per_s']:,.0f} "
          f"jobs/s for {out['recovery_s']:.1f} s (kill -> first batch after it committed and "
          f"wholly accepted) | after "
          + (f"{out['after_jobs_per_s']:,.0f} jobs/s" if rest else "- (drained in the dip)"))
    print(f"  {run['rows']:,} distinct jobs in the output of {jobs:,} "
          f"({'exactly once' if out['exactly_once'] else 'NOT exactly once'}); "
          f"{out['dropped']} redelivered duplicates dropped")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows to route")
    ap.add_argument("--jobs", type=int, default=90_000, help="jobs per pipeline run")
    ap.add_argument("--per-partition", type=int, default=10_000,
                    help="jobs per partition per micro-batch (2 partitions)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs of each routing and pipeline measurement (best of)")
    ap.add_argument("--only", choices=("routing", "pipeline", "crash"), action="append")
    ap.add_argument("--quick", action="store_true",
                    help="1 M rows, 8,000 jobs in batches of 4,000, one run")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.jobs, args.repeat, args.per_partition = 1_000_000, 8_000, 1, 2_000
    only = set(args.only or ("routing", "pipeline", "crash"))
    from raygroups.actors.ray_compat import init_local
    ray = init_local(num_cpus=4, object_store_memory=300 * 1024 * 1024)
    from raygroups.actors import Group
    from raygroups.integration.spark_session import start_spark, stop_spark
    spark = start_spark("bench-spark-pipeline", memory="2G", log_level="FATAL",
                        configs={"spark.sql.shuffle.partitions": "8"})
    g = Group.launch(f"bench-pipe-{os.getpid()}", members=3, metrics_interval_s=0)
    figures: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        print(f"RayDP: 2 executors of 1 core; group {g.cluster} of 3 members; "
              f"{figures['date']}")
        if "routing" in only:
            figures["routing"] = bench_routing(spark, args.rows, args.repeat)
        if "pipeline" in only:
            figures["pipeline"] = bench_pipeline(spark, g, args.jobs, [100, 1024], args.repeat,
                                                 args.per_partition)
        if "crash" in only:
            figures["crash"] = bench_crash(spark, g, args.jobs // 2)
    finally:
        for stop in (g.shutdown, stop_spark, ray.shutdown):
            stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
