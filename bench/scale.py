"""Scale in the simulator: gossip and views membership at 100, 300 and 1,000 members.

    python bench/scale.py                    # gossip and views 100/300/1000 (an hour or more)
    python bench/scale.py --sizes 1000,10000 --modes gossip   # 10,000: what it would take
    python bench/scale.py --sizes 1000 --modes views --rumor-seeds 1 --rumors 20
    python bench/scale.py --quick            # gossip 100/300, views 100/300, fewer rumors
    python bench/scale.py --json scale.json

Every figure comes from ``raygroups.stack.sim_scale.simulate`` (the same Stack objects on the
deterministic simulator; see its docstring for the phases) in simulated seconds, except the
wall, CPU and memory columns. Per size and mode: one full run (formation, steady traffic,
rumors, a crash, a join storm of 100), one partition run of the same seed (formation, then a
partition into two halves for ``--partition`` 60 s and its heal) and ``--rumor-seeds`` more
runs that only form the group and spread rumors, so
that the share of rumors reaching every member within the gossip design's log2(2N)+1 rounds
rests on ``rumors x seeds`` trials (target: >= 99.9%; by default 1,000 trials per size in
gossip mode: 100 rumors x 10 seeds, 500 x 2 at 1,000 members; views mode: 100 x 3 at 100
members, 100 x 1 beyond). All runs of all sizes and modes go ``--jobs`` at a time (default
2), the longest first, each in a fresh process: its peak RSS is its own, and the cores stay
busy until the last short run. CPU is the runs' process time, the wall time an idle core
would take; on a shared machine the wall time says more about the load. The bench prints
the whole bench's wall time against 5 minutes at 1,000 members, and the views formation's
at 1,000 against 3 minutes.

Costs (docs/architecture.md, "Scale in the simulator"). Gossip mode: O(N) memory per member,
about 1.6 KB per member listed (1.6 MB per member at 1,000); a formation sends O(N) datagrams
per member (266 at 1,000) and applies O(N^2 log N) rumors in all. Views mode: O(N) datagrams
per round above 32 members, but O(N^2) work per view change; the coordinator gathers a
burst's joins for 1 ms a member (at most 1 s: ``gms.view_bundling_per_member_s``), so a
formation takes O(log N) changes, O(N^2) work in all (``--view-bundling`` sets a fixed
gathering instead, as the bench did before: 0.1 s from 1,000 members on, O(N) changes).
Larger sizes than ``--gossip-max`` / ``--views-max`` (1,000) print what
they would take instead of starting: 10,000 gossip members need about 150 GiB in one process.

Measured 2026-11-26 (branch scale, commits e748b3e..762d80a and this bench), Python 3.11, on
a 2-CPU machine shared with a simulator campaign (load 1.5 to 5; CPU seconds are the run's
own): gossip mode, 1,000 members, seed 1: formation 3.2 s after the last start, 266
datagrams sent per member, 1.6 MB per member (peak RSS 1.66 GB after formation), 117 s of
CPU for the formation alone after the first change (member sets), 106 s wall with one core
free after the collector thresholds; 2.06 messages per member and round idle; 500 of
500 rumors within 11 rounds (median 4, max 5); crash detected first / median / last 2.62 /
3.02 / 3.24 s; a join storm of 100 converged in 2.05 s; these phases took 337 s wall. The
60 s partition of 1,099 members was not finished here: while each half suspects and buries
the other, every member confirms every suspicion (O(N^2) SUSPECT rumors, each re-arming a
timer), about 16 CPU seconds per simulated second; at 40 members a partition of 20 s heals
in 0.4 s (gossip) and 1.65 s (views). Re-measured 2026-11-26 on a06b39f (Lifeguard's
confirmations capped at k, bb641a5, and a probe-order insertion reverted since, edf7f0b,
because it slowed this formation to 51.3 s after the last start, 750 datagrams sent per
member, 191.5 s of CPU), load 6 to 14: the whole gossip run at 1,000 finished, 45.8 min
wall, 39.3 min CPU for the full run and one rumor-only run side by side (the full run 1,750
CPU s), peak RSS 4.08 GiB; 1,000 of 1,000 rumors within 11 rounds (median 4, max 5); 2.01
messages per member and round idle, 5.00 while rumors spread; crash detected 1.87 / 2.13 /
2.36 s; join storm converged in 3.15 s; the 60 s partition (549 + 550 apart, every member
saw the other half gone) about 650 s wall, its heal converged 1.25 s after, which took about
as long (each member takes the other half back one refutation at a time and reports its
whole list up at each change). Views mode, 1,000 members, 0.1 s view bundling,
seed 1: formation 228 s of CPU (266 s after the member sets and collector thresholds, 228
with the relayed states' cheaper loop; this docstring said about 7 min before), 245 / 331
datagrams sent / received per member, 2.4 MB per member (peak RSS 2.5 GB); a crash detected
by every member in 2.23 s.
Re-measured 2026-11-27 (commits cb1b9fa..8ad1beb: a view's per-member tables and wire
lists read in C, no automatic collections in sim_scale, a member's gossip list reported at
most every 0.05 s), seed 1, only the phases named, load 2 to 6.7 (a test campaign on the
other core): views mode, 1,000 members, 0.1 s bundling, formation 172 s of CPU (228
before), 186 s wall with a full collection and a round at load 2; gossip mode, 1,000
members, formation 40.5 s of CPU (117 before), 41.5 s wall, 251 datagrams sent per
member, then the 60 s partition (500 + 500, every member saw the other half gone) and
its heal, converged 1.45 s after, 170 s of CPU and 258 s wall (about 650 wall before on
a loaded machine, and the heal as long again); peak RSS 3.58 GB. The whole
``--sizes 1000`` bench was not run again.
Re-measured 2026-12-04 (commit 2bb285c, the stack of 4a5ca89), nothing else running: the
whole ``--sizes 1000`` bench finished for the first time, 1,016 s of wall time on 2 CPUs;
views 1,000: formation 268 s wall, the partition run 564 s (its 60 s partition took 25-35
min before STABLE and NAKACK at rest, the UNICAST backoff and FLUSH's restart rule), healed
1.50 s after; gossip 1,000: partition run 342 s, healed 1.55 s after, peak RSS 4.00 GiB.
Again later that day (d084bef: the gathering in proportion to the view, three per-member
passes gone): 786 s of wall time; views 1,000 formed in 59 s (target met), the full run
159 s, the partition run 302 s, healed 1.45 s after; gossip peak RSS 4.04 GiB.
Again on d70150d (about 8 gossip members verify each suspicion, not all; the rumor log
keeps one copy of each rumor): 660 s of wall time, 1,135 s of CPU; the gossip partition run
282 s (558 s on 98a40a5), gossip peak RSS 3.47 GiB (5.16), views formed in 47 s.
Views-mode crash detection grows with N through Lifeguard's suspicion timeout (0.5 s x
log10 N once confirmed) and the REMOVE's O(log N) gossip rounds to the coordinator; most of
the spread between single crashes is how soon a member first probes the crashed one, which
depends on where it sits in the others' round-robin probe orders (a member that joined after
a prober built its order waits for that prober's next cycle, N - 1 rounds: right after a
300-member gossip formation the first joiner's crash was detected in 1.5 to 2.0 s, the last
joiner's in 6.4 to 6.9 s): see docs/architecture.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from typing import Optional

from raygroups.stack.sim_scale import rumor_bound, simulate

TARGETS = {"rumor_share_within_bound": 0.999, "memory_1000_bytes": 4 * 2 ** 30,
           "traffic_growth_100_to_1000": 1.5, "views_formation_1000_wall_s": 180.0,
           "bench_wall_s": 300.0}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _child(kwargs: dict) -> dict:
    return simulate(progress=log, **kwargs)


def fresh(runs: list, jobs: int) -> list:
    """simulate(**kwargs) of each of ``runs``, each in a fresh process (its RSS growth and
    peak are this run's alone), ``jobs`` at a time; the results in order."""
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(max(1, min(jobs, len(runs))),
                                      maxtasksperchild=1) as pool:
        return pool.map(_child, runs, chunksize=1)


def view_bundling(mode: str, args) -> Optional[float]:
    """The fixed view bundling a views-mode run uses: ``--view-bundling``, else None (the
    preset's, which grows with the view: ``GmsConfig.view_bundling_per_member_s``)."""
    return args.view_bundling if mode == "views" else None


def plan(n: int, mode: str, args) -> list:
    """The runs of one size and mode, each a (role, simulate kwargs): the full run (seed
    ``--seed``: rumors, crash, join storm), the partition run (the same seed: formation, then
    the ``--partition`` split and its heal) and the rumor-only runs (seeds ``--seed`` + 1...).
    Apart, they go side by side on the cores instead of one after another."""
    bundling = view_bundling(mode, args)
    base = dict(members=n, membership=mode, memory=args.memory, timeout_s=args.timeout,
                join_interval_s=args.join_interval,
                options={"gms__view_bundling_s": bundling,
                         "gms__view_bundling_per_member_s": 0.0} if bundling else None)
    runs = [("full", dict(base, seed=args.seed, rumors=args.rumors, storm=args.storm,
                          crash=True))]
    if args.partition:
        runs.append(("partition", dict(base, seed=args.seed, rumors=0, storm=0, crash=False,
                                       traffic_rounds=2, partition_s=args.partition)))
    runs += [("rumors", dict(base, seed=args.seed + s, rumors=args.rumors, storm=0,
                             crash=False, traffic_rounds=2))
             for s in range(1, args.rumor_seeds)]
    return runs


PARTITION_KEYS = ("partition_s", "partition_sides", "partitioned_members_apart",
                  "heal_converge_s")


def combine(n: int, mode: str, args, runs: list) -> dict:
    """One row of figures from the runs of ``plan`` (in its order), with their results."""
    main = dict(runs[0][1])
    main["view_bundling_s"] = view_bundling(mode, args)
    trials = {"never": main.get("rumors_never_complete", 0),
              "within": main.get("rumors_within_bound", 0), "count": main.get("rumors", 0)}
    hist = dict(main.get("rumor_rounds_hist", {}))
    main["cpu_total_s"] = round(sum(r["cpu_s"] for _, r in runs), 1)
    main["wall_runs_s"] = {role: r["wall_s"] for role, r in runs if role != "rumors"}
    main["rss_peak_bytes"] = max(r["rss_peak_bytes"] for _, r in runs)
    for role, r in runs[1:]:
        if role == "partition":
            main.update({k: r[k] for k in PARTITION_KEYS})
            continue
        trials["never"] += r["rumors_never_complete"]
        trials["within"] += r["rumors_within_bound"]
        trials["count"] += r["rumors"]
        for k, v in r["rumor_rounds_hist"].items():
            hist[k] = hist.get(k, 0) + v
    main["rumor_trials"] = trials["count"]
    main["rumor_trials_within_bound"] = trials["within"]
    main["rumor_trials_never_complete"] = trials["never"]
    main["rumor_trials_share"] = trials["within"] / trials["count"] if trials["count"] else None
    main["rumor_trials_hist"] = dict(sorted(hist.items(), key=lambda kv: int(kv[0])))
    log(f"  -> {json.dumps(main)}")
    return main


def cost_order(item: tuple) -> tuple:
    """Longest runs first, so that the last run to start is a short one: larger first, then
    the partition runs (the burial of half the group at full probe rate), then gossip's
    full and rumor-only runs, then views'. At 1,000 members (2026-12-04, d70150d) they took
    282 and 290 s (partition, gossip and views), 232 s and about 210 s (gossip full and
    rumors), 124 s (views full): 1,135 s of CPU, so no order on two cores beats 570 s."""
    (n, mode), role, _ = item
    return (-n, role != "partition", mode != "gossip", role == "rumors")


def views_cost_note(n: int, measured: list) -> str:
    """What a views-mode run at n would cost, extrapolated from the largest size run: the
    formation's CPU time grows as N^3 (O(N) view changes of O(N^2) work each)."""
    if not measured:
        return f"views mode at {n} members not run (--views-max)"
    last = max(measured, key=lambda r: r["members"])
    form = last["cpu_formation_s"] * (n / last["members"]) ** 3
    return (f"views mode at {n:,} members not run (--views-max {last['members']}): at "
            f"{last['members']:,} members the formation took {last['cpu_formation_s']:.0f} s "
            f"of CPU and grows as N^3 (O(N) view changes, each handing every member O(N)-long "
            f"messages), so about {form / 60:,.0f} min for the formation alone at {n:,}")


def machine_memory() -> int:
    """Bytes of physical memory (Linux/macOS sysconf); 0 when unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def gossip_cost_note(n: int, measured: list) -> str:
    """What a gossip-mode run at n would take, from the largest size run: every member
    lists every other, so the memory per member grows as N (the total as N^2), and the
    rumors a formation spreads grow as N^2 log N."""
    if not measured:
        return f"gossip mode at {n:,} members not run (--gossip-max)"
    last = max(measured, key=lambda r: r["members"])
    m = last["members"]
    mem = last["memory_per_member_bytes"] * (n / m) * n
    per_pair = last["memory_per_member_bytes"] / m
    cpu = last["cpu_formation_s"] * (n / m) ** 2 * math.log2(n) / math.log2(m)
    have = machine_memory()
    fits = (f"this machine has {have / 2 ** 30:.0f} GiB" if have else "")
    return (f"gossip mode at {n:,} members not run (--gossip-max {m}): at {m:,} members each "
            f"member held {last['memory_per_member_bytes'] / 2 ** 20:.1f} MiB, about "
            f"{per_pair:,.0f} bytes per member it lists, so about {mem / 2 ** 30:,.0f} GiB at "
            f"{n:,} ({fits}); the formation alone would take about {cpu / 60:,.0f} min of CPU "
            f"({last['cpu_formation_s']:.0f} s at {m:,}, growing as N^2 log N)")


def walls(r: dict) -> str:
    """The wall time of a row's full and partition runs (its rumor-only runs ran beside)."""
    return ", ".join(f"{role} {w:.0f} s" for role, w in r["wall_runs_s"].items())


def fmt(v, d=2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{d}f}"
    return str(v)


def report(res: dict) -> None:
    print(f"\nraygroups simulator at scale ({'quick' if res['quick'] else 'full'} run): "
          f"Python {res['machine']['python']}, {res['machine']['cpus']} CPUs; "
          f"simulated seconds, LAN preset (a round = one 0.2 s SWIM probe interval), "
          f"static discovery through 3 seed members\n")
    print("| mode | N | rumor rounds median / max (bound log2(2N)+1) | rumors within bound "
          "| msgs/member/round sent / received, idle | ... while rumors spread | crash "
          "detected first / median / last | join storm of 100: converged | partition healed: "
          "converged | formation | memory/member | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["runs"]:
        share = r.get("rumor_trials_share")
        mode = r["membership"] + (f" (view bundling {r['view_bundling_s']} s)"
                                  if r.get("view_bundling_s") else "")
        cells = [mode, str(r["members"]),
                 f"{fmt(r.get('rumor_rounds_median'), 1)} / {fmt(r.get('rumor_rounds_max'))} "
                 f"({r.get('rumor_bound_rounds')})",
                 (f"{r['rumor_trials_within_bound']}/{r['rumor_trials']} = {100 * share:.2f}%"
                  if share is not None else "-"),
                 f"{fmt(r['steady_sent_per_member_round'])} / "
                 f"{fmt(r['steady_received_per_member_round'])}",
                 f"{fmt(r.get('rumor_sent_per_member_round'))} / "
                 f"{fmt(r.get('rumor_received_per_member_round'))}",
                 f"{fmt(r.get('detect_first_s'))} / {fmt(r.get('detect_median_s'))} / "
                 f"{fmt(r.get('detect_last_s'))} s",
                 f"{fmt(r.get('storm_converge_s'))} s",
                 (f"{fmt(r.get('heal_converge_s'))} s after {r['partition_s']:.0f} s apart"
                  if r.get("partition_s") else "-"),
                 f"{fmt(r['formation_after_last_start_s'])} s after the last start, "
                 f"{r['formation_sent_per_member']:,.0f} / "
                 f"{r['formation_received_per_member']:,.0f} datagrams sent / received "
                 f"per member",
                 f"{r['memory_per_member_bytes'] / 1024:,.0f} KiB",
                 f"runs {walls(r)}, CPU {r['cpu_total_s']:.0f} s in all (peak RSS "
                 f"{r['rss_peak_bytes'] / 2 ** 30:.2f} GiB)"]
        print("| " + " | ".join(cells) + " |")
    for note in res["notes"]:
        print(f"\n{note}")
    print()
    for line in res["verdicts"]:
        print(line)


def verdicts(res: dict) -> list:
    out = []
    for r in res["runs"]:
        share = r.get("rumor_trials_share")
        if share is not None:
            ok = share >= TARGETS["rumor_share_within_bound"]
            out.append(f"{r['membership']} {r['members']}: {100 * share:.2f}% of "
                       f"{r['rumor_trials']} rumors reached everyone within "
                       f"{rumor_bound(r['members'])} rounds (target >= 99.9%): "
                       f"{'met' if ok else 'NOT met'}")
    for mode in ("gossip", "views"):
        runs = sorted((r for r in res["runs"] if r["membership"] == mode),
                      key=lambda r: r["members"])
        if len(runs) >= 2:
            a, b = runs[0], runs[-1]
            for key in ("steady_sent_per_member_round", "steady_received_per_member_round",
                        "rumor_sent_per_member_round", "rumor_received_per_member_round"):
                if a.get(key) and b.get(key):
                    g = b[key] / a[key]
                    ok = g <= TARGETS["traffic_growth_100_to_1000"]
                    out.append(f"{mode}: {key} {a[key]} at {a['members']} -> {b[key]} at "
                               f"{b['members']} members (x{g:.2f}; constant within "
                               f"x{TARGETS['traffic_growth_100_to_1000']}: "
                               f"{'met' if ok else 'NOT met'})")
        big = [r for r in runs if r["members"] >= 1000]
        for r in big:
            ok = r["rss_peak_bytes"] <= TARGETS["memory_1000_bytes"]
            out.append(f"{mode} {r['members']}: peak RSS {r['rss_peak_bytes'] / 2 ** 30:.2f} "
                       f"GiB (target <= 4 GiB): {'met' if ok else 'NOT met'}; "
                       f"{r['cpu_total_s'] / 60:.1f} min CPU in all its runs")
            if mode == "views":
                w = r["wall_formation_s"]
                ok = w <= TARGETS["views_formation_1000_wall_s"]
                out.append(f"views {r['members']}: formed in {w:.0f} s of wall time "
                           f"({r['cpu_formation_s']:.0f} s of CPU; target <= "
                           f"{TARGETS['views_formation_1000_wall_s']:.0f} s): "
                           f"{'met' if ok else 'NOT met'}")
    if any(r["members"] >= 1000 for r in res["runs"]):
        ok = res["wall_s"] <= TARGETS["bench_wall_s"]
        out.append(f"the whole bench: {res['wall_s']:.0f} s of wall time on "
                   f"{res['machine']['cpus']} CPUs, {res['jobs']} runs at a time (target <= "
                   f"{TARGETS['bench_wall_s']:.0f} s): {'met' if ok else 'NOT met'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", help="comma list (default 100,300,1000; quick 100,300)")
    ap.add_argument("--modes", default="gossip,views")
    ap.add_argument("--views-max", type=int, default=1000)
    ap.add_argument("--gossip-max", type=int, default=1000,
                    help="larger gossip sizes print what they would take instead of running")
    ap.add_argument("--rumors", type=int, help="rumors per run (default 100, 500 in gossip "
                    "mode from 1,000 members on; quick 30)")
    ap.add_argument("--rumor-seeds", type=int,
                    help="runs per size for the rumor share (default 10 at <= 300 members, "
                         "2 at 1000; quick 3 and 1)")
    ap.add_argument("--storm", type=int, default=100)
    ap.add_argument("--partition", type=float, default=60.0,
                    help="simulated seconds the full run keeps the group split in two "
                         "halves before the heal (0: no partition phase)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--view-bundling", type=float, default=None,
                    help="a fixed gms__view_bundling_s for views-mode runs, without the "
                         "gathering that grows with the view (default: the LAN preset's, "
                         "0.01 s growing by 1 ms per member up to 1 s)")
    ap.add_argument("--join-interval", type=float, default=0.005,
                    help="simulated seconds between member starts during formation")
    ap.add_argument("--memory", choices=("rss", "tracemalloc"), default="rss")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="simulated seconds allowed per phase")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="runs of one size at a time, each in its own process (default: "
                         "2, or 1 on one CPU)")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in (args.sizes or ("100,300" if args.quick else "100,300,1000"))
             .split(",")]
    modes = [m for m in args.modes.split(",") if m]
    rumors_arg = args.rumors
    res = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "platform": platform.platform()},
           "quick": args.quick, "targets": TARGETS, "runs": [], "notes": [],
           "jobs": args.jobs}
    seeds_arg = args.rumor_seeds
    planned: dict = {}  # (n, mode) -> its runs, in plan() order
    beyond: list = []
    for mode in modes:
        for n in sizes:
            if n > (args.views_max if mode == "views" else args.gossip_max):
                beyond.append((n, mode))  # (what it would take: from the sizes run)
                continue
            if args.quick:
                args.rumor_seeds = seeds_arg or (1 if n >= 1000 or mode == "views" else 3)
            elif mode == "views":  # (formation costs O(N^3) in the simulator)
                args.rumor_seeds = seeds_arg or (3 if n <= 100 else 1)
            else:
                args.rumor_seeds = seeds_arg or (2 if n >= 1000 else 10)
            args.rumors = rumors_arg or (30 if args.quick else
                                         (500 if n >= 1000 and mode == "gossip" else 100))
            planned[(n, mode)] = plan(n, mode, args)
    # every run of every size and mode in one pool, the longest first
    items = sorted(((key, role, kw) for key, runs in planned.items() for role, kw in runs),
                   key=cost_order)
    log(f"{len(items)} runs ({', '.join(f'{m} {n}: {len(r)}' for (n, m), r in planned.items())}"
        f"), {args.jobs} at a time")
    t0 = time.monotonic()
    results = fresh([kw for _, _, kw in items], args.jobs)
    res["wall_s"] = round(time.monotonic() - t0, 1)
    done: dict = {}
    for (key, role, _), r in zip(items, results):
        done.setdefault(key, []).append((role, r))
    for (n, mode) in planned:
        order = [role for role, _ in planned[(n, mode)]]
        runs = sorted(done[(n, mode)], key=lambda rr: order.index(rr[0]))
        res["runs"].append(combine(n, mode, args, runs))
    for n, mode in beyond:
        note = views_cost_note if mode == "views" else gossip_cost_note
        res["notes"].append(note(n, [r for r in res["runs"] if r["membership"] == mode]))
    res["verdicts"] = verdicts(res)
    report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
