"""A client on one Ray host of the fault campaign: queue traffic and multicasts through the
member on its own node, every operation recorded when invoked and when it completes.

    python -m tests.hosts.client --group G --out hist.jsonl --stop STOPFILE --seed N

Each line of ``--out`` is a JSON object: ``{"t", "c" (client id), "op", "body", "at"
(invoke | ok | fail | info), "err"}``; ``at="ok"`` of a publish means acknowledged (a majority
of the primary component holds it), ``fail`` that it did not take effect (QueueNotPrimary,
StaleEpoch, NotAcquired, NoSuchQueue), ``info`` that the outcome is unknown
(QueueOutcomeUnknown, the member gone or Ray unreachable mid-call). Deliveries (``op``
"acquired", "received") list what the client got. The file is flushed line by line, so a
host killed mid-run leaves every completed operation on record. The client runs until
``--stop`` exists, then exits.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid

MAIN, ALT = "jobs", "jobs.dead"
DEFINITE = ("QueueNotPrimary", "StaleEpoch", "NotAcquired", "NoSuchQueue", "QueueFull",
            "NotMember", "AcquireTimeout")


class Recorder:
    def __init__(self, path: str, client: str):
        self.f = open(path, "a", buffering=1)
        self.client = client

    def __call__(self, op: str, at: str, **kw) -> None:
        rec = {"t": round(time.time(), 4), "c": self.client, "op": op, "at": at, **kw}
        self.f.write(json.dumps(rec) + "\n")


def outcome(e: BaseException) -> str:
    return "fail" if type(e).__name__ in DEFINITE else "info"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=20.0, help="operations per second")
    a = ap.parse_args(argv)
    import ray

    from raygroups.actors import Group
    rng = random.Random(a.seed)
    client = f"{os.uname().nodename[:6]}-{uuid.uuid4().hex[:6]}"
    rec = Recorder(a.out, client)
    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    node = ray.get_runtime_context().get_node_id()
    g = Group.attach(a.group)
    seq = 0
    q = member = None
    while not os.path.exists(a.stop):
        if q is None:
            try:
                member = next(m["name"] for m in g.members() if m.get("node_id") == node)
                q = g.queue(MAIN, alternate=ALT, member=member, lease_s=5.0)
                rec("attach", "ok", member=member)
            except Exception as e:
                rec("attach", "fail", err=type(e).__name__)
                time.sleep(1.0)
                continue
        seq += 1
        try:
            step(rng, g, q, member, client, seq, rec)
        except Exception as e:  # a Ray failure of the handle itself: find the member again
            rec("client", "info", err=f"{type(e).__name__}: {e}"[:200])
            q = None
        time.sleep(rng.expovariate(a.rate))
    rec("stop", "ok")
    return 0


def recorded(rec: Recorder, op: str, call, **kw) -> bool:
    """``call()`` between its invocation and its completion on record; True when it was ok."""
    rec(op, "invoke", **kw)
    try:
        call()
    except Exception as e:
        rec(op, outcome(e), err=type(e).__name__, **kw)
        return False
    rec(op, "ok", **kw)
    return True


def step(rng: random.Random, g, q, member: str, client: str, seq: int, rec: Recorder) -> None:
    r = rng.random()
    body = f"{client}:{seq}"
    if r < 0.45:
        recorded(rec, "publish", lambda: q.publish(body.encode()), body=body)
    elif r < 0.85:
        try:
            got = q.acquire_many(rng.randint(1, 5), timeout_s=0.3)
        except Exception as e:
            rec("acquire", outcome(e), err=type(e).__name__)
            return
        if not got:
            return
        rec("acquired", "ok", bodies=[d.body.decode() for d in got],
            redelivered=[d.redelivered for d in got])
        for d in got:
            op = rng.choices(["accept", "release", "reject"], [0.8, 0.1, 0.1])[0]
            recorded(rec, op, lambda: q.settle_many(op, [d]), body=d.body.decode(),
                     queue=d.queue)
    else:
        recorded(rec, "send", lambda: g.send(body.encode()), body=body)
        try:
            got = g.receive(1000, timeout=0.0, member=member)
        except Exception as e:
            rec("receive", outcome(e), err=type(e).__name__)
            return
        if got:
            rec("received", "ok", member=member,
                bodies=[m["payload"].decode() for m in got if isinstance(m["payload"], bytes)],
                views=[m["view"] for m in got if isinstance(m["payload"], bytes)])


if __name__ == "__main__":
    sys.exit(main())
