"""Failure detection (crash, hang, host loss), false exclusions under loss, and
heal-to-one-view, on real sockets.

Every member is its own process (``python -m tests.member_proc``) on this machine, with the
LAN preset (``StackConfig.lan()`` timers: SWIM probes every 0.2 s, 80 ms probe timeout,
suspicion 0.5..1.5 s, verification window 0.5 s), bound to 127.0.0.1 with static
discovery. Members print a ``time.time()`` stamp with every view they install; the machine
shares one clock, so the stamps compare directly with the time of the kill or heal.

* detection: kill -9 one member (chosen at random, the coordinator included), measure
  until each survivor installed a view without it; restart it (a fresh process, a fresh
  address), wait for one full view, repeat. Per member: every survivor's delay; at every
  member: the slowest survivor of each trial (when the whole group had the new view). With
  the LAN preset FD_SOCK is on: the killed member's watcher sees its connection close and
  SWIM verifies at once; each trial counts whether that path excluded it (a survivor's
  ``verified_dead`` went up: "by FD_SOCK"). ``--no-fd-sock`` measures SWIM's timers alone.
* hang: SIGSTOP one member (the coordinator included), the same measure; SIGCONT once
  every survivor excluded it, and wait until it merged back into one full view. Its kernel
  keeps its connections open, so FD_SOCK (on) sees nothing: SWIM's timers find it.
* host loss: as root, one member per network namespace (tests/netns.py); nftables drops
  everything in and out of one member's namespace, the same measure; the rule is lifted
  once every other member excluded it, and it merges back. No reset reaches anyone either.
  Both at 5 and 10 members, ``--trials`` each; target p50 <= 2 s at every member.
* false exclusions: 5 members (LAN preset, FD_SOCK on), every member drops a share of the
  messages it receives (the in-process fault layer, ``faults__drop_up=p``). Every member stays alive, so each
  member that some installed view removes is a false exclusion (counted once per view id
  and member); the rate is per member-hour of running.
* heal: split 5 members 3/2, wait until each side installed a view of its own side, heal,
  measure until all five installed one common view. With the fault layer (``cut`` /
  ``heal`` on the members' stdin: they drop what the other side sends), and, as root, in
  network namespaces with nftables (tests/netns.py).

    python bench/failure.py                   # the full table (about 35 minutes)
    python bench/failure.py --quick           # fewer trials, shorter loss runs (~4 min)
    python bench/failure.py --json out.json   # also write the figures
    python bench/failure.py --skip loss,heal --no-fd-sock   # detection by SWIM's timers
    python bench/failure.py --skip detect,loss,heal --trials 12   # hang and host loss

Run from the repository root (the members run as ``python -m tests.member_proc``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import sys
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from percentile import pct  # noqa: E402
from tests.member_proc import LoopbackMembers  # noqa: E402
from tests.netns import NetLab  # noqa: E402

LAN = ["--preset", "lan"]
SIDES = ([0, 1, 2], [3, 4])
TARGETS = {"detect_p50_s": 0.3, "detect_p99_s": 2.0, "hang_p50_s": 2.0,
           "false_exclusions_10pct": 0, "heal_s": 5.0}
PARTS = ("detect", "hang", "hostloss", "loss", "heal")


def cluster(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:6]}"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def start_group(n: int, tag: str, extra: list, attempts: int = 3) -> LoopbackMembers:
    """n members in one view; a group that does not form in 60 s is logged and retried."""
    for attempt in range(attempts):
        g = LoopbackMembers(n, cluster(tag), extra=extra)
        try:
            g.start(stagger=0.2)
            g.wait_all(lambda v: len(v["members"]) == n, timeout=60)
            return g
        except TimeoutError as e:
            log(f"  {tag}: {n} members formed no common view in 60 s (attempt "
                f"{attempt + 1}/{attempts})\n{str(e)[:4000]}")
            g.close()
    raise RuntimeError(f"{tag}: no group of {n} after {attempts} attempts")


def one_view(lasts: list, names: list) -> bool:
    return (all(v is not None for v in lasts)
            and len({tuple(v["view_id"]) for v in lasts}) == 1
            and all(v["members"] == lasts[0]["members"] for v in lasts)
            and sorted(lasts[0]["members"]) == sorted(names))


# -- a member hit (kill -9, SIGSTOP) -> new view --------------------------------------------
def exclusion_delays(views_by_survivor: list, name: str, t0: float) -> list:
    """Each survivor's delay from ``t0`` to its first view (stamped after ``t0``) without
    ``name``."""
    return [next(v["t"] for v in views if v["t"] >= t0 and name not in v["members"]) - t0
            for views in views_by_survivor]


def summarize(per_member: list, at_all: list) -> dict:
    """Percentiles of every survivor's delay, and of each trial's slowest survivor."""
    return {"per_member_p50_s": pct(per_member, 0.5), "per_member_p99_s": pct(per_member, 0.99),
            "all_p50_s": pct(at_all, 0.5), "all_p99_s": pct(at_all, 0.99),
            "all_max_s": max(at_all, default=float("nan")),
            "all_mean_s": statistics.fmean(at_all) if at_all else float("nan")}


def verified(g: LoopbackMembers, members: list) -> int:
    """SWIM's ``verified_dead`` summed over ``members``: deaths FD_SOCK's path found."""
    return sum(s.get("swim", {}).get("verified_dead", 0) for s in g.stats(members).values())


def loopback_trials(n: int, trials: int, settle: float, rng: random.Random, verb: str,
                    extra: list, hit, mend, note=lambda g, survivors: "") -> dict:
    """``trials`` times: hit a random member (the coordinator included) with
    ``hit(g, victim, survivors)`` (returns the time of the fault), measure until every
    survivor installed a view without it, then ``mend(g, victim)`` (TimeoutError: the group
    is started afresh). ``note(g, survivors)`` labels a trial ("" for none); ``noted``
    counts the labelled ones. A member not excluded within 30 s is a missed trial."""
    per_member, at_all, coord_hit, missed, noted = [], [], 0, 0, 0
    g = None
    try:
        done = 0
        while done < trials:
            if g is None:
                g = start_group(n, "".join(filter(str.isalnum, verb)) + str(n), LAN + list(extra))
            time.sleep(settle)
            members = g.last_view(0)["members"]
            victim = rng.randrange(n)
            name = g.names[victim]
            survivors = [i for i in range(n) if i != victim]
            t0 = hit(g, victim, survivors)
            try:
                g.wait_all(lambda v: name not in v["members"], survivors, timeout=30)
            except TimeoutError as e:
                missed += 1
                log(f"  n={n}: {verb} {name}: not excluded within 30 s; restarting the "
                    f"group\n{str(e)[:3000]}")
                g.close()
                g = None
                continue
            delays = exclusion_delays([g.views(i) for i in survivors], name, t0)
            per_member.extend(delays)
            at_all.append(max(delays))
            label = note(g, survivors)
            noted += bool(label)
            coord_hit += members[0] == name
            done += 1
            log(f"  n={n} trial {done}/{trials}: {verb} {name}"
                f"{' (coordinator)' if members[0] == name else ''}: "
                f"{min(delays):.3f}..{max(delays):.3f} s{label}")
            try:
                mend(g, victim)
            except TimeoutError as e:
                log(f"  n={n}: {name} not back in one view; restarting the group\n"
                    f"{str(e)[:3000]}")
                g.close()
                g = None
    finally:
        if g is not None:
            g.close()
    return {"members": n, "trials": trials, "coordinator_hit": coord_hit, "missed": missed,
            "noted": noted, **summarize(per_member, at_all)}


def whole_again(g: LoopbackMembers, n: int, since: float, timeout: float = 60.0) -> None:
    """Every member installed, after ``since``, one common view of all n."""
    g.wait(lambda: one_view([g.last_view(i) for i in range(n)], g.names)
           and all(g.last_view(i)["t"] >= since for i in range(n)), timeout,
           f"one {n}-member view", live=range(n))


def detection(n: int, trials: int, settle: float, rng: random.Random,
              extra: list = ()) -> dict:
    """kill -9; a fresh process (a fresh address) takes the victim's place afterwards."""
    before = {}

    def hit(g: LoopbackMembers, victim: int, survivors: list) -> float:
        before["verified"] = verified(g, survivors)
        return g.signal(victim, signal.SIGKILL)

    def by_fd_sock(g: LoopbackMembers, survivors: list) -> str:
        return " (by FD_SOCK)" if verified(g, survivors) > before["verified"] else ""

    def respawn(g: LoopbackMembers, victim: int) -> None:
        t = time.time()
        g.spawn(victim)
        whole_again(g, n, t, timeout=30)
    res = loopback_trials(n, trials, settle, rng, "kill -9", extra, hit, respawn, by_fd_sock)
    res["by_fd_sock"] = res.pop("noted")
    return res


