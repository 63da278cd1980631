"""Scale in the simulator: gossip and views membership at 100, 300 and 1,000 members.

    python bench/scale.py                    # gossip 100/300/1000, views 100/300 (~30-60 min)
    python bench/scale.py --modes views --sizes 1000 --views-max 1000 --view-bundling 0.1 \
        --rumor-seeds 1 --rumors 20
    python bench/scale.py --quick            # gossip 100/300, views 100, fewer rumors
    python bench/scale.py --sizes 1000 --modes gossip --rumor-seeds 1 --rumors 1000
    python bench/scale.py --json scale.json

Every figure comes from ``raygroups.stack.sim_scale.simulate`` (the same Stack objects on the
deterministic simulator; see its docstring for the phases) in simulated seconds, except the
``wall`` and memory columns. Per size and mode: one full run (formation, steady traffic,
rumors, a crash, a join storm of 100) and ``--rumor-seeds`` more runs that only form the
group and spread rumors, so that the share of rumors reaching every member within the gossip
design's
log2(2N)+1 rounds rests on ``rumors x seeds`` trials (target: >= 99.9%; by default 1,000
trials per size in gossip mode: 100 rumors x 10 seeds, 500 x 2 at 1,000 members; views
mode: 100 x 3 at 100 members, 100 x 1 beyond).

Views mode is bounded by ``--views-max`` (default 300). Steady state costs O(N) datagrams
per round above 32 members (STABLE digests go to the coordinator, the primary-component state
is relayed by the first member), but every view change still hands each member O(N)-long
messages (VIEW, the flush's cut, the relayed states) and has each layer rebuild its per-member
tables: O(N^2) work per view change, and a formation has O(N) of them, so formation grows as
N^3 in the simulator (300 members: about 70 s wall; 1,000: over an hour). Gathering joins
into fewer view changes (``--view-bundling 0.1``) brings 300 members to about 13 s and 1,000
to about 7 min (peak RSS 2.3 GB). Sizes above the bound print what they would cost instead
of starting.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from raygroups.stack.sim_scale import rumor_bound, simulate

TARGETS = {"rumor_share_within_bound": 0.999, "memory_1000_bytes": 4 * 2 ** 30,
           "traffic_growth_100_to_1000": 1.5}


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _child(kwargs: dict) -> dict:
    return simulate(progress=log, **kwargs)


def fresh(**kwargs) -> dict:
    """simulate() in a fresh process: its RSS growth and peak are this run's alone."""
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(_child, (kwargs,))


def run_size(n: int, mode: str, args) -> dict:
    log(f"{mode} mode, {n} members: full run (seed {args.seed})")
    t0 = time.monotonic()
    opts = {"gms__view_bundling_s": args.view_bundling} if args.view_bundling else None
    main = fresh(members=n, membership=mode, seed=args.seed, rumors=args.rumors,
                 storm=args.storm, crash=True, memory=args.memory, timeout_s=args.timeout,
                 join_interval_s=args.join_interval, options=opts)
    main["view_bundling_s"] = args.view_bundling
    trials = {"rounds": [], "never": main.get("rumors_never_complete", 0),
              "within": main.get("rumors_within_bound", 0), "count": main.get("rumors", 0)}
    hist = dict(main.get("rumor_rounds_hist", {}))
    for s in range(1, args.rumor_seeds):
        seed = args.seed + s
        log(f"{mode} mode, {n} members: rumors only (seed {seed})")
        r = fresh(members=n, membership=mode, seed=seed, rumors=args.rumors, storm=0,
                  crash=False, memory=args.memory, timeout_s=args.timeout,
                  join_interval_s=args.join_interval, traffic_rounds=2, options=opts)
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
    main["wall_total_s"] = round(time.monotonic() - t0, 1)
    log(f"  -> {json.dumps(main)}")
    return main


def views_cost_note(n: int, measured: list) -> str:
    """What a views-mode run at n would cost, extrapolated from the largest size run: the
    formation's wall time grows as N^3 (O(N) view changes of O(N^2) work each)."""
    if not measured:
        return f"views mode at {n} members not run (--views-max)"
    last = max(measured, key=lambda r: r["members"])
    form = last["wall_formation_s"] * (n / last["members"]) ** 3
    return (f"views mode at {n} members not run (--views-max {last['members']}): at "
            f"{last['members']} members the formation took {last['wall_formation_s']:.0f} s "
            f"wall and grows as N^3 (O(N) view changes, each handing every member O(N)-long "
            f"messages), so about {form / 60:.0f} min for the formation alone at {n}")


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
          "detected first / median / last | join storm of 100: converged | formation | "
          "memory/member | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
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
                 f"{fmt(r['formation_after_last_start_s'])} s after the last start",
                 f"{r['memory_per_member_bytes'] / 1024:,.0f} KiB",
                 f"{r['wall_total_s']:.0f} s (peak RSS {r['rss_peak_bytes'] / 2 ** 30:.2f} GiB)"]
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
                       f"{r['wall_total_s'] / 60:.1f} min wall")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", help="comma list (default 100,300,1000; quick 100,300)")
    ap.add_argument("--modes", default="gossip,views")
    ap.add_argument("--views-max", type=int, default=300)
    ap.add_argument("--rumors", type=int, help="rumors per run (default 100, 500 at 1,000 "
                    "members and more; quick 30)")
    ap.add_argument("--rumor-seeds", type=int,
                    help="runs per size for the rumor share (default 10 at <= 300 members, "
                         "2 at 1000; quick 3 and 1)")
    ap.add_argument("--storm", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--view-bundling", type=float, default=None,
                    help="gms__view_bundling_s (default: the LAN preset's 0.01 s); 0.1 "
                         "gathers a formation's joins into ~10x fewer view changes, which "
                         "views mode at 1,000 members needs to simulate in minutes")
    ap.add_argument("--join-interval", type=float, default=0.005,
                    help="simulated seconds between member starts during formation")
    ap.add_argument("--memory", choices=("rss", "tracemalloc"), default="rss")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="simulated seconds allowed per phase")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in (args.sizes or ("100,300" if args.quick else "100,300,1000"))
             .split(",")]
    modes = [m for m in args.modes.split(",") if m]
    rumors_arg = args.rumors
    res = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "platform": platform.platform()},
           "quick": args.quick, "targets": TARGETS, "runs": [], "notes": []}
    seeds_arg = args.rumor_seeds
    for mode in modes:
        for n in sizes:
            if mode == "views" and n > args.views_max:
                res["notes"].append(views_cost_note(
                    n, [r for r in res["runs"] if r["membership"] == "views"]))
                continue
            if args.quick:
                args.rumor_seeds = seeds_arg or (1 if n >= 1000 or mode == "views" else 3)
            elif mode == "views":  # (formation costs O(N^3) in the simulator)
                args.rumor_seeds = seeds_arg or (3 if n <= 100 else 1)
            else:
                args.rumor_seeds = seeds_arg or (2 if n >= 1000 else 10)
            args.rumors = rumors_arg or (30 if args.quick else (500 if n >= 1000 else 100))
            res["runs"].append(run_size(n, mode, args))
    res["verdicts"] = verdicts(res)
    report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
