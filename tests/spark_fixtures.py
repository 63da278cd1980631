"""One RayDP Spark session per test run, on the shared local Ray session.

Use it from a test module with

    pytest_plugins = ["tests.ray_fixtures", "tests.spark_fixtures"]

and ask for ``spark_session`` (session scoped): the first test that needs it starts Spark on
the Ray session of ``ray_fixtures`` (about 20 s: two executors of one core and 1 GiB each, Java
17), the end of the run stops it. Spark's Python workers run this interpreter
(``PYSPARK_PYTHON``), so they import the same raygroups.
"""
from __future__ import annotations

import os
import shutil
import sys

import pytest

EXECUTORS = 2


@pytest.fixture(scope="session")
def spark_session(ray_session):
    import pyspark  # noqa: F401
    import raydp
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 (no java on PATH, no JAVA_HOME)")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = raydp.init_spark("raygroups-tests", num_executors=EXECUTORS, executor_cores=1,
                             executor_memory="1G",
                             configs={"spark.ui.enabled": "false",
                                      "spark.ui.showConsoleProgress": "false",
                                      "spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    raydp.stop_spark()
