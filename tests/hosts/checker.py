"""Checkers on the histories of a host campaign run (tests/hosts/campaign.py), one per
property. Each takes what was recorded and returns the violations it found (strings).

Queue (the same rules as the simulator's tests/sim/queue_history.py, on client records keyed
by message body instead of replica state):
- ``queue_lost``: every publish acknowledged ok was accepted (on its queue or, rejected, on
  the alternate), unless an accept of it has an unknown outcome (``info``, or invoked and
  never completed: its client died mid-call with its host);
- ``queue_twice``: nothing accepted ok twice; nothing accepted that was never published, or
  whose publish failed definitely;
- ``queue_reject``: a reject acknowledged ok reached the alternate queue exactly once.
Views (from every member's view history, JSON as ``MemberActor.view_history`` gives it):
- ``view_agreement``: a view id names one member list everywhere;
- ``one_primary``: a primary id names one primary component (MySQL Group Replication);
- ``flapping``: no member incarnation is excluded twice in one fault's window (it left a
  primary view, came back, and left again: e.g. allowed back from a node Ray had given up
  on). Exclusions are counted from one primary view to the next: a member cut off from the
  others sees them all leave in its own non-primary views, which excludes nobody.
The Spark pipeline (tests/hosts/pipeline.py; its output read from the sink's Parquet files):
- ``pipeline_once``: every job whose publish was acknowledged is in the output exactly once,
  no job is there twice, none whose publish failed, and the pipeline drained its queue.
Multicast:
- ``duplicates``: no member delivered a message twice;
- ``virtual_synchrony``: members that moved together from one view to the next (as members
  of the next) delivered the same messages in the first (deliveries are tagged with their
  view; the members' inboxes are drained at the end).
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Optional

MAIN, ALT = "jobs", "jobs.dead"


def queue_checks(records: list) -> dict:
    """{checker: [violations]} for the queue, and ``ops``: operations checked."""
    publish = outcomes(records, "publish")
    accepted: Counter = Counter()
    accepted_on: dict = {}
    accept_info: set = set()
    rejected: Counter = Counter()
    pending: set = set()  # (client, body) of accepts invoked and never completed
    for r in records:
        op, at, body = r.get("op"), r.get("at"), r.get("body")
        if op == "accept" and at == "invoke":
            pending.add((r.get("c"), body))
        elif op == "accept":
            pending.discard((r.get("c"), body))
            if at == "ok":
                accepted[body] += 1
                accepted_on[body] = r.get("queue")
            elif at == "info":
                accept_info.add(body)
        elif op == "reject" and at == "ok" and r.get("queue") == MAIN:
            rejected[body] += 1
    accept_info |= {body for _, body in pending}  # the client died mid-call: unknown
    lost, twice, rej = [], [], []
    for body, n in accepted.items():
        if n > 1:
            twice.append(f"message {body} accepted {n} times")
        if publish.get(body) not in ("ok", "info"):
            twice.append(f"message {body} accepted, its publish {publish.get(body)}")
    for body, st in publish.items():
        if st == "ok" and not accepted.get(body) and body not in accept_info:
            lost.append(f"acknowledged publish {body} was lost")
    for body, n in rejected.items():
        if n > 1:
            rej.append(f"message {body} rejected {n} times")
        elif accepted.get(body) and accepted_on.get(body) != ALT:
            rej.append(f"message {body} rejected, then accepted on {accepted_on.get(body)}")
        elif not accepted.get(body) and body not in accept_info:
            rej.append(f"rejected message {body} never reached {ALT}")
    ops = sum(1 for r in records if r.get("at") in ("ok", "fail", "info"))
    return {"queue_lost": lost, "queue_twice": twice, "queue_reject": rej, "ops": ops,
            "publish_ok": sum(1 for s in publish.values() if s == "ok")}


def view_checks(histories: dict, windows: list = ()) -> dict:
    """``histories``: {member: [view json, ...]} (oldest first); ``windows``: the start times
    of the faults (a view installed at t belongs to the last window starting before t)."""
    agreement, primary, flaps = [], [], []
    by_id: dict = {}
    by_pid: dict = {}
    for member, views in histories.items():
        for v in views:
            key = (v["coord_uuid"], v["view_id"][1])
            uuids = tuple(v["uuids"])
            if by_id.setdefault(key, (member, uuids))[1] != uuids:
                agreement.append(f"view {v['view_id']} has members {v['members']} at {member} "
                                 f"and others at {by_id[key][0]}")
            if v.get("primary") and v.get("primary_id"):
                other = by_pid.setdefault(v["primary_id"], (member, key, set(uuids)))
                if other[1:] != (key, set(uuids)):
                    primary.append(f"primary id {v['primary_id']} given to view {key[1]} at "
                                   f"{member} and view {other[1][1]} at {other[0]}")
    starts = sorted(windows)
    exclusions: dict = defaultdict(int)
    for member, views in histories.items():
        # exclusions are the primary component's: from one primary view to the next (a
        # member cut off sees everyone else "leave" in its non-primary views)
        prev: set = set()
        gone: Counter = Counter()
        for v in views:
            if not v.get("primary"):
                continue
            now = set(v["uuids"])
            w = sum(1 for t in starts if t <= v.get("installed_at", 0))
            for u in prev - now:
                gone[(u, w)] += 1
            prev = now
        for key, n in gone.items():
            exclusions[key] = max(exclusions[key], n)
    for (u, w), n in exclusions.items():
        if n > 1:
            flaps.append(f"incarnation {u[:12]} excluded {n} times during fault {w}")
    return {"view_agreement": agreement, "one_primary": primary, "flapping": flaps,
            "views": sum(len(v) for v in histories.values())}


def multicast_checks(records: list, histories: dict) -> dict:
    seen: dict = defaultdict(Counter)
    got: dict = defaultdict(lambda: defaultdict(set))  # member -> view key -> bodies
    for r in records:
        if r.get("op") == "received" and r.get("at") == "ok":
            views = r.get("views") or [None] * len(r.get("bodies", ()))
            for b, v in zip(r.get("bodies", ()), views):
                seen[r.get("member")][b] += 1
                if v is not None:
                    got[r.get("member")][tuple(v)].add(b)
    dups = [f"{m} delivered {b} {n} times" for m, c in seen.items() for b, n in c.items()
            if n > 1]
    moved: dict = {}
    vs = []
    for member, views in histories.items():
        for v, nxt in zip(views, views[1:]):
            if member not in nxt["members"]:
                continue  # not a member of the next view (it left or was excluded)
            key = ((v["coord_uuid"], v["view_id"][1]), (nxt["coord_uuid"], nxt["view_id"][1]))
            mine = got[member].get(key[0], set())
            other = moved.setdefault(key, (member, mine))
            if other[1] != mine:
                diff = sorted(other[1] ^ mine)[:5]
                vs.append(f"{member} and {other[0]} moved from view {key[0][1]} to {key[1][1]} "
                          f"having delivered different messages, e.g. {diff}")
    return {"duplicates": dups, "virtual_synchrony": vs}


def sink_bodies(path: str) -> list:
    """The jobs (bodies) in a ``DedupSink``'s committed batches, one entry per row."""
    import pyarrow.parquet as pq
    if not os.path.isdir(path):
        return []
    out: list = []
    for name in sorted(os.listdir(path)):
        if name.startswith("batch="):
            out += [bytes(b).decode() for b in
                    pq.read_table(os.path.join(path, name), columns=["body"])["body"].to_pylist()]
    return out