# -- SIGSTOP (a hung process) -> new view ---------------------------------------------------
def hang(n: int, trials: int, settle: float, rng: random.Random) -> dict:
    """SIGSTOP one member: its kernel keeps its sockets open, so FD_SOCK sees nothing and
    SWIM's timers must find it. SIGCONT once every survivor excluded it, and wait until it
    merged back into one view of all n."""
    def stop(g: LoopbackMembers, victim: int, survivors: list) -> float:
        return g.signal(victim, signal.SIGSTOP)

    def cont(g: LoopbackMembers, victim: int) -> None:
        whole_again(g, n, g.signal(victim, signal.SIGCONT))
    res = loopback_trials(n, trials, settle, rng, "SIGSTOP", [], stop, cont)
    del res["noted"]
    return {"kind": "SIGSTOP", **res}


# -- false exclusions under random loss ----------------------------------------------------
def exclusions(views_by_member: dict, since: float, own_singletons: bool = False) -> set:
    """(view id, member) for every member that an installed view (after ``since``) removed
    from the installing member's previous view. A singleton view a member forms for itself
    after being excluded is the consequence of an exclusion already counted, not a new
    one."""
    out = set()
    for who, views in views_by_member.items():
        prev = None
        for v in views:
            if prev is not None and v["t"] >= since:
                if v["members"] == [who] and not own_singletons:
                    prev = v
                    continue
                for m in prev["members"]:
                    if m not in v["members"]:
                        out.add((tuple(v["view_id"]), m))
            prev = v
    return out


