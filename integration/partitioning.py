"""Membership-aware partitioning of Spark DataFrames: rendezvous hashing (``rendezvous.py``)
of a key column over the members of a view, as native Spark column expressions (a
``xxhash64`` weight per member, the greatest wins; no Python per row).

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


_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_AS_IS = ("StringType", "BinaryType", "BooleanType", "NullType")


def _key(df: Any, column: str) -> Any:
    """The key column as Spark's ``xxhash64`` must see it to agree with ``owner()``:
    integral types as long; strings, binary and booleans as they are."""
    from pyspark.sql import functions as F
    if column not in df.columns:
        raise ValueError(f"no column {column!r} to route by (columns: {df.columns})")
    kind = type(df.schema[column].dataType).__name__
    if kind in _INTEGRAL:
        return F.col(column).cast("long")
    if kind in _AS_IS:
        return F.col(column)
    raise TypeError(f"by_view routes integral, string, binary and boolean columns, not "
                    f"{kind} ({column!r}): cast it first")


def _best(df: Any, column: str, ids: list, **values: list) -> Any:
    """The struct (weight, id, **values) of each row's owner among ``ids``: the greatest
    (``xxhash64(id, key)``, id), as ``rendezvous.owner``, computed in the JVM."""
    from pyspark.sql import functions as F
    if not ids:
        raise ValueError("no members to own the keys")
    key = _key(df, column)
    scores = [F.struct(F.xxhash64(F.lit(i), key).alias("w"), F.lit(i).alias("m"),
                       *[F.lit(vs[k]).alias(name) for name, vs in values.items()])
              for k, i in enumerate(ids)]
    return scores[0] if len(scores) == 1 else F.greatest(*scores)


def owner_column(df: Any, column: str, ids: list, values: list) -> Any:
    """A Spark column: for each row, ``values[i]`` of the member ``ids[i]`` that owns the
    row's ``column`` (rendezvous hashing with Spark's ``xxhash64``, computed in the JVM: the
    greatest (weight, id) among the members, as ``rendezvous.owner``)."""
    return _best(df, column, ids, v=values).getField("v")


def by_view(df: Any, column: str, feed: Any, config: Optional[PartitionConfig] = None) -> Any:
    """``df`` with the owner of each row's ``column`` value among the view's members (and the
    view's label): rendezvous hashing as a native Spark expression (no Python per row), the
    same answer as ``rendezvous.owner`` in any process."""
    from pyspark.sql import functions as F
    cfg = config or PartitionConfig()
    snap, names = _view_of(feed)
    ids = _identities(snap, names, cfg)
    out = df.withColumn(cfg.owner_col, owner_column(df, column, ids, names))
    if cfg.view_col and snap is not None:
        out = out.withColumn(cfg.view_col, F.lit(snap.label))
    return _planned(out, snap)


def repartition_by_view(df: Any, column: str, feed: Any,
                        config: Optional[PartitionConfig] = None) -> Any:
    """``by_view``, then one partition per member of the view: partition i holds exactly the
    rows that member i (in view order) owns. A native shuffle: each row carries a value that
    Spark's hash partitioner (Murmur3, seed 42, modulo the member count) sends to its
    owner's index (an identity partitioner, unlike Spark's hash of the owner, which could
    put two members in one partition)."""
    from pyspark.sql import functions as F
    cfg = config or PartitionConfig()
    snap, names = _view_of(feed)
    ids = _identities(snap, names, cfg)
    n = len(ids)
    best = _best(df, column, ids, name=names, part=partition_pivots(n))
    out = (df.withColumn(_PART, best)       # one hash per member, for both columns
           .withColumn(cfg.owner_col, F.col(_PART).getField("name"))
           .repartition(n, F.col(_PART).getField("part").cast("long"))  # hashed as a long
           .drop(_PART))
    if cfg.view_col and snap is not None:
        out = out.withColumn(cfg.view_col, F.lit(snap.label))
    return _planned(out, snap)


_PART = "__raygroups_partition"


def _murmur3_long(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashLong`` (the hash partitioner's, seed 42), signed."""
    m = 0xFFFFFFFF

    def mix_k(k: int) -> int:
        k = (k * 0xCC9E2D51) & m
        k = ((k << 15) | (k >> 17)) & m
        return (k * 0x1B873593) & m

    def mix_h(h: int, k: int) -> int:
        h ^= k
        h = ((h << 13) | (h >> 19)) & m
        return (h * 5 + 0xE6546B64) & m
    v = value & 0xFFFFFFFFFFFFFFFF
    h = mix_h(mix_h(seed & m, mix_k(v & m)), mix_k(v >> 32))
    h ^= 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    return h - (1 << 32) if h >> 31 else h


def partition_pivots(n: int) -> list:
    """[v_0, ..., v_{n-1}]: longs that Spark's hash partitioner over ``n`` partitions sends
    to partitions 0, ..., n-1 (``pmod(hash(v_i), n) == i``)."""
    out: dict = {}
    v = 0
    while len(out) < n:
        out.setdefault(_murmur3_long(v) % n, v)
        v += 1
    return [out[i] for i in range(n)]


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
