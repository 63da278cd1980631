"""Spark pipelines on RayDP that follow the group's views (issue 8 acceptance), on the one
RayDP session of the run (tests/spark_fixtures.py): the driver-side feed sees a join and a
crash (and resubscribes when its member dies), tasks on the executors read the view and detect
a superseded one, rendezvous hashing on the executors moves only the affected keys, the view
history is a DataFrame, and the queue source puts every job exactly once into the output
across a member crash. No wall-clock assertions: every wait is for a condition."""
import os
import threading

import pytest

pytest_plugins = ["tests.ray_fixtures", "tests.spark_fixtures"]

import pyspark  # noqa: F401

from raygroups.actors import Group  # noqa: E402
from raygroups.integration import (DedupSink, QueueSource, QueueSourceConfig,  # noqa: E402
                                   SupersededView, ViewFeed, ViewSnapshot, by_view,
                                   partition_owner, read_queue, repartition_by_view,
                                   view_history_df)

WAIT_S = 60.0


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(f"t-spark-{os.getpid()}", members=3, timeout=WAIT_S, metrics_interval_s=0)
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def feed(spark_session, group):
    f = ViewFeed(spark_session, group.cluster)
    f.wait_for(lambda v: len(v.members) == 3, WAIT_S)
    yield f
    f.close()


def _task_views(spark, bc, via):
    """Each of two tasks: the broadcast view's label, the group's current one (asked from
    the task), and whether the broadcast one is superseded."""
    def run(_):
        snap = bc.value
        try:
            now = snap.check(via=via)
            yield (snap.label, now.label, False, os.getpid())
        except SupersededView as e:
            yield (snap.label, e.new, True, os.getpid())
    return spark.sparkContext.parallelize(range(2), 2).mapPartitions(run).collect()


def test_tasks_read_the_view_and_detect_a_superseded_one(spark_session, group, feed):
    view = feed.wait_stable(0.5, WAIT_S)
    bc = feed.broadcast()
    assert isinstance(bc.value, ViewSnapshot) and bc.value.key == view.key
    for via in ("ray", "http"):
        got = _task_views(spark_session, bc, via)
        assert len(got) == 2
        assert all(g[:3] == (view.label, view.label, False) for g in got), (via, got)

    leaver = view.members[-1]
    group.leave(leaver)
    try:
        new = feed.wait_for(lambda v: leaver not in v.members, WAIT_S)
        assert new.supersedes(view)
        for via in ("ray", "http"):
            got = _task_views(spark_session, bc, via)  # the stale broadcast
            assert all(g[0] == view.label and g[2] for g in got), (via, got)
            assert all(int(g[1].rsplit(":", 1)[1]) >= new.view_id[1] for g in got)
        fresh = feed.broadcast()
        assert fresh.value.key == feed.current().key != view.key
        assert all(not g[2] for g in _task_views(spark_session, fresh, "ray"))
    finally:
        group.rejoin(leaver)
    feed.wait_for(lambda v: leaver in v.members and len(v.members) == 3, WAIT_S)


def test_by_view_on_the_executors_moves_only_the_affected_keys(spark_session, feed):
    from pyspark.sql import functions as F
    view = feed.wait_stable(0.5, WAIT_S)
    members = list(view.members)
    n_keys = 6000
    df = spark_session.range(n_keys).withColumn("customer_id", F.col("id") % 3000)

    def owners(spec):
        rows = by_view(df, "customer_id", spec).select("customer_id", "owner").distinct()
        return {r.customer_id: r.owner for r in rows.collect()}

    before = owners(view)
    assert len(before) == 3000 and set(before.values()) == set(members)
    # a feed routes by its view at the call (the group may have moved on since ``view``)
    first = feed.current()
    routed = by_view(df, "customer_id", feed)
    then = feed.current()
    assert routed.select("view_id").distinct().collect()[0].view_id in (first.label,
                                                                      then.label)

    gone = members[1]
    after_leave = owners([m for m in members if m != gone])
    moved = {k for k in before if before[k] != after_leave[k]}
    assert moved == {k for k, o in before.items() if o == gone}
    assert 0.2 < len(moved) / len(before) < 0.47          # about 1/3 of the keys

    after_join = owners(members + ["newcomer-0"])
    moved = {k for k in before if before[k] != after_join[k]}
    assert moved and all(after_join[k] == "newcomer-0" for k in moved)
    assert 0.15 < len(moved) / len(before) < 0.35         # about 1/4 of the keys

    parts = repartition_by_view(df, "customer_id", view)
    assert parts.rdd.getNumPartitions() == len(members)
    per = parts.rdd.mapPartitionsWithIndex(
        lambda i, rows: [(i, sorted({r.owner for r in rows}))]).collect()
    assert all(owners_ == [partition_owner(view, i)] or owners_ == [] for i, owners_ in per)
    assert parts.count() == n_keys


