"""The CPU split of bench/spark_pipeline.py: who each process is, and CPU seconds per role
between two snapshots (a process that began meanwhile counts whole, one that ended not)."""
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import spark_pipeline  # noqa: E402


def _proc(pid, cmd, name="python", ppid=1):
    return NS(pid=pid, cmdline=lambda: cmd.split(), name=lambda: name, ppid=lambda: ppid)


def test_roles_of_the_processes_of_a_stream():
    me = 100
    role = spark_pipeline._role
    assert role(_proc(100, "python bench/spark_pipeline.py"), me) == "driver (Python + JVM)"
    assert role(_proc(101, "java -cp spark org.apache.spark.deploy.SparkSubmit", "java", 100),
                me) == "driver (Python + JVM)"
    assert role(_proc(102, "ray::MemberActor.queue_acquire"), me) == "members"
    assert role(_proc(103, "java -cp raydp.jar io.ray.runtime.runner.worker.DefaultWorker",
                      "java"), me) == "executors (JVM)"
    assert role(_proc(104, "python -m pyspark.daemon"), me) == "Python tasks"
    assert role(_proc(105, "/x/ray/core/src/ray/raylet/raylet --node"), me) == "Ray itself"
    assert role(_proc(106, "sshd: root"), me) == "other"


def test_cpu_split_counts_each_role_between_two_snapshots():
    before = {1: ("members", 2.0), 2: ("Python tasks", 1.0), 3: ("members", 5.0)}
    after = {1: ("members", 2.5), 2: ("Python tasks", 1.25), 4: ("members", 0.5)}
    split = spark_pipeline.cpu_split(before, after)
    assert split["members"] == 1.0 and split["Python tasks"] == 0.25   # 3 ended: not counted
    assert set(split) == set(spark_pipeline.ROLES) and split["other"] == 0.0
