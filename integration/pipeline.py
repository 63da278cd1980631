"""A Spark pipeline on RayDP that uses all of the integration (the README's
demo runs it):

1. follow the group's views (``ViewFeed``) and wait for a stable view;
2. generate records and route them to the owning members (``repartition_by_view``: one
   partition per member); each partition's task checks that its view is still current;
3. publish queue jobs and process them in micro-batches (``QueueSource``): each batch
   re-plans on the current stable view (``by_view``), its output goes into a ``DedupSink``,
   and only then are its jobs accepted;
4. mid-pipeline (``kill_at_batch``), the member that holds a batch's jobs is killed after the
   batch's output is computed: its jobs are not accepted, the group requeues them, the next
   batch re-plans on the new view, and the redelivered jobs are dropped from the output as
   duplicates: every job once;
5. the view history as a DataFrame.

```python
summary = run_pipeline(spark, group, PipelineConfig(jobs=300))
```
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .partitioning import by_view, repartition_by_view
from .queue_source import DedupSink, QueueSource, QueueSourceConfig
from .rendezvous import owner
from .view_feed import ViewFeed
from .view_history import view_history_df


@dataclass
class PipelineConfig:
    records: int = 20_000
    """Generated records routed by view."""
    customers: int = 2_000
    """Distinct keys (customer ids) among the records and jobs."""
    jobs: int = 300
    """Queue jobs published and processed."""
    batch: int = 100
    """Jobs per micro-batch at most."""
    quiet_s: float = 0.5
    """The stable-view barrier before each stage: no view change for this long."""
    kill_at_batch: Optional[int] = 1
    """Kill (``Group.kill``, no restart) the member holding this batch's jobs before the
    batch commits (0-based; None: kill nobody)."""
    queue: str = "pipeline-jobs"
    output: Optional[str] = None
    """The sink's directory (None: a temporary one, removed at the end)."""
    max_batches: int = 50
    """Give up after this many micro-batches (a bound, not an expectation)."""


def _check_partitions(routed: Any, bc: Any) -> list:
    """Per partition: (index, rows, owners, the view still current?)."""
    def run(i, rows):
        owners = set()
        n = 0
        for r in rows:
            n += 1
            owners.add(r.owner)
        yield (i, n, sorted(owners), bc.value.is_current())
    return routed.rdd.mapPartitionsWithIndex(run).collect()


