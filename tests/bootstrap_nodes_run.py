"""A bootstrap file on a multi-node Ray: the scenario of tests/integration/test_bootstrap_nodes.py,
in a process of its own (a driver holds one Ray connection, and this one starts its own Ray).

    python -m tests.bootstrap_nodes_run --json out.json

A Ray of ``--nodes`` raylets on loopback (``ray.cluster_utils.Cluster``); a bootstrap file of
one member per node (``generate_bootstrap``: seeded UUIDs 1, 2, 3, the first line the
coordinator) on free ports, given to ``Group.launch(bootstrap=..., discovery="file://...")``.
Then the last line's member is killed and Ray restarts it. The figures go to ``--json``: each
member's node, UUID and port against its line, the view, the file as the store holds it
before and after the restart.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from . import local_cluster


def hex_uuid(member: dict) -> str:
    """A member's UUID as the file's hex (``Group.members()`` writes it with dashes)."""
    return member["uuid"].replace("-", "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    import ray

    from raygroups.actors import Group
    from raygroups.actors.placement import alive_nodes
    from raygroups.stack.discovery.bootstrap import generate_bootstrap
    from raygroups.stack.discovery.members_file import Entry, MembersFile, file_name
    from raygroups.stack.runtime.ports import free_port
    from raygroups.stack.runtime.stores import members_file_url, read_members_file

    c = local_cluster.start(args.nodes, num_cpus=1)
    work = tempfile.mkdtemp(prefix="rg-boot-")
    store = f"file://{work}/store"
    out: dict = {}
    g = None
    try:
        nodes = alive_nodes(ray.nodes())
        gen = generate_bootstrap(["127.0.0.1"] * len(nodes), "boot")
        mf = MembersFile([Entry(e.name, e.uid, e.host, free_port("127.0.0.1"), e.coord)
                          for e in gen.entries])  # loopback: one address, a port each
        path = os.path.join(work, "bootstrap.list")
        with open(path, "w") as f:
            f.write(mf.render())
        cluster = f"boot-{os.getpid()}"
        g = Group.launch(cluster, bootstrap=path, discovery=store, metrics_interval_s=0,
                         http=False, timeout=90)
        out["nodes"] = [n["NodeID"] for n in nodes]
        out["lines"] = [{"name": e.name, "uuid": e.uid.hex(), "port": e.port, "coord": e.coord}
                        for e in mf.entries]
        out["members"] = {m["name"]: {"uuid": hex_uuid(m), "node_id": m["node_id"],
                                      "port": int(m["address"].rpartition(":")[2])}
                          for m in g.members()}
        out["view"] = [m["name"] for m in g.members()]
        where = members_file_url(store, cluster, file_name(mf.entries[0].uid))
        out["file_before"] = {e.name: e.uid.hex() for e in read_members_file(where).entries}
        last = mf.entries[-1].name
        g.kill(last, restart=True)
        deadline = time.monotonic() + 90
        after: dict = {}
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                ms = {m["name"]: m for m in g.members()}
                mf_now = read_members_file(where)
            except Exception:
                continue
            m = ms.get(last)
            if (m and hex_uuid(m) != out["members"][last]["uuid"]
                    and len(ms) == len(mf.entries)
                    and all(x["state"] == "alive" for x in ms.values())):
                after = {"uuid": hex_uuid(m), "node_id": m["node_id"],
                         "restarts": g.info(last)["restarts"],
                         "file": {e.name: e.uid.hex() for e in mf_now.entries}}
                if after["file"].get(last) == after["uuid"]:
                    break
        out["restarted"] = after
        print(json.dumps(out, indent=1))
    finally:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        if g is not None:
            g.shutdown()
        local_cluster.stop(c)
    return 0


if __name__ == "__main__":
    sys.exit(main())