def false_exclusions(loss: float, seconds: float, n: int = 5) -> dict:
    with start_group(n, f"loss{int(loss * 100)}",
                     LAN + ["--drop-up", str(loss), "--drop-down", "0"]) as g:
        t0 = time.time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(5.0, max(0.0, end - time.monotonic())))
            dead = [i for i in range(n) if g.procs[i].poll() is not None]
            if dead:
                raise RuntimeError(f"members {dead} exited\n{g.logs()}")
        t1 = time.time()
        for i in range(n):
            g.command(i, "stats")
        g.wait(lambda: all(g.events(i, "stats") for i in range(n)), 10, "stats")
        views = {g.names[i]: g.views(i) for i in range(n)}
        found = sorted(exclusions(views, t0))
        stats = [g.events(i, "stats")[-1]["stats"] for i in range(n)]
        swim = {k: sum(s.get("swim", {}).get(k, 0) for s in stats)
                for k in ("probes", "suspicions", "refutations", "remove_overruled",
                          "suspicion_extended", "dead")}
        dropped = sum(s.get("faults", {}).get("dropped_up", 0) for s in stats)
        watched = sum(s.get("fd_sock", {}).get("connected", 0) for s in stats)
        member_hours = n * (t1 - t0) / 3600
        final_one = one_view([g.last_view(i) for i in range(n)], g.names)
    return {"loss": loss, "members": n, "seconds": round(t1 - t0, 1),
            "member_hours": member_hours, "false_exclusions": len(found),
            "per_member_hour": len(found) / member_hours,
            "upper95_per_member_hour": (3.0 if not found else float("nan")) / member_hours,
            "excluded": [[list(vid), m] for vid, m in found], "swim": swim,
            "dropped_up": dropped, "fd_sock_connected": watched, "one_view_at_end": final_one}


# -- heal -> one view ----------------------------------------------------------------------
def heal_faults(trials: int, settle: float) -> dict:
    n = 5
    out = []
    with start_group(n, "heal", LAN + ["--faults"]) as g:
        for trial in range(trials):
            time.sleep(settle)
            t_cut = time.time()
            for side in SIDES:
                other = [g.names[k] for k in range(n) if k not in side]
                for k in side:
                    g.command(k, "cut " + ",".join(other))
            for side in SIDES:
                g.wait_all(lambda v, s=side: sorted(v["members"]) == sorted(g.names[k] for k in s),
                           side, timeout=60)
            t_split = time.time()
            time.sleep(settle)
            t_heal = time.time()
            for k in range(n):
                g.command(k, "heal")
            last = g.wait_all(lambda v: len(v["members"]) == n, timeout=60)
            vid = last[0]["view_id"]
            t_one = max(next(v["t"] for v in g.views(k) if v["view_id"] == vid)
                        for k in range(n))
            out.append(t_one - t_heal)
            log(f"  heal (fault layer) trial {trial + 1}/{trials}: split seen after "
                f"{t_split - t_cut:.2f} s, one view {t_one - t_heal:.2f} s after the heal")
    return {"how": "fault layer (cut/heal on stdin)", "trials": trials, "members": n,
            "p50_s": pct(out, 0.5), "max_s": max(out), "all_s": out}


