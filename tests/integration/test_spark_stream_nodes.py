"""A streaming query on real RayDP across a multi-node Ray (several raylets on loopback,
``ray.cluster_utils.Cluster``): 10,000 jobs read by ``queue_stream`` through Spark's own
micro-batch engine into ``exactly_once_sink``, while a task fails after reading its jobs (the
retry reads the same ones), a member is killed between a batch's commit and its accept, and
the query dies between another batch's commit and accept and restarts from its checkpoint.
Every job is in the output exactly once; the executors sit on both member nodes
(``colocate_with``), and every job was read by a task on its member's node. Runs
tests/spark_stream_run.py in a process of its own (its own Ray), about 90 s."""
from tests.script_run import run_json
JOBS = 10_000


def test_every_job_once_across_a_task_failure_a_member_kill_and_a_query_restart(tmp_path):
    r = run_json("tests.spark_stream_run", tmp_path, "--jobs", str(JOBS), timeout=900)
    print({k: v for k, v in r.items() if k != "results"})
    # exactly once
    assert r["published"] == JOBS
    assert r["output"] == r["distinct"] == JOBS and r["missing"] == r["extra"] == 0
    # the faults happened, and each left its mark on the sink
    assert r["events"]["killed"] and r["events"]["crashed"] and r["restarts"] == 1
    res = r["results"]
    killed, crashed = r["events"]["killed"]["batch"], r["events"]["crashed"]["batch"]
    assert any(x["batch"] == killed and x["failed_members"] == [r["events"]["killed"]["member"]]
               for x in res)                         # its accept failed at the dead member
    later = [x for x in res if x["batch"] > killed]
    assert sum(x["dropped"] for x in later) > 0      # its jobs came again and were dropped
    rerun = [x for x in res if x["batch"] == crashed and x["rerun"]]
    assert rerun and rerun[0]["dropped"] == rerun[0]["checked"] > 0   # replayed, all dropped
    assert rerun[0]["accepted"] == rerun[0]["checked"]
    # deduplication read only what came again, never the output: the killed member's jobs
    # (at most one partition of a batch, 1,500), the re-run batch, and, when the kill moved a
    # partition to another member in the middle of a batch, that abandoned batch's jobs (at
    # most two partitions, 3,000: released unread, they come again flagged)
    abandoned = [x for x in res if x["abandoned"]]
    assert all(x["checked"] == 0 for x in abandoned)
    assert 0 < sum(x["checked"] for x in res if not x["rerun"]) <= 1500 + 3000 * len(abandoned)
    assert all(x["checked"] == 0 for x in res if x["batch"] <= killed)
    # the failed task's jobs were read again by its retry and are in the output
    assert r["failed_task_ids"] > 0 and r["failed_task_ids_in_output"] == r["failed_task_ids"]
    # colocation: an executor on each member node; each job read on its member's node
    assert len(set(r["member_nodes"].values())) == 2
    assert sorted(r["executor_nodes"]) == sorted(set(r["member_nodes"].values()))
    assert len(r["task_nodes"]) == 2 and r["rows_on_member_node"] == JOBS
