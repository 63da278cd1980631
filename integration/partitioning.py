"""Membership-aware partitioning of Spark DataFrames: rendezvous hashing (``rendezvous.py``)
of a key column over the members of a view.

```python
routed = by_view(df, "customer_id", feed)          # + "owner" (member name) and "view_id"
parts = repartition_by_view(df, "customer_id", feed)   # partition i: the rows of member i
```

``feed``: a ``ViewFeed`` (its current view), a ``ViewSnapshot``, or a list of member names.
The view a DataFrame was planned on travels with it (the ``view_id`` column, and
``planned_view(df)``), so a later stage can ``check()`` it and re-plan when the group has
moved on. When the view changes, only the keys of the members that left or joined change
owner (about 1/N of them for one change among N members).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .rendezvous import owner, owner_index
from .snapshot import ViewSnapshot


@dataclass
class PartitionConfig:
    owner_col: str = "owner"
    """The column ``by_view`` adds: the owning member's name."""
    view_col: Optional[str] = "view_id"
    """The column with the view label ("coord:counter") the rows were routed on (None: none)."""
    hash_on: str = "name"
    """What identifies a member in the hash: "name" (stable across a member's restarts: a
    restarted member gets its keys back) or "uuid" (each incarnation is a new member)."""


def _view_of(feed: Any) -> tuple:
    """(the snapshot or None, the member names in view order)."""
    snap = feed
    if hasattr(feed, "current") and callable(feed.current):
        snap = feed.current()
    if isinstance(snap, ViewSnapshot):
        return snap, list(snap.members)
    return None, [str(m) for m in feed]


def _identities(snap: Optional[ViewSnapshot], names: list, cfg: PartitionConfig) -> list:
    if cfg.hash_on == "uuid" and snap is not None:
        return list(snap.uuids)
    if cfg.hash_on not in ("name", "uuid"):
        raise ValueError(f"hash_on must be 'name' or 'uuid', not {cfg.hash_on!r}")
    return names


def by_view(df: Any, column: str, feed: Any, config: Optional[PartitionConfig] = None) -> Any:
    """``df`` with the owner of each row's ``column`` value among the view's members (and the
    view's label): rendezvous hashing, the same answer on every executor."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType
    cfg = config or PartitionConfig()
    snap, names = _view_of(feed)
    ids = _identities(snap, names, cfg)
    by_id = dict(zip(ids, names))

    def own(key: Any) -> str:
        return by_id[owner(key, ids)]
    out = df.withColumn(cfg.owner_col, F.udf(own, StringType())(F.col(column)))
    if cfg.view_col and snap is not None:
        out = out.withColumn(cfg.view_col, F.lit(snap.label))
    return _planned(out, snap)


def repartition_by_view(df: Any, column: str, feed: Any,
                        config: Optional[PartitionConfig] = None) -> Any:
    """``by_view``, then one partition per member of the view: partition i holds exactly the
    rows that member i (in view order) owns (an identity partitioner on the owner's index,
    not Spark's hash of the owner, which could put two members in one partition)."""
    cfg = config or PartitionConfig()
    snap, names = _view_of(feed)
    ids = _identities(snap, names, cfg)
    routed = by_view(df, column, snap if snap is not None else names, cfg)
    schema = routed.schema
    pos = schema.fieldNames().index(column)
    n = len(ids)
    rdd = routed.rdd.map(lambda row: (owner_index(row[pos], ids), row)) \
        .partitionBy(n, lambda i: i).values()
    return _planned(routed.sparkSession.createDataFrame(rdd, schema), snap)


def partition_owner(feed: Any, partition: int) -> str:
    """The member whose rows partition ``partition`` of a ``repartition_by_view`` holds."""
    return _view_of(feed)[1][partition]


def _planned(df: Any, snap: Optional[ViewSnapshot]) -> Any:
    try:
        df._raygroups_view = snap
    except AttributeError:  # a DataFrame class with slots: no annotation
        pass
    return df


def planned_view(df: Any) -> Optional[ViewSnapshot]:
    """The view ``by_view``/``repartition_by_view`` planned ``df`` on (None if unknown)."""
    return getattr(df, "_raygroups_view", None)
