"""The README's demo: member actors on a local Ray cluster.

    python -m raygroups.actors.demo [--members 5] [--serve SECONDS]

Starts a local Ray cluster (on loopback), launches a 5-member group as Ray actors on an
embedded default (loopback sockets, a local directory discovery store), prints the view,
kills a member with ``ray.kill`` and shows how fast the group excluded it (Ray is the second
failure signal) and the new view; Ray restarts the member, which rejoins with a fresh UUID,
and the coordinator rewrites its members file in the store. Then it serves the status page
for a while, prints its URL, and shuts everything down.
"""
from __future__ import annotations

import argparse
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

from raygroups.stack.discovery.members_file import uid_to_text

from .ray_compat import init_local, keep_on_loopback

keep_on_loopback()  # before anything imports ray


def members_files(root: str, cluster: str) -> dict:
    """{file name: text} of the members files in the store directory."""
    d = os.path.join(root, cluster)
    out = {}
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.endswith(".list"):
                with open(os.path.join(d, name)) as f:
                    out[name] = f.read()
    return out


def show_files(files: dict) -> None:
    if not files:
        print("    (no members file)")
    for name, text in files.items():
        print(f"    {name}:")
        for line in text.strip().splitlines():
            print(f"      {line}")


def table(members: list) -> None:
    w = max([16] + [len(m["uuid_text"]) for m in members])  # 16, or 22 (members_file)
    print(f"    {'name':<10} {'uuid':<{w}} {'address':<17} {'state':<8} role")
    for m in members:
        print(f"    {m['name']:<10} {m['uuid_text']:<{w}} {m['address'] or '-':<17} "
              f"{m['state']:<8} {'coordinator' if m['coordinator'] else ''}")


def arguments(description: str = __doc__.split("\n\n")[0]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--serve", type=float, default=5.0,
                    help="seconds to keep serving the status page before shutting down")
    return ap


def main(argv=None) -> int:
    return run(arguments().parse_args(argv))


def run(args, then=None, num_cpus: int = 2) -> int:
    """The demo with ``args`` (see ``arguments``); ``then(group)``, when given, runs after the
    membership part, before the status page is served (raygroups.integration.demo adds the
    Spark pipeline there)."""
    from raygroups.actors import Group

    cluster = f"demo-{os.getpid()}"
    t0 = time.monotonic()
    print("raygroups demo: member actors on a local Ray cluster (loopback)")
    ray = init_local(num_cpus=num_cpus, object_store_memory=200 * 1024 * 1024)
    print(f"  Ray started in {time.monotonic() - t0:.1f}s")
    root = tempfile.mkdtemp(prefix="raygroups-demo-")
    discovery = f"file://{root}"
    print(f"  discovery: {discovery}")
    g = None
    try:
        t0 = time.monotonic()
        g = Group.launch(cluster, members=args.members, discovery=discovery,
                         progress=lambda s: print(f"    {s}"), metrics_interval_s=2.0)
        print(f"  launched {args.members} member actors in {time.monotonic() - t0:.2f}s")
        view = g.view()
        print(f"\nview {view.view_id.coord.name}:{view.view_id.id}: "
              f"{[m.name for m in view.members]}")
        table(g.members())
        print(f"\n  members file in the store ({root}/{cluster}/):")
        before = members_files(root, cluster)
        show_files(before)

        events: queue.Queue = queue.Queue()

        def follow() -> None:
            try:
                for e in g.view_events(after=view.view_id, timeout=30):
                    events.put(e)
            except Exception as e:  # the demo goes on without the subscription
                events.put(e)
        threading.Thread(target=follow, daemon=True).start()

        victim = view.members[2].name
        print(f"\nkilling {victim} with ray.kill (Ray restarts the actor) ...")
        t_kill = time.time()
        g.kill(victim, restart=True)
        e = events.get(timeout=60)
        if isinstance(e, Exception):
            raise e
        new = e["view"]
        print(f"  excluded in {1000 * (e['installed_at'] - t_kill):.0f} ms (view installed at "
              f"{e['member']}; the subscriber saw it "
              f"{1000 * (time.time() - t_kill):.0f} ms after the kill)")
        for info in g.probe():
            firsts: dict = {}
            for s in info.get("suspicions", []):
                if s["member"] == victim and s["t"] >= t_kill:
                    firsts.setdefault(s["event"], s)
            said = []
            if "RayDead" in firsts:
                said.append(f"Ray reported it dead +{1000 * (firsts['RayDead']['t'] - t_kill):.0f}"
                            f" ms")
            if "MemberDead" in firsts:
                s = firsts["MemberDead"]
                said.append(f"its stack's verdict ({s['reason']}) "
                            f"+{1000 * (s['t'] - t_kill):.0f} ms")
            if said:
                print(f"    at {info['name']}: {'; '.join(said)}")
        print(f"new view {new.view_id.coord.name}:{new.view_id.id}: "
              f"{[m.name for m in new.members]}")
        e = events.get(timeout=60)
        if isinstance(e, Exception):
            raise e
        new = e["view"]
        back = next(m for m in new.members if m.name == victim)
        print(f"\n{victim} restarted and rejoined as {uid_to_text(back.uid)} "
              f"{1000 * (e['installed_at'] - t_kill):.0f} ms after the kill: view "
              f"{new.view_id.coord.name}:{new.view_id.id} {[m.name for m in new.members]}")
        table(g.members())
        deadline = time.monotonic() + 10
        after = members_files(root, cluster)
        while (after == before or uid_to_text(back.uid) not in "".join(after.values())) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
            after = members_files(root, cluster)
        print("\n  members file rewritten by the coordinator (the dead incarnation's line "
              "is gone, the new one is in):")
        show_files(after)

        if then is not None:
            then(g)
            new = g.view()
        urls = g.status_urls()
        coord = new.coordinator.name
        url = urls.get(coord) or next(iter(urls.values()), None)
        if url:
            with urllib.request.urlopen(url + "membership/size", timeout=5) as r:
                size = r.read().decode()
            print(f"\nstatus page: {url}   (GET {url}membership/size -> {size})")
            print(f"  serving for {args.serve:.0f}s (--serve N for longer) ...")
            time.sleep(args.serve)
    finally:
        if g is not None:
            print("\nshutting down ...")
            g.shutdown()
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