def lab_views(procs: list) -> list:
    """Every view each lab member printed so far (complete lines only)."""
    res = []
    for p in procs:
        with open(p.out_path, "rb") as f:
            data = f.read()
        data = data[:data.rfind(b"\n") + 1]
        res.append([json.loads(x) for x in data.splitlines() if x.startswith(b"{")
                    and b'"view"' in x])
    return res


def lab_wait(procs: list, names: list, cond, what: str, timeout: float = 60.0) -> list:
    """Poll until ``cond`` holds for the members' last views; returns every view."""
    deadline = time.monotonic() + timeout
    while True:
        vs = lab_views(procs)
        if all(vs) and cond([v[-1] for v in vs]):
            return vs
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            detail = "\n".join(f"  {names[k]} (exit {p.poll()}): "
                               + "; ".join(f"{v['view_id']} {v['members']}"
                                           f"{' merge' if v['merge'] else ''}"
                                           for v in vs[k][-6:])
                               for k, p in enumerate(procs))
            raise TimeoutError(f"no {what} within {timeout:.0f} s; last views:\n{detail}")
        time.sleep(0.02)


def lab_group(lab: NetLab, tag: str, port: int = 7800) -> tuple:
    """One member per lab host (m0, m1, ...), LAN preset, static discovery; returns
    (procs, names) once all are in one view."""
    n, name = lab.n, cluster(tag)
    names = [f"m{k}" for k in range(n)]
    hosts = ",".join(f"{lab.addr(k)}:{port}" for k in range(n))
    procs = []
    for k in range(n):
        procs.append(lab.spawn(k, [sys.executable, "-m", "tests.member_proc", "--cluster",
                                   name, "--name", names[k], "--bind", lab.addr(k),
                                   "--port", str(port), "--hosts", hosts, *LAN],
                               cwd=REPO, name=names[k]))
        time.sleep(0.2)
    lab_wait(procs, names, lambda ls: one_view(ls, names), f"{n}-member view")
    return procs, names


def heal_netns(trials: int, settle: float) -> dict:
    out, applied = [], []
    with NetLab(5) as lab:
        procs, names = lab_group(lab, "heal-netns")
        for trial in range(trials):
            time.sleep(settle)
            t_cut = time.time()
            lab.partition(SIDES)
            lab_wait(procs, names,
                     lambda ls: all(one_view([ls[k] for k in s], [names[k] for k in s])
                                    for s in SIDES), "split views")
            t_split = time.time()
            time.sleep(settle)
            t_heal = time.time()
            lab.heal()
            applied.append(time.time() - t_heal)
            vs = lab_wait(procs, names, lambda ls: one_view(ls, names),
                          "one view after the heal")
            vid = vs[0][-1]["view_id"]
            t_one = max(next(v["t"] for v in mv if v["view_id"] == vid) for mv in vs)
            out.append(t_one - t_heal)
            log(f"  heal (netns) trial {trial + 1}/{trials}: split seen after "
                f"{t_split - t_cut:.2f} s, one view {t_one - t_heal:.2f} s after the heal "
                f"(nft rules lifted in {applied[-1] * 1000:.0f} ms)")
    return {"how": "network namespaces + nftables", "trials": trials, "members": 5,
            "p50_s": pct(out, 0.5), "max_s": max(out), "all_s": out,
            "nft_apply_s": statistics.fmean(applied)}


