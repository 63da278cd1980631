"""The fault campaign across Ray hosts, small and with fixed seeds (tests/hosts/campaign.py):
three Ray nodes on hosts in network namespaces, a member on each, clients on each publishing,
acquiring, accepting, releasing, rejecting and multicasting throughout, and the Spark
pipeline on RayDP (tests/hosts/pipeline.py) on the head host processing queue jobs in
micro-batches; Ray's GCS backed by Redis; six schedules: a host killed and booted again, the
head's host killed and booted again (the pipeline with it: it starts again into the same
sink), a whole host stopped (SIGSTOP), a bridge partition, a raylet stopped alone, the head
isolated. Every checker passes: no acknowledged publish lost, nothing accepted twice, rejects
once on the alternate, every pipeline job exactly once in the sink's output, one member list
per view id, one primary per primary id, no incarnation excluded twice in a fault's window,
no message delivered twice, and after each heal one primary view with a member on every
host (hosts whose raylet Ray stopped booted again first).
``make campaign-hosts HOURS=1`` runs random schedules for longer."""
import pytest

from ..raybed import available

_ok, _why = available()
pytestmark = [pytest.mark.root] + ([] if _ok else [pytest.mark.skip(reason=_why)])

SEEDS = [4, 14, 8, 22, 21, 28]  # the head's restart early: the pipeline restarts meanwhile


def test_a_fixed_seed_fault_campaign_across_ray_hosts_finds_no_violation(tmp_path):
    from ..hosts.campaign import run
    r = run(SEEDS, nodes=3, out_dir=str(tmp_path))
    print({k: r[k] for k in ("faults", "ops", "publish_ok", "pipeline_jobs", "views",
                             "wall_s")})
    assert r["violations"] == [], (r["violations"], r.get("kept"))
    assert len(r["faults"]) >= 5 and {"kill", "stop_host", "stop_raylet", "isolate_head",
                                      "bridge", "head_restart"} <= set(r["faults"])
    assert r["ops"] > 200 and r["publish_ok"] > 50 and r["views"] > 6  # traffic was checked
    assert r["pipeline_jobs"] > 0  # and the pipeline's output
