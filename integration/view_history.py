"""The group's view history as a Spark DataFrame, for analysing its behaviour with Spark.

```python
df = view_history_df(spark, "orders")
df.groupBy("view_id").agg(F.max("installed_at") - F.min("installed_at"))  # install spread
```

One row per (member, view it installed): ``member`` (who installed it), ``view_id``
("coord:counter"), ``coordinator``, ``counter``, ``members`` (names, in view order),
``size``, ``primary`` and ``primary_id`` (the primary component's verdict, when the member
reports it), ``installed_at`` (timestamp), ``joined``, ``left``. Each member keeps its last
``MemberSpec.history`` views (1000 by default), so the frame is bounded too.
"""
from __future__ import annotations

import datetime
from typing import Any, Optional


def _schema() -> Any:
    from pyspark.sql.types import (ArrayType, BooleanType, LongType, StringType, StructField,
                                   StructType, TimestampType)
    return StructType([StructField("member", StringType(), False),
                       StructField("view_id", StringType(), False),
                       StructField("coordinator", StringType(), False),
                       StructField("counter", LongType(), False),
                       StructField("members", ArrayType(StringType()), False),
                       StructField("size", LongType(), False),
                       StructField("primary", BooleanType(), True),
                       StructField("primary_id", LongType(), True),
                       StructField("installed_at", TimestampType(), True),
                       StructField("joined", ArrayType(StringType()), True),
                       StructField("left", ArrayType(StringType()), True)])


def history_rows(group: Any, members: Optional[list] = None) -> list:
    """The rows of ``view_history_df`` (tuples), from each member actor's history;
    members that do not answer are skipped."""
    if isinstance(group, str):
        from raygroups.actors import Group
        group = Group.attach(group)
    rows = []
    for name in members or group.member_names():
        try:
            hist = group.view_history(member=name)
        except Exception:  # gone or restarting
            continue
        for v in hist:
            coord, counter = v["view_id"]
            at = v.get("installed_at")
            rows.append((name, f"{coord}:{counter}", coord, int(counter), list(v["members"]),
                         len(v["members"]), v.get("primary"), v.get("primary_id"),
                         datetime.datetime.fromtimestamp(at) if at is not None else None,
                         v.get("joined"), v.get("left")))
    return rows


def view_history_df(spark: Any, group: Any, members: Optional[list] = None) -> Any:
    """The view history of ``group`` (a name or a ``Group``) at ``members`` (default:
    every member actor) as a DataFrame (see the module doc)."""
    return spark.createDataFrame(history_rows(group, members), _schema())
