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

import pytest

EXECUTORS = 2


@pytest.fixture(scope="session")
def spark_session(ray_session):
    import pyspark  # noqa: F401
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 (no java on PATH, no JAVA_HOME)")
    from raygroups.integration.spark_session import start_spark, stop_spark
    spark = start_spark("raygroups-tests", executors=EXECUTORS, memory="1G",
                        configs={"spark.sql.shuffle.partitions": "4"})
    yield spark
    stop_spark()
