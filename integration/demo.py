"""The README's demo: member actors on a local Ray cluster, then a RayDP Spark pipeline that
follows the group's views.

    python -m raygroups.integration.demo [--members 5] [--serve SECONDS] [--jobs 300]

The membership part is ``raygroups.actors.demo`` (a 5-member group on loopback with the local
directory discovery store; a member killed with ``ray.kill`` and excluded, restarted and
rejoined). Then RayDP starts Spark on the same Ray cluster (two executors of one core) and
``pipeline.run_pipeline`` runs: records routed to their owning members by view, queue jobs
processed in micro-batches, a member killed mid-pipeline, the next batch re-planned on the new
view and the requeued jobs processed once. Then the status page is served and everything
shuts down.
"""
from __future__ import annotations

import sys
import time

from raygroups.actors import demo as members_demo

from .pipeline import PipelineConfig, run_pipeline
from .spark_session import start_spark, stop_spark


def spark_part(jobs: int, records: int):
    def run(g) -> None:
        print("\nSpark on RayDP (2 executors of 1 core on this Ray cluster) ...")
        t0 = time.monotonic()
        spark = start_spark("raygroups-demo")
        print(f"  Spark started in {time.monotonic() - t0:.1f}s")
        try:
            s = run_pipeline(spark, g, PipelineConfig(jobs=jobs, records=records),
                             say=lambda text: print(f"  {text}"))
            if s["output"] != s["jobs"] or s["unique"] != s["jobs"] or s["missing"]:
                raise SystemExit("the pipeline did not process every job exactly once")
        finally:
            stop_spark()
    return run


def main(argv=None) -> int:
    ap = members_demo.arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="queue jobs the pipeline processes")
    ap.add_argument("--records", type=int, default=20_000,
                    help="generated records the pipeline routes by view")
    args = ap.parse_args(argv)
    # 4 logical CPUs: the two Spark executors hold one each; member actors take none
    return members_demo.run(args, then=spark_part(args.jobs, args.records), num_cpus=4)


if __name__ == "__main__":
    sys.exit(main())
