"""RayDP Spark as the demo and the benches start it: quiet (no UI, no progress bars, errors
only in the log) on the Ray cluster this process is connected to, its Python workers running
this interpreter (so they import the same raygroups).

```python
spark = start_spark("etl", executors=2, memory="1G")   # two executors of one core
stop_spark()
```
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

QUIET = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def start_spark(app: str, executors: int = 2, cores: int = 1, memory: str = "1G",
                configs: Optional[dict] = None, log_level: str = "ERROR", **raydp_kw: Any) -> Any:
    """``raydp.init_spark`` with ``executors`` executors of ``cores`` cores and ``memory``
    each, the ``QUIET`` settings and ``configs``; ``raydp_kw``: more of init_spark's
    arguments (``placement_group`` and the like, see ``colocate_with``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import raydp
    spark = raydp.init_spark(app, num_executors=executors, executor_cores=cores,
                             executor_memory=memory, configs={**QUIET, **(configs or {})},
                             **raydp_kw)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def stop_spark() -> None:
    import raydp
    raydp.stop_spark()