def test_feed_sees_a_member_crash_and_its_join(group, feed):
    view = feed.wait_stable(0.5, WAIT_S)
    changes = []
    done = threading.Event()
    victim = view.source  # the member the feed long-polls: it resubscribes elsewhere

    def record(old, new):
        changes.append((old, new))
        if victim in new.members and new.member_uuid(victim) != view.member_uuid(victim):
            done.set()
    cancel = feed.on_change(record)
    resubscribed = feed.stats["resubscribed"]
    group.crash(victim)  # Ray restarts it; it rejoins with a fresh UUID
    assert done.wait(WAIT_S), [(o.label, n.label, n.members) for o, n in changes]
    cancel()
    chain = [changes[0][0]] + [n for _, n in changes]
    assert chain[0].key == view.key
    assert all(b.key > a.key for a, b in zip(chain, chain[1:]))              # in order
    assert all(o.key == p[1].key for (o, _), p in zip(changes[1:], changes))  # no gap
    crashed = [v for v in chain if victim not in v.members]
    assert crashed, "the feed never saw the view without the crashed member"
    rejoined = chain[-1]
    assert rejoined.member_uuid(victim) != view.member_uuid(victim)
    assert chain.index(crashed[0]) < len(chain) - 1
    assert feed.stats["resubscribed"] > resubscribed
    stable = feed.wait_stable(0.5, WAIT_S)
    assert feed.quiet_for() >= 0.5 and len(stable.members) == 3


def test_view_history_dataframe(spark_session, group, feed):
    from pyspark.sql import functions as F
    now = feed.wait_stable(0.5, WAIT_S)
    df = view_history_df(spark_session, group)
    assert {"member", "view_id", "members", "primary", "installed_at"} <= set(df.columns)
    latest = df.where(F.col("view_id") == now.label).select("member", "members").collect()
    assert {r.member for r in latest} == set(now.members)          # every member installed it
    assert all(list(r.members) == list(now.members) for r in latest)  # the same members
    assert df.where(F.col("size") < 3).count() > 0    # the leave and the crash of the tests
    assert df.where(F.col("view_id") == now.label).select("primary").first().primary


def test_queue_source_every_job_once_across_a_member_crash(spark_session, ray_session,
                                                            tmp_path):
    from pyspark.sql import functions as F
    g = Group.launch(f"t-spark-q-{os.getpid()}", members=4, timeout=WAIT_S,
                     metrics_interval_s=0)
    feed = ViewFeed(spark_session, g)
    try:
        q = g.queue("jobs")
        published = set()
        for k in range(0, 480, 120):
            ids = q.publish_many([f"job-{i}".encode() for i in range(k, k + 120)])
            published |= {f"{p}:{s}" for p, s in ids}
        assert len(published) == 480

        # read_queue: the DataFrame form, settled through its batch
        jobs = read_queue(spark_session, g, "jobs", max_messages=40)
        assert jobs.count() == 40 and len(jobs.queue_batch) == 40
        assert jobs.queue_batch.release() == 40

        sink = DedupSink(spark_session, str(tmp_path / "out"))
        source = QueueSource(spark_session, g, "jobs", sink, QueueSourceConfig(max_messages=100))
        planned = []

        def process(df):
            view = feed.wait_stable(0.3, WAIT_S)    # re-plan on the current, stable view
            planned.append(view)
            return by_view(df, "id", view).withColumn("result", F.length("body"))

        killed = {}

        def kill_holder(batch):
            if not killed:  # mid-pipeline: output computed, not yet committed or accepted
                killed["member"] = batch.deliveries[0].member
                g.kill(killed["member"])

        results = [source.run_batch(process, before_commit=kill_holder)]
        r0 = results[0]  # its member died: not accepted; asked again while the group lists
        assert r0.accepted == 0 and r0.pending + r0.unsettled == r0.size > 0  # the member

        def failing(df):
            raise RuntimeError("stage failed")
        with pytest.raises(RuntimeError):
            source.run_batch(failing)  # released: its jobs come again, redelivered

        for _ in range(40):
            out = sink.read()
            if out is not None and out.count() == len(published):
                break
            results.append(source.run_batch(process))
        out = sink.read().select("id", "owner", "view_id").collect()
        ids = [r.id for r in out]
        assert len(ids) == len(set(ids)) == len(published)
        assert set(ids) == published
        assert sum(r.duplicates for r in results) > 0   # the crashed batch's jobs came again
        assert sum(r.redelivered for r in results) > 0
        after = [v for v in planned[1:] if killed["member"] not in v.members]
        assert after, "no batch was planned on the view without the killed member"
        owners_after = {r.owner for r in out if r.view_id == after[-1].label}
        assert killed["member"] not in owners_after
    finally:
        feed.close()
        g.shutdown()


def test_the_demo_pipeline_processes_every_job_once_across_a_kill(spark_session, ray_session):
    from raygroups.integration import PipelineConfig, run_pipeline
    g = Group.launch(f"t-spark-p-{os.getpid()}", members=3, timeout=WAIT_S,
                     metrics_interval_s=0)
    try:
        s = run_pipeline(spark_session, g, PipelineConfig(records=3000, customers=500, jobs=150,
                                                          batch=50, quiet_s=0.3),
                         say=lambda text: None)
        assert s["killed"] is not None
        assert s["output"] == s["unique"] == s["jobs"] == 150 and s["missing"] == 0
        assert sum(b.duplicates for b in s["batches"]) > 0
        assert s["moved_keys"] == s["moved_from_killed"] > 0
        assert len(s["routed"]) == 3 and sum(s["routed"].values()) == 3000
    finally:
        g.shutdown()
