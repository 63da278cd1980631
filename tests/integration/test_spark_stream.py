"""Spark the Spark way, on the one RayDP session of the run (tests/spark_fixtures.py): routing
by view as JVM expressions agrees with Python's ``owner()`` on random keys and views (a
property test, hypothesis derandomized: tests/conftest.py), ``repartition_by_view`` gives
each member exactly its rows, the exactly-once sink refuses a batch without its columns and a
second writer, and a streaming micro-batch that fails puts its jobs back on the queue, from
which a restarted query takes them once. The multi-node run with 10,000 jobs and faults is
tests/integration/test_spark_stream_nodes.py."""
import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest_plugins = ["tests.ray_fixtures", "tests.spark_fixtures"]

import pyspark  # noqa: F401,E402

from raygroups.actors import Group  # noqa: E402
from raygroups.integration import (PartitionConfig, QueueStreamConfig,  # noqa: E402
                                   SinkConfig, SinkInUse, SinkSchemaError, by_view,
                                   exactly_once_sink, owner, partition_owner, queue_stream,
                                   repartition_by_view)

from ..aio import wait_until  # noqa: E402

WAIT_S = 120.0
LONG = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
INT = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(members=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=7, unique=True),
       longs=st.lists(LONG, max_size=60), ints=st.lists(INT, max_size=30),
       texts=st.lists(st.text(max_size=24), max_size=60),
       blobs=st.lists(st.binary(max_size=48), max_size=30),
       bools=st.lists(st.booleans(), max_size=4))
def test_by_view_in_the_jvm_agrees_with_python_owner(spark_session, members, longs, ints, texts,
                                                     blobs, bools):
    rows = list(itertools.zip_longest(longs, ints, texts, blobs, bools))
    df = spark_session.createDataFrame(
        rows + [(None,) * 5], "k_long long, k_int int, k_str string, k_bin binary, k_bool boolean")
    routed = df
    for col in df.columns:
        routed = by_view(routed, col, members, PartitionConfig(owner_col=f"o_{col}"))
    parts = repartition_by_view(routed, "k_str", members)   # one Spark job checks both
    assert parts.rdd.getNumPartitions() == len(members)
    per = parts.rdd.mapPartitionsWithIndex(lambda i, it: [(i, list(it))]).collect()
    assert sum(len(x) for _, x in per) == len(rows) + 1
    for i, got in per:
        for r in got:
            assert r.owner == partition_owner(members, i) == owner(r.k_str, members)
            for col in df.columns:
                assert r[f"o_{col}"] == owner(r[col], members), (col, r[col], members)


def test_by_view_refuses_a_column_it_cannot_route(spark_session):
    df = spark_session.createDataFrame([(1.5,)], "x double")
    with pytest.raises(TypeError, match="cast it first"):
        by_view(df, "x", ["a", "b"])
    with pytest.raises(ValueError, match="no column"):
        by_view(df, "y", ["a", "b"])


def test_the_sink_refuses_a_batch_without_its_columns_and_a_second_writer(spark_session,
                                                                          tmp_path):
    df = spark_session.createDataFrame([("p:1", False, 1), ("p:2", True, 2)],
                                       "id string, redelivered boolean, v int")
    path = str(tmp_path / "out")
    with pytest.raises(SinkSchemaError, match="redelivered"):
        exactly_once_sink(path, stream=False).commit(df.drop("redelivered"), 0)
    first = exactly_once_sink(path, stream=False, config=SinkConfig(writer="query-a"))
    assert first.commit(df, 0)["committed"]
    second = exactly_once_sink(path, stream=False, config=SinkConfig(writer="query-b"))
    with pytest.raises(SinkInUse, match="query-a"):
        second.commit(df, 0)
    # the batch again (a re-run): every row is checked, and all are in the output already
    again = first.commit(df, 0)
    assert again["rerun"] and again["checked"] == again["dropped"] == 2
    assert not again["committed"]
    out = first.read(spark_session).collect()
    assert sorted(r.id for r in out) == ["p:1", "p:2"]
    assert {r.sink_batch.rsplit(".", 1)[0] for r in out} == {"query-a.0"}


def test_a_failed_micro_batch_puts_its_jobs_back_and_a_restart_takes_them_once(
        spark_session, ray_session, tmp_path):
    g = Group.launch(f"t-stream-{os.getpid()}", members=3, timeout=60, metrics_interval_s=0)
    try:
        q = g.queue("jobs")
        published = {f"{p}:{s}" for p, s in q.publish_many([b"j%d" % i for i in range(300)])}
        fail = tmp_path / "fail"
        fail.write_text("every attempt of every task fails while this file exists")
        flag = str(fail)

        def process(batches):
            for rb in batches:
                if rb.num_rows and os.path.exists(flag):
                    raise RuntimeError("the stage fails")
                yield rb

        sink = exactly_once_sink(str(tmp_path / "out"))
        cfg = QueueStreamConfig(max_messages=200, acquire_timeout_s=1.0)

        streams = []

        def start():
            jobs = queue_stream(spark_session, g, "jobs", name=f"s{os.getpid()}", config=cfg)
            streams.append(jobs.queue_stream)
            return (jobs.mapInArrow(process, jobs.schema).writeStream.foreachBatch(sink)
                    .option("checkpointLocation", str(tmp_path / "ck")).start())
        query = start()
        with pytest.raises(Exception, match="the stage fails"):
            query.awaitTermination(WAIT_S)
        assert not query.isActive and sink.committed(spark_session) == []
        # released: all 300 back, none held (once the owner's consumer interest lapsed, a
        # prefetch may hold what came back for a moment: WorkQueueConfig.interest_linger_s)
        wait_until(lambda: q.info()["available"] == 300, "every job released", timeout=30)
        info = q.info()
        assert info["depth"] == 300 and info["acquired"] == 0

        fail.unlink()
        query = start()                  # from the checkpoint: the failed batch again
        try:
            wait_until(lambda: q.info()["depth"] == 0, "every job accepted", timeout=WAIT_S)
        finally:
            query.stop()
        out = sink.read(spark_session).select("id", "redelivered").collect()
        assert sorted(r.id for r in out) == sorted(published)
        assert any(r.redelivered for r in out)    # the released jobs came again, flagged
        assert query.lastProgress is not None and query.lastProgress["batchId"] >= 0
        streams[-1].close(forget=True)
    finally:
        g.shutdown()
