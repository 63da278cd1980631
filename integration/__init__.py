"""Spark pipelines on RayDP that follow the group's views and consume its work queue.

```python
from raygroups.integration import (ViewFeed, by_view, colocate_with, exactly_once_sink,
                                   queue_stream, read_queue)
feed = ViewFeed(spark, "orders")           # follows the group's views from the driver
view = feed.current()                      # the agreed view (a ViewSnapshot)
routed = by_view(df, "customer_id", feed)  # each row tagged with the member owning its key
feed.on_change(lambda old, new: ...)       # re-plan when the view changes
jobs = read_queue(spark, "orders", "jobs", max_messages=10_000)   # acquire -> DataFrame
spark = raydp.init_spark("etl", 2, 1, "1G", **colocate_with(g, 1, "1G"))  # by the members
jobs = queue_stream(spark, "orders", "jobs")                      # a streaming DataFrame
q = (process(jobs).writeStream.foreachBatch(exactly_once_sink("hdfs://nn/out"))
       .option("checkpointLocation", "hdfs://nn/ck").start())     # Spark's own query
```

Dependency direction: integration -> actors -> stack (actors never import pyspark). It needs
the ``spark`` extra (pyspark and raydp): ``pip install 'raygroups[spark]'``; without it,
importing it raises an ImportError that says so.
"""
import importlib.util as _util

_missing = [m for m in ("pyspark", "raydp") if _util.find_spec(m) is None]
if _missing:
    raise ImportError(f"raygroups.integration needs {' and '.join(_missing)}: "
                      f"pip install 'raygroups[spark]'", name=_missing[0])

from .colocation import colocate_with, member_nodes, task_nodes
from .exactly_once_sink import (ExactlyOnceSink, SinkConfig, SinkInUse, SinkSchemaError,
                                exactly_once_sink, read_committed)
from .partitioning import (PartitionConfig, by_view, owner_column, partition_owner,
                           planned_view, repartition_by_view)
from .pipeline import PipelineConfig, run_pipeline
from .queue_stream import QueueStream, QueueStreamConfig, queue_stream
from .queue_source import (BatchResult, DedupSink, QueueBatch, QueueSource, QueueSourceConfig,
                           read_queue)
from .rendezvous import moved, owner, owners
from .snapshot import SupersededView, ViewSnapshot
from .view_feed import FeedConfig, ViewFeed
from .view_history import view_history_df

__all__ = ["ViewFeed", "FeedConfig", "ViewSnapshot", "SupersededView", "by_view",
           "repartition_by_view", "partition_owner", "planned_view", "PartitionConfig",
           "owner", "owners", "moved", "read_queue", "QueueSource", "QueueSourceConfig",
           "QueueBatch", "DedupSink", "BatchResult", "view_history_df", "run_pipeline",
           "PipelineConfig", "queue_stream", "QueueStream", "QueueStreamConfig",
           "exactly_once_sink", "ExactlyOnceSink", "SinkConfig", "SinkInUse", "SinkSchemaError",
           "read_committed", "colocate_with", "member_nodes", "task_nodes", "owner_column"]