def outcomes(records: list, op: str) -> dict:
    """{body: ok | fail | info} of ``op``'s calls (invoked and never completed: info)."""
    out: dict = {}
    for r in records:
        if r.get("op") == op:
            if r.get("at") == "invoke":
                out.setdefault(r.get("body"), "info")
            else:
                out[r.get("body")] = r.get("at")
    return out


def pipeline_checks(records: list, output: list) -> dict:
    publish = outcomes(records, "pipe_publish")
    written = Counter(output)
    bad = [f"job {b} written {n} times" for b, n in written.items() if n > 1]
    bad += [f"job {b} written, its publish {publish.get(b)}" for b in written
            if publish.get(b) not in ("ok", "info")]
    bad += [f"acknowledged job {b} not in the output" for b, st in publish.items()
            if st == "ok" and not written[b]]
    if not any(r.get("op") == "pipe_done" and r.get("at") == "ok" for r in records):
        bad.append("the pipeline did not drain its queue")
    batches = [r for r in records if r.get("op") == "pipe_batch"]
    return {"pipeline_once": bad, "pipeline_jobs": len(written),
            "pipeline_batches": sum(1 for r in batches if r.get("at") == "ok"),
            "pipeline_errors": sorted({r.get("err", "")[:60] for r in batches
                                       if r.get("at") != "ok"})}


CHECKERS = ("queue_lost", "queue_twice", "queue_reject", "view_agreement", "one_primary",
            "flapping", "duplicates", "virtual_synchrony", "pipeline_once")


def check(records: list, histories: dict, windows: list = (),
          output: Optional[list] = None) -> dict:
    """Every checker; ``output``: the pipeline's sink (None: no pipeline ran)."""
    out = {**queue_checks(records), **view_checks(histories, windows),
           **multicast_checks(records, histories),
           **(pipeline_checks(records, output) if output is not None
              else {"pipeline_once": [], "pipeline_jobs": 0, "pipeline_batches": 0,
                    "pipeline_errors": []})}
    out["violations"] = [f"{k}: {v}" for k in CHECKERS for v in out[k]]
    return out