# -- host loss (nftables drop-all on one namespace) -> new view ------------------------------
def host_loss(n: int, trials: int, settle: float, rng: random.Random) -> dict:
    """Isolate one member's namespace (nftables drops everything in and out: no reset
    reaches anyone, so FD_SOCK sees nothing and SWIM's timers must find it); lift the rule
    once every other member excluded it, and wait until it merged back into one view."""
    per_member, at_all, coord_trials = [], [], 0
    with NetLab(n) as lab:
        procs, names = lab_group(lab, f"hostloss{n}")
        for trial in range(trials):
            time.sleep(settle)
            members = lab_views(procs)[0][-1]["members"]
            victim = rng.randrange(n)
            name = names[victim]
            survivors = [k for k in range(n) if k != victim]
            t_cut = time.time()
            lab.isolate(victim)
            vs = lab_wait(procs, names,
                          lambda ls: all(name not in ls[k]["members"] for k in survivors),
                          f"views without {name}", timeout=30)
            t_heal = time.time()
            lab.heal()
            delays = exclusion_delays([vs[k] for k in survivors], name, t_cut)
            per_member.extend(delays)
            at_all.append(max(delays))
            coord_trials += members[0] == name
            log(f"  n={n} trial {trial + 1}/{trials}: isolated {name}"
                f"{' (coordinator)' if members[0] == name else ''}: "
                f"{min(delays):.3f}..{max(delays):.3f} s")
            lab_wait(procs, names,
                     lambda ls: one_view(ls, names) and all(v["t"] >= t_heal for v in ls),
                     f"one {n}-member view after the heal")
    return {"kind": "host loss (nftables)", "members": n, "trials": trials,
            "coordinator_hit": coord_trials, "missed": 0, **summarize(per_member, at_all)}