def run_pipeline(spark: Any, group: Any, config: Optional[PipelineConfig] = None,
                 say: Callable[[str], Any] = print) -> dict:
    """Run the pipeline on ``group`` (a ``Group``); a summary dict."""
    from pyspark.sql import functions as F
    cfg = config or PipelineConfig()
    out_dir = cfg.output or tempfile.mkdtemp(prefix="raygroups-pipeline-")
    feed = ViewFeed(spark, group)
    summary: dict = {"batches": []}
    try:
        view = feed.wait_stable(cfg.quiet_s)
        say(f"view {view.label}: {list(view.members)} (stable for {cfg.quiet_s}s)")

        records = spark.range(cfg.records).select(
            F.col("id").alias("record"), (F.col("id") % cfg.customers).alias("customer_id"),
            ((F.col("id") * 37) % 1000 / 10).alias("amount"))
        routed = repartition_by_view(records, "customer_id", view)
        bc = feed.broadcast()
        parts = _check_partitions(routed, bc)
        say(f"{cfg.records} records routed to their owners ({len(parts)} partitions, one per "
            f"member):")
        for i, n, owners, current in parts:
            say(f"  partition {i}: {n} records of {owners or '-'} "
                f"(view {'current' if current else 'SUPERSEDED'})")
        summary["routed"] = {o[0]: n for _, n, o, _ in parts if o}

        q = group.queue(cfg.queue)
        bodies = [json.dumps({"job": i, "customer_id": i % cfg.customers}).encode()
                  for i in range(cfg.jobs)]
        ids = set()
        for k in range(0, len(bodies), 500):
            ids |= {f"{p}:{s}" for p, s in q.publish_many(bodies[k:k + 500])}
        say(f"published {len(ids)} jobs to queue {cfg.queue!r}")

        sink = DedupSink(spark, out_dir)
        source = QueueSource(spark, group, cfg.queue, sink,
                             QueueSourceConfig(max_messages=cfg.batch))
        planned: list = []
        killed: dict = {}

        def process(df):
            v = feed.wait_stable(cfg.quiet_s)
            planned.append(v)
            jobs = df.withColumn("customer_id", F.get_json_object(
                F.col("body").cast("string"), "$.customer_id").cast("long"))
            return by_view(jobs, "customer_id", v).withColumn(
                "result", F.col("customer_id") * 2)

        def kill_mid_pipeline(batch):
            n = len(summary["batches"])
            if cfg.kill_at_batch is not None and n == cfg.kill_at_batch and not killed:
                victim = batch.deliveries[0].member
                killed["member"] = victim
                say(f"  batch {n}: output computed; killing {victim} (it holds the batch's "
                    f"{len(batch)} jobs) before the commit")
                group.kill(victim)

        for _ in range(cfg.max_batches):
            res = source.run_batch(process, before_commit=kill_mid_pipeline)
            if res.size == 0:
                have = sink.read()
                if have is not None and have.count() >= len(ids):
                    break
                continue
            res.view = planned[-1].label
            summary["batches"].append(res)
            say(f"  batch {len(summary['batches']) - 1}: {res.size} jobs on view {res.view} "
                f"{list(planned[-1].members)}: {res.redelivered} redelivered, {res.written} "
                f"written, {res.duplicates} duplicates dropped, {res.accepted} accepted"
                + (f", {res.unsettled + res.pending} not accepted ({res.pending} to accept "
                   f"again while their member is in the group, {res.unsettled} no longer "
                   f"held: requeued)" if res.unsettled + res.pending else ""))

        out = sink.read().select("id", "owner").collect()
        got = [r.id for r in out]
        summary.update(jobs=len(ids), output=len(got), unique=len(set(got)),
                       missing=len(ids - set(got)), killed=killed.get("member"))
        say(f"output: {len(got)} rows, {len(set(got))} distinct jobs of {len(ids)} published, "
            f"{summary['missing']} missing: "
            + ("every job exactly once" if len(got) == len(set(got)) == len(ids) and
               not summary["missing"] else "NOT exactly once"))
        if killed:
            now = feed.wait_stable(cfg.quiet_s)
            keys = range(cfg.customers)
            moved = [k for k in keys if owner(k, view.members) != owner(k, now.members)]
            theirs = sum(1 for k in moved if owner(k, view.members) == killed["member"])
            say(f"re-planned on view {now.label}: {len(moved)} of {cfg.customers} customers "
                f"({100 * len(moved) / cfg.customers:.0f}%) changed owner, {theirs} of them "
                f"{killed['member']}'s")
            summary["moved_keys"] = len(moved)
            summary["moved_from_killed"] = theirs
        hist = view_history_df(spark, group)
        say("view history (a DataFrame; per view: members installing it, size, primary, "
            "install spread):")
        rows = hist.groupBy("view_id", "counter").agg(
            F.count("*").alias("installed_by"), F.max("size").alias("size"),
            F.min(F.col("primary").cast("int")).alias("primary"),
            ((F.max(F.col("installed_at").cast("double")) -
              F.min(F.col("installed_at").cast("double"))) * 1000).alias("spread_ms")) \
            .orderBy(F.col("counter").desc()).limit(5).collect()
        for r in rows:
            say(f"  {r.view_id:<14} size {r.size}  installed by {r.installed_by}  "
                f"primary {bool(r.primary)}  spread {r.spread_ms:.0f} ms")
        return summary
    finally:
        feed.close()
        if cfg.output is None:
            shutil.rmtree(out_dir, ignore_errors=True)
