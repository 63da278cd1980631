"""The fault campaign across Ray hosts (Jepsen style), with Ray, the members, the work queue and
multicast traffic running (tests/hosts/bed.py).

    python -m tests.hosts.campaign --seeds 5 --base 1 [--nodes 3] [--long] [--out DIR]
    python -m tests.hosts.campaign --hours 1 [--base N]        # make campaign-hosts HOURS=1

One cluster per run; schedules one after the other, each from its seed (printed, replayable:
``--seeds 1 --base SEED``): one to three faults (one with ``--long``; a host crash only
first, while the group is whole: two crashes of three members, or a crash of one of the two
members a partition left primary, are a majority crash), each held a while,
then lifted; then every host whose raylet Ray stopped is booted again (``repair``), and the
run waits until the group agrees on one primary view with one member on every host, its
work queues active on every member (``converged``: the next schedule starts from a whole
group). Faults: partitions (halves, one
host isolated, the head isolated, a bridge), a host's every process killed (booted again
after the hold), the head's too (Ray's GCS keeps its state in Redis, the configuration
docs/architecture.md recommends: the head takes the cluster back), SIGSTOP of a whole host
or of its raylet alone, random loss. Held 3-8 s
(``--long``: 10-90 s, Ray declaring nodes dead on the way). Clients on every host publish,
acquire, accept, release, reject and multicast throughout, and the Spark pipeline on RayDP
(tests/hosts/pipeline.py, on the head host; ``--no-pipeline`` leaves it out) processes queue
jobs in micro-batches into a deduplicating sink. At the end the clients stop, a driver
drains both queues, the pipeline drains its own, and every member's view history is read;
the checkers (tests/hosts/checker.py) judge. Failing runs keep their histories in ``--out``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import sys
import time
from typing import Optional

from .bed import HEAD, HostCluster
from .checker import ALT, MAIN, check, sink_bodies

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ("halves", "isolate", "isolate_head", "bridge", "kill", "stop_host", "stop_raylet",
         "drop", "head_restart")
CRASHES = ("kill", "head_restart")
VERDICT_S = {False: 8.0, True: 30.0}
"""At the earliest, Ray's GCS declares a silent node dead after this long (short and long
runs: ``bed.HEALTH`` and ``LONG_HEALTH``)."""
RECONNECT_S = {False: 30, True: 120}
"""How long a raylet waits for a GCS that went away (``RAY_gcs_rpc_server_reconnect_timeout_s``)
before it exits, stopping its workers."""
SETTLE_S = VERDICT_S[True] + 10.0
"""With ``--long``: after a schedule's group re-formed, this long without a fault before the
next schedule (Ray's late verdicts; see ``run``)."""
LONG_HEALTH = {"health_check_period_ms": 3000, "health_check_timeout_ms": 3000,
               "health_check_failure_threshold": 10, "health_check_initial_delay_ms": 5000}


def schedule(seed: int, hosts: list, long: bool = False) -> list:
    """The faults of one schedule: [{"kind", "hosts", "hold_s", "percent"}]. A partition that
    leaves the head with a minority is held below Ray's node-death timeout (``VERDICT_S``):
    beyond it Ray stops the majority's processes when the partition heals (a majority crash,
    which no in-memory queue survives; docs/architecture.md, the fence's rule 4)."""
    rng = random.Random(seed)
    out = []
    # long holds let Ray declare nodes dead: one fault per schedule, so that Ray stops at
    # most one member before the group re-forms (two of three would be a majority crash).
    # A crash (a host killed) only as a schedule's first fault, when the group is whole:
    # with the next fault coming before the crashed member's fresh incarnation joined, two
    # crashes of three members are a majority crash (seed 5: a worker host killed, then the
    # head's), and so is a crash right after a partition lifted, before the sides merged:
    # the last primary view may then be the two members of one side, and losing either
    # leaves no majority of it (seed 26112618: halves, then one of the two killed; MySQL
    # Group Replication blocks there too)
    for _ in range(1 if long else rng.randint(1, 3)):
        kind = rng.choice([k for k in KINDS if k not in CRASHES] if out else KINDS)
        hs = list(hosts)
        rng.shuffle(hs)
        hold = rng.uniform(10.0, 90.0) if long else rng.uniform(3.0, 8.0)
        if kind == "halves":
            cut = len(hs) // 2
            groups = [hs[:cut], hs[cut:]]
        elif kind == "isolate":
            groups = [[h for h in hs if h != hs[0]], [hs[0]]]
        elif kind == "isolate_head":
            groups = [[HEAD], [h for h in hosts if h != HEAD]]
        elif kind == "bridge":  # hs[0] sees both sides, which do not see each other
            groups = [hs[:1] + hs[1:2], hs[:1] + hs[2:]] if len(hs) > 2 else [hs]
        else:
            groups = [[h for h in hs if h != HEAD][:1] or hs[:1]]  # never the head itself
        if kind == "head_restart":  # back within the raylets' GCS reconnect timeout
            groups = [[HEAD]]
            hold = min(hold, RECONNECT_S[long] * rng.uniform(0.2, 0.5))
        if kind in ("halves", "isolate", "isolate_head", "bridge"):
            head_side = next(g for g in groups if HEAD in g)
            if 2 * len(head_side) <= len(hosts):
                hold = min(hold, VERDICT_S[long] * rng.uniform(0.3, 0.7))
        out.append({"kind": kind, "hosts": groups, "hold_s": round(hold, 1),
                    "percent": rng.choice([10, 25, 40])})
    return out


def apply(c: HostCluster, f: dict) -> None:
    kind, groups = f["kind"], f["hosts"]
    if kind in ("halves", "isolate", "isolate_head"):
        c.partition(groups)
    elif kind == "bridge":
        c.partition(groups, bridges=True)
    elif kind in ("kill", "head_restart"):
        c.kill_host(groups[0][0])
    elif kind == "stop_host":
        c.stop_host(groups[0][0])
    elif kind == "stop_raylet":
        c.stop_raylet(groups[0][0])
    elif kind == "drop":
        c.drop(groups[0][0], f["percent"])


def lift(c: HostCluster, f: dict) -> None:
    kind, h = f["kind"], f["hosts"][0][0]
    if kind in ("kill", "head_restart"):
        c.boot_host(h)
    elif kind == "stop_host":
        c.cont_host(h)
    elif kind == "stop_raylet":
        c.cont_raylet(h)
    else:
        c.heal()


CONVERGED = """
g = Group.attach({group!r})
try:
    alive = {{n["NodeID"] for n in ray.nodes() if n["Alive"]}}
    ms = g.members()
    views = {{m["name"]: tuple(v["view_id"]) for m in ms
              for v in g.view_history(m["name"])[-1:]}}
    phases = {{m["name"]: g._call("queue_info", member=m["name"]).get("phase") for m in ms}}
    last = {{"alive": len(alive), "members": len(ms),
            "nodes": len({{m.get("node_id") for m in ms}} & alive),
            "views": sorted(set(map(str, views.values()))), "primary": g.view().primary,
            "queues": sorted(set(map(str, phases.values())))}}
    print(json.dumps(last))
except Exception as e:
    print(json.dumps({{"ok": False, "error": type(e).__name__ + ": " + str(e)[:200]}}))
"""


def converged(state: dict, hosts: int) -> bool:
    """The group of ``state`` (CONVERGED's answer) is whole again: one primary view, one member
    on each of the ``hosts`` hosts' live Ray nodes, its work queues active everywhere. A node
    Ray declared dead counts as missing until its host is booted again and its member joined,
    even though Ray no longer lists it alive: seed 26112858 (after seed 26112857 had isolated
    a worker host long enough for Ray's verdict) started its fault while the group was the
    two members of the other hosts, a primary view of two, and its host crash left the last
    one without a majority for good (docs/architecture.md, the fence's rule 4)."""
    return ("error" not in state
            and state.get("alive") == state.get("members") == state.get("nodes") == hosts
            and len(state.get("views", ())) == 1 and bool(state.get("primary"))
            and state.get("queues") == ["active"])


def converge(c: HostCluster, timeout: float = 120.0) -> tuple:
    """Boot hosts whose raylet Ray stopped, until the group is whole again (``converged``):
    (converged, hosts booted, the last state seen)."""
    deadline, booted, last = time.monotonic() + timeout, 0, {}
    while time.monotonic() < deadline:
        booted += len(c.repair())
        last = _json(c.driver(HEAD, CONVERGED.format(group=c.group), timeout=60))
        last["ok"] = converged(last, len(c.hosts))
        if last["ok"]:
            return True, booted, last
        time.sleep(2.0)
    return False, booted, last


DRAIN = """
import time
from raygroups.actors.queue import CLIENT
g = Group.attach({group!r})
out = open({path!r}, "a", buffering=1)
deadline = time.monotonic() + {timeout}
for name in ({main!r}, {alt!r}):
    q = g.queue(name, alternate={alt!r} if name == {main!r} else None, lease_s=5.0)
    idle = 0
    while time.monotonic() < deadline:
        got = q.acquire_many(50, timeout_s=1.0)
        if not got:
            idle += 1
            if idle >= 3 and q.depth() == 0:
                break  # nothing available and nothing held anywhere (leases ran out)
            continue
        idle = 0
        for d in got:
            out.write(json.dumps({{"t": time.time(), "c": "drain", "op": "accept",
                                  "at": "invoke", "body": d.body.decode(), "queue": name}}) + "\\n")
            try:
                q.settle_many("accept", [d])
                at = "ok"
            except Exception as e:
                at = "fail" if type(e).__name__ in ("StaleEpoch", "NotAcquired") else "info"
            out.write(json.dumps({{"t": time.time(), "c": "drain", "op": "accept", "at": at,
                                  "body": d.body.decode(), "queue": name}}) + "\\n")
for n in g.member_names():  # what every member delivered and no client read yet
    while time.monotonic() < deadline:
        try:
            got = [m for m in g.receive(10000, timeout=0.2, member=n)
                   if isinstance(m["payload"], bytes)]
        except Exception:
            break
        if not got:
            break
        out.write(json.dumps({{"t": time.time(), "c": "drain", "op": "received", "at": "ok",
                              "member": n, "bodies": [m["payload"].decode() for m in got],
                              "views": [m["view"] for m in got]}}) + "\\n")
print(json.dumps({{"depth": [g.queue(n, create=False).depth() for n in ({main!r}, {alt!r})]}}))
"""

HISTORIES = """
g = Group.attach({group!r})
out = {{}}
for n in g.member_names():
    try:
        out[n] = g.view_history(n)
    except Exception:
        pass
print(json.dumps(out))
"""


def run(seeds: list, nodes: int = 3, long: bool = False, out_dir: Optional[str] = None,
        log=print, pipeline: bool = True) -> dict:
    """One cluster, the schedules of ``seeds`` in turn, then the checks. The result: faults,
    operations checked, violations (each with the seeds of the run)."""
    t0 = time.monotonic()
    windows, faults, booted, liveness = [], [], 0, []
    with HostCluster(nodes, gcs_reconnect_s=RECONNECT_S[long],
                     health=LONG_HEALTH if long else None, pipeline=pipeline) as c:
        time.sleep(3.0)  # the clients start their traffic
        for seed in seeds:
            sched = schedule(seed, c.hosts, long)
            log(f"seed {seed}: {[(f['kind'], f['hosts'], f['hold_s']) for f in sched]}")
            for f in sched:
                windows.append(time.time())
                apply(c, f)
                time.sleep(f["hold_s"])
                lift(c, f)
                faults.append(f["kind"])
            c.heal()
            ok, n, got = converge(c)
            booted += n
            if ok and long:
                # Ray's verdicts on this schedule may still come after the group re-formed
                # (gRPC reconnects back off, so health checks go on failing after the heal):
                # let them come, and the group re-form again, before the next fault; or two
                # schedules' stops add up to a majority crash (one seed of the first long
                # runs: a member stopped 3 s after the group re-formed, another by the next
                # fault, and the one left waited for good for a majority it could not have)
                time.sleep(SETTLE_S)
                ok, n, got = converge(c)
                booted += n
            if not ok:
                liveness.append(f"seed {seed}: no single primary view with a member on every "
                                f"host within 120 s of the heal: {got}")
                log(liveness[-1])
        with open(c.stop_file, "w"):
            pass
        time.sleep(3.0)
        drain = os.path.join(c.tmp, "hist-drain.jsonl")
        try:
            depth = _json(c.driver(HEAD, DRAIN.format(group=c.group, path=drain, timeout=90,
                                                      main=MAIN, alt=ALT), timeout=150))
        except RuntimeError as e:  # e.g. no primary component: nothing could be drained
            depth = {"error": str(e)[-300:]}
        histories = _json(c.driver(HEAD, HISTORIES.format(group=c.group), timeout=120))
        if pipeline:
            wait_pipeline(c)
        result = check(c.histories(), histories, windows, sink_bodies(c.sink) if pipeline
                       else None)
        if depth.get("depth") != [0, 0]:
            result["violations"].append(f"queue_drain: messages left after the drain: {depth}")
        result["violations"] += [f"liveness: {x}" for x in liveness]
        result.update({"seeds": list(seeds), "faults": faults, "hosts_booted": booted,
                       "wall_s": round(time.monotonic() - t0, 1), "nodes": nodes,
                       "long": long})
        if result["violations"] and out_dir:
            dest = os.path.join(out_dir, f"hosts-{seeds[0]}-{len(seeds)}")
            os.makedirs(dest, exist_ok=True)
            for name in os.listdir(c.tmp):  # histories and logs (not the run's keys)
                src = os.path.join(c.tmp, name)
                if os.path.isfile(src) and name.endswith((".jsonl", ".log", ".out", ".err")):
                    shutil.copy(src, dest)
            with open(os.path.join(dest, "views.json"), "w") as f:
                json.dump(histories, f)
            result["kept"] = dest
    return result


def wait_pipeline(c: HostCluster, timeout: float = 200.0) -> None:
    """Until the Spark pipeline recorded that it finished (its queue drained, or it gave up:
    ``pipeline_once`` judges) or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("op") == "pipe_done" for r in c.histories()):
            return
        time.sleep(2.0)


def _json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"unparsed": text[-500:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="schedules per run")
    ap.add_argument("--base", type=int, default=None, help="first seed (default: from the clock)")
    ap.add_argument("--hours", type=float, default=0.0, help="runs until this much time passed")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--long", action="store_true", help="faults held 10-90 s")
    ap.add_argument("--out", default=os.path.join(ROOT, "campaign-results", "hosts"))
    ap.add_argument("--no-pipeline", action="store_true",
                    help="without the Spark pipeline on the head host")
    a = ap.parse_args(argv)
    base = a.base if a.base is not None else int(time.time()) % 10_000_000
    os.makedirs(a.out, exist_ok=True)
    summary = os.path.join(a.out, "summary.txt")
    stamp = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC"
    deadline = time.monotonic() + a.hours * 3600
    totals = {"runs": 0, "schedules": 0, "faults": 0, "ops": 0, "pipeline_jobs": 0,
              "views": 0, "violations": 0, "flapping": 0}
    seed = base
    while True:
        seeds = list(range(seed, seed + a.seeds))
        seed += a.seeds
        r = run(seeds, a.nodes, a.long, a.out, pipeline=not a.no_pipeline)
        totals["runs"] += 1
        totals["schedules"] += len(seeds)
        totals["faults"] += len(r["faults"])
        totals["ops"] += r["ops"]
        totals["pipeline_jobs"] += r["pipeline_jobs"]
        totals["views"] += r["views"]
        totals["violations"] += len(r["violations"])
        totals["flapping"] += len(r["flapping"])
        line = (f"seeds {seeds[0]}..{seeds[-1]}: {len(r['faults'])} faults "
                f"({', '.join(sorted(set(r['faults'])))}), {r['ops']} operations, "
                f"{r['publish_ok']} acknowledged publishes, {r['pipeline_jobs']} jobs "
                f"through the Spark pipeline in {r['pipeline_batches']} micro-batches, "
                f"{r['views']} views, "
                f"{r['hosts_booted']} hosts booted by repair, {len(r['violations'])} "
                f"violations, {r['wall_s']} s")
        print(line, flush=True)
        for v in r["violations"]:
            print("VIOLATION", v, flush=True)
        with open(summary, "a") as f:
            f.write(f"{stamp} {line}\n" + "".join(f"  VIOLATION {v}\n" for v in r["violations"]))
        if time.monotonic() >= deadline:
            break
    print(f"# total: {json.dumps(totals)}")
    with open(summary, "a") as f:
        f.write(f"# {stamp} total (base {base}, long={a.long}): {json.dumps(totals)}\n")
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