# -- report --------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials, shorter loss runs")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    ap.add_argument("--trials", type=int,
                    help="kill -9, SIGSTOP and host-loss trials per group size")
    ap.add_argument("--loss-seconds", type=float, help="seconds per loss rate")
    ap.add_argument("--heal-trials", type=int)
    ap.add_argument("--seed", type=int, default=1, help="which members get killed")
    ap.add_argument("--skip", default="", help="comma list of: " + ",".join(PARTS))
    ap.add_argument("--no-fd-sock", action="store_true",
                    help="kill -9 detection by SWIM's timers alone (FD_SOCK off in those "
                    "members; the other parts keep it on)")
    args = ap.parse_args()
    q = args.quick
    trials = args.trials or (8 if q else 30)
    loss_s = args.loss_seconds or (60.0 if q else 300.0)
    heal_trials = args.heal_trials or (3 if q else 10)
    settle = 1.5
    skip = set(filter(None, args.skip.split(",")))
    if skip - set(PARTS):
        ap.error(f"--skip: unknown {','.join(sorted(skip - set(PARTS)))} "
                 f"(choose from {','.join(PARTS)})")
    rng = random.Random(args.seed)
    res: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "loop": "asyncio", "preset": "StackConfig.lan() on 127.0.0.1, "
                             "static discovery, UDP + IP multicast"
                             + (", FD_SOCK on (off for kill -9: --no-fd-sock)"
                                if args.no_fd_sock else ", FD_SOCK on")},
                 "quick": q, "targets": TARGETS}

    if "detect" not in skip:
        res["detection"] = []
        for n in (5, 10):
            log(f"kill -9 -> new view, {n} members, {trials} trials")
            res["detection"].append(detection(n, trials, settle, rng,
                                              ["--no-fd-sock"] if args.no_fd_sock else []))
    if "hang" not in skip:
        res["hang"] = []
        for n in (5, 10):
            log(f"SIGSTOP -> new view, {n} members, {trials} trials")
            res["hang"].append(hang(n, trials, settle, rng))
    if "hostloss" not in skip:
        ok, why = NetLab.available()
        if ok:
            for n in (5, 10):
                log(f"host loss (nftables drop-all) -> new view, {n} members, {trials} trials")
                res.setdefault("hang", []).append(host_loss(n, trials, settle, rng))
        else:
            res["hostloss_skipped"] = why
    if "loss" not in skip:
        res["false_exclusions"] = []
        for loss in (0.05, 0.10):
            log(f"false exclusions at {loss:.0%} loss, 5 members, {loss_s:.0f} s")
            res["false_exclusions"].append(false_exclusions(loss, loss_s))
    if "heal" not in skip:
        res["heal"] = []
        log(f"heal -> one view, 3/2 split, {heal_trials} trials (fault layer)")
        res["heal"].append(heal_faults(heal_trials, settle))
        ok, why = NetLab.available()
        if ok:
            log(f"heal -> one view, 3/2 split, {heal_trials} trials (netns)")
            res["heal"].append(heal_netns(heal_trials, settle))
        else:
            res["heal_netns_skipped"] = why

    ran = [p for p in PARTS if p not in skip]
    kind = "quick" if q else ("full" if len(ran) == len(PARTS) else
                              "parts: " + (", ".join(ran) or "none"))
    print(f"\nraygroups failure benchmark ({kind}, {trials} trials): "
          f"{res['machine']['cpus']} CPUs, Python {res['machine']['python']}, asyncio; "
          f"each member its own process, {res['machine']['preset']}\n")
    if "detection" in res:
        print("kill -9 -> view without the member (per member: every survivor; "
              "at every member: the slowest survivor of a trial)")
        print("| members | trials | coord killed | by FD_SOCK | per member p50 / p99 | "
              "at every member p50 / p99 / max | target |")
        print("|---|---|---|---|---|---|---|")
        for d in res["detection"]:
            ok = d["all_p50_s"] <= TARGETS["detect_p50_s"] and \
                d["all_p99_s"] <= TARGETS["detect_p99_s"]
            d["target_met"] = ok
            tgt = f"p50 <= 0.3 s, p99 <= 2 s: {verdict(ok)}"
            miss = f" ({d['missed']} missed)" if d["missed"] else ""
            print(f"| {d['members']} | {d['trials']}{miss} | {d['coordinator_hit']} | "
                  f"{d['by_fd_sock']} | "
                  f"{d['per_member_p50_s']:.3f} / {d['per_member_p99_s']:.3f} s | "
                  f"{d['all_p50_s']:.3f} / {d['all_p99_s']:.3f} / {d['all_max_s']:.3f} s | "
                  f"{tgt} |")
        print()
    if "hang" in res or "hostloss_skipped" in res:
        print("hang and host loss -> view without the member (SWIM's timers: FD_SOCK is on "
              "but sees no connection close)")
        print("| how | members | trials | coord hit | per member p50 / p99 | "
              "at every member p50 / p99 / max | target |")
        print("|---|---|---|---|---|---|---|")
        for d in res.get("hang", []):
            d["target_met"] = d["all_p50_s"] <= TARGETS["hang_p50_s"] and not d["missed"]
            miss = f" ({d['missed']} missed)" if d["missed"] else ""
            print(f"| {d['kind']} | {d['members']} | {d['trials']}{miss} | "
                  f"{d['coordinator_hit']} | "
                  f"{d['per_member_p50_s']:.3f} / {d['per_member_p99_s']:.3f} s | "
                  f"{d['all_p50_s']:.3f} / {d['all_p99_s']:.3f} / {d['all_max_s']:.3f} s | "
                  f"p50 <= 2 s: {verdict(d['target_met'])} |")
        if "hostloss_skipped" in res:
            print(f"(host loss skipped: {res['hostloss_skipped']})")
        print()
    if "false_exclusions" in res:
        print("false exclusions: 5 live members, each dropping a share of what it receives "
              "(fault layer)")
        print("| loss | run | member-hours | false exclusions | per member-hour | "
              "suspicions / refutations | FD_SOCK connections | one view at end | target |")
        print("|---|---|---|---|---|---|---|---|---|")
        for f in res["false_exclusions"]:
            rate = (f"{f['per_member_hour']:.1f}" if f["false_exclusions"]
                    else f"0 (95% bound < {f['upper95_per_member_hour']:.0f})")
            tgt = ""
            if f["loss"] >= 0.10:
                f["target_met"] = f["false_exclusions"] == 0
                tgt = f"zero at 10%: {verdict(f['target_met'])}"
            print(f"| {f['loss']:.0%} | {f['seconds']:.0f} s | {f['member_hours']:.3f} | "
                  f"{f['false_exclusions']} | {rate} | {f['swim']['suspicions']} / "
                  f"{f['swim']['refutations']} | {f['fd_sock_connected']} | "
                  f"{f['one_view_at_end']} | {tgt} |")
        print()
    if "heal" in res:
        print("partition 3/2, heal -> one common 5-member view at every member")
        print("| how | trials | p50 | max | target |")
        print("|---|---|---|---|---|")
        for h in res["heal"]:
            h["target_met"] = h["max_s"] <= TARGETS["heal_s"]
            print(f"| {h['how']} | {h['trials']} | {h['p50_s']:.2f} s | {h['max_s']:.2f} s | "
                  f"within 5 s: {verdict(h['target_met'])} |")
        if "heal_netns_skipped" in res:
            print(f"(network namespaces skipped: {res['heal_netns_skipped']})")
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
