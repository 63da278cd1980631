"""The ``raygroups`` command (also ``python -m raygroups.actors``).

    raygroups [--address ADDR] [--namespace NS] [--timeout S] COMMAND ...
    raygroups --version

    up CLUSTER         launch (or attach to) the group's member actors: one per node by
                       default; --members N in all; --this-node: only this node's (cluster.yaml);
                       --bootstrap FILE: the members a bootstrap file lists, in its order;
                       --membership gossip: SWIM's eventually consistent list (Serf-like);
                       --arbitrator: one more member that votes and holds no queue (Galera's
                       garbd), on a node without data members when there is one;
                       --durable [--journal-dir DIR]: every data member journals its
                       queues (under DIR, default the node's Ray temp dir), so they
                       survive every member stopping (ray down && ray up)
    down CLUSTER       every member leaves, then its actor is killed
    members CLUSTER    the view's members, a table or --json
    views CLUSTER      the view history; --follow: then every new view as it is installed
    probe CLUSTER      every member's state and attributes (like JGroups' probe), or --json
    rotate-key CLUSTER replace the group's key with a new random one while it runs (no
                       restart, no view change); prints the new key's id, never the key
    upgrade CLUSTER    a rolling upgrade: each member in turn leaves and is replaced on its
                       node by the new build (--wheel FILE) and/or stack options (--option
                       transport__wire_versions=[1,2]), the coordinator last
    list               the groups that have member actors
    bootstrap generate CLUSTER   a bootstrap members file for the live Ray nodes (JGroups
                                 cloud-store discovery)
    simulate           run a config in the simulator at N members: detection and convergence

Ray: ``--address`` (default: $RAY_ADDRESS, else "auto", the cluster started on this machine);
``--timeout`` (default 30 s): give up when the cluster does not answer. For a cluster on
127.0.0.1 the command keeps Ray on loopback. Progress goes to stderr, results to stdout
(``--json`` on every command that prints data). Errors are one line on stderr: exit code 2
for a usage error, 1 for a failure (``RAYGROUPS_DEBUG=1`` adds the traceback). ``up``
never prints the HTTP token: it writes it to a file only its user can read (0600) and
prints the file's path.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, Optional

from raygroups import __version__

from .ray_compat import keep_on_loopback, loopback_address


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _ray_address(args: argparse.Namespace) -> str:
    return args.address or os.environ.get("RAY_ADDRESS") or "auto"


def connect(args: argparse.Namespace, runtime_env: Optional[dict] = None) -> Any:
    """ray.init to the cluster (quietly), giving up after ``--timeout``; returns ray.
    ``runtime_env``: the job's (Ray uploads its local files, e.g. a wheel, at this point)."""
    addr = _ray_address(args)
    if loopback_address(addr):
        keep_on_loopback()
    import ray
    if ray.is_initialized():
        return ray

    def give_up() -> None:  # ray.init cannot be interrupted: leave the process at once
        _err(f"raygroups {args.command}: no Ray cluster at {addr} answered within "
             f"{args.connect_timeout:g}s")
        os._exit(1)
    watchdog = threading.Timer(args.connect_timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        ray.init(address=addr, log_to_driver=False, logging_level="WARNING",
                 configure_logging=False, runtime_env=runtime_env)
    finally:
        watchdog.cancel()
    return ray


def token_file(args: argparse.Namespace) -> str:
    """Where ``up`` keeps the group's HTTP token: --token-file, else
    ~/.raygroups/<namespace>.<cluster>.token."""
    return args.token_file or os.path.join(os.path.expanduser("~"), ".raygroups",
                                           f"{args.namespace}.{args.cluster}.token")


def write_secret(path: str, secret: str) -> None:
    """Write ``secret`` to ``path``, readable by its owner only (0600; the directory 0700 if
    it is created), and never through a moment of wider permissions."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (secret + "\n").encode())
    finally:
        os.close(fd)


def _group(args: argparse.Namespace):
    connect(args)
    from .group import Group
    return Group.attach(args.cluster, namespace=args.namespace)


def _vid(v) -> str:
    return f"{v[0]}:{v[1]}" if v else "-"


def _table(rows: list, cols: list) -> str:
    widths = [max(len(c), *(len(str(r.get(c, "") or "")) for r in rows)) for c in cols]
    line = "  ".join(c.upper().ljust(w) for c, w in zip(cols, widths))
    out = [line]
    for r in rows:
        out.append("  ".join(str(r.get(c, "") if r.get(c) is not None else "-").ljust(w)
                             for c, w in zip(cols, widths)))
    return "\n".join(out)


# -- commands -----------------------------------------------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    if args.journal_dir is not None and not args.durable:
        _err("raygroups up: --journal-dir needs --durable")
        return 2
    if args.durable and args.membership == "gossip":
        _err("raygroups up: --durable is for the work queue: not with --membership gossip")
        return 2
    if args.arbitrator:
        from .placement import check_arbitrator
        try:
            check_arbitrator(None, None, args.membership, args.bootstrap, args.this_node,
                             not args.no_wait)
        except ValueError as e:
            _err(f"raygroups up: {e}")
            return 2
    connect(args)
    import secrets

    from .group import Group
    t0 = time.monotonic()
    _err(f"launching group {args.cluster!r} ...")
    wait = not args.no_wait
    if not wait and not args.follow_nodes:
        _err("raygroups up: --no-wait needs --follow-nodes")
        return 2
    if bool(args.http_cert) != bool(args.http_key):
        _err("raygroups up: --http-cert and --http-key go together")
        return 2
    tls = (args.http_cert, args.http_key) if args.http_cert else None
    token = args.token or (None if wait else secrets.token_urlsafe(18))
    g = Group.launch(args.cluster, args.members_per_node, members=args.members,
                     namespace=args.namespace, detached=True, transport=args.transport,
                     preset=args.preset, discovery=args.discovery, port=args.port,
                     http_port=args.http_port, http_host=args.http_host,
                     http_auth=args.http_auth, http_tls=tls, token=token,
                     ray_signal=not args.no_ray_signal, this_node=args.this_node,
                     timeout=args.timeout, follow_nodes=args.follow_nodes, wait=wait,
                     insecure=args.insecure, bootstrap=args.bootstrap,
                     membership=args.membership, arbitrator=args.arbitrator,
                     durable=args.durable, journal_dir=args.journal_dir,
                     progress=lambda s: _err(f"  {s}"))
    if not wait:
        path = token_file(args)
        write_secret(path, token)
        out = {"cluster": args.cluster, "following": True, "token_file": path}
        print(json.dumps(out) if args.json else
              f"group {args.cluster!r}: members start on every node in the background "
              f"(raygroups members {args.cluster}); HTTP token in {path} (mode 0600)")
        return 0
    view = g.view()
    urls = g.status_urls()
    path = token_file(args)
    write_secret(path, g.http_token())
    out = {"cluster": args.cluster, "view_id": [view.view_id.coord.name, view.view_id.id],
           "members": [m.name for m in view.members], "status_pages": urls,
           "token_file": path, "seconds": round(time.monotonic() - t0, 2),
           "arbitrators": g.arbitrators(), "durable": args.durable}
    if args.durable:
        out["journal_dirs"] = {n: g.info(n).get("journal_dir") for n in out["members"]
                               if n not in out["arbitrators"]}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"group {args.cluster!r} up in {out['seconds']}s: view {_vid(out['view_id'])} "
              f"{out['members']}")
        for n, u in sorted(urls.items()):
            print(f"  {n}: status page {u}")
        print(f"  HTTP token (debug endpoints) in {path} (mode 0600)")
        for n, d in sorted(out.get("journal_dirs", {}).items()):
            print(f"  {n}: journal {d}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    connect(args)
    from .errors import NoSuchGroup
    from .group import Group
    try:
        g = Group.attach(args.cluster, namespace=args.namespace)
    except NoSuchGroup:
        _err(f"no group {args.cluster!r}")
        return 1
    names = g.member_names()
    _err(f"shutting down {len(names)} members of {args.cluster!r} ...")
    g.shutdown(timeout=args.timeout)
    if args.json:
        print(json.dumps({"cluster": args.cluster, "members": names}))
    else:
        print(f"group {args.cluster!r} down ({len(names)} members)")
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    g = _group(args)
    _err(f"rotating the key of {args.cluster!r} on {len(g.member_names())} members ...")
    kid = g.rotate_key(timeout=args.timeout)
    if args.json:
        print(json.dumps({"cluster": args.cluster, "key_id": kid}))
    else:
        print(f"group {args.cluster!r} now seals with a new key (key id {kid})")
    return 0


def _options(pairs) -> dict:
    """``LAYER__FIELD=VALUE`` stack options (JSON values, else strings)."""
    options = {}
    for kv in pairs or ():
        k, _, v = kv.partition("=")
        try:
            options[k] = json.loads(v)
        except ValueError:
            options[k] = v
    return options


def cmd_upgrade(args: argparse.Namespace) -> int:
    options = _options(args.option)
    if args.wheel and (not os.path.isfile(args.wheel) or not args.wheel.endswith(".whl")):
        _err(f"raygroups upgrade: --wheel {args.wheel!r} is not a wheel file")
        return 2
    if not options and not args.wheel:
        _err("raygroups upgrade: give the new build (--wheel) or stack options (--option)")
        return 2
    env = None
    if args.wheel:
        # Ray uploads a local file only for a job: this one's, whose package URI (gcs://)
        # the new member actors are then given
        ray = connect(args, runtime_env={"py_modules": [os.path.abspath(args.wheel)]})
        env = {"py_modules": ray.get_runtime_context().runtime_env["py_modules"]}
    g = _group(args)
    _err(f"upgrading {args.cluster!r}: {len(g.member_names())} members, one at a time ...")
    order = g.upgrade(stack_options=options or None, runtime_env=env, timeout=args.timeout,
                      progress=_err)
    versions = sorted({p.get("stats", {}).get("stack", {}).get("wire_version")
                       for p in g.probe() if p and "stats" in p} - {None})
    builds = sorted({g.info(n).get("version") for n in g.member_names()} - {None})
    if args.json:
        print(json.dumps({"cluster": args.cluster, "upgraded": order,
                          "wire_versions": versions, "builds": builds}))
    else:
        print(f"group {args.cluster!r} upgraded ({len(order)} members; raygroups "
              f"{'/'.join(builds) or '?'}; wire version {'/'.join(map(str, versions)) or '?'})")
    return 0


def cmd_members(args: argparse.Namespace) -> int:
    g = _group(args)
    ms = g.members()
    if args.json:
        print(json.dumps(ms))
    else:
        for m in ms:
            m["uuid"] = m["uuid_text"]
            m["node"] = (m.get("node_id") or "")[:8] or None
            m["role"] = ", ".join(r for r in ("coordinator" if m.get("coordinator") else "",
                                              "arbitrator" if m.get("role") == "arbitrator"
                                              else "") if r)
        print(_table(ms, ["name", "uuid", "address", "node", "state", "recovery", "role",
                          "http_url"]))
    return 0


def _print_view(v: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(v), flush=True)
        return
    t = time.strftime("%H:%M:%S", time.localtime(v.get("installed_at", time.time())))
    extra = ""
    if v.get("joined"):
        extra += f"  joined {v['joined']}"
    if v.get("left"):
        extra += f"  left {v['left']}"
    print(f"{t}  view {_vid(v['view_id'])}  {len(v['members'])} members {v['members']}{extra}",
          flush=True)


def cmd_views(args: argparse.Namespace) -> int:
    g = _group(args)
    from raygroups.stack import Address, ViewId

    from .member import view_json
    history = g.view_history()
    for v in history:
        _print_view(v, args.json)
    if not args.follow:
        return 0
    _err("following view changes (Ctrl-C to stop) ...")
    after, prev = None, None
    if history:  # go on from the last view printed, so no view in between is missed
        h = history[-1]
        after = ViewId(Address(bytes.fromhex(h["coord_uuid"].replace("-", "")),
                               h["view_id"][0]), h["view_id"][1])
        prev = h["members"]
    try:
        for e in g.view_events(after=after, timeout=args.timeout):
            v = view_json(e["view"], e["installed_at"])
            if prev is not None:
                v["joined"] = [m for m in v["members"] if m not in prev]
                v["left"] = [m for m in prev if m not in v["members"]]
            _print_view(v, args.json)
            prev = v["members"]
    except KeyboardInterrupt:
        pass
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    g = _group(args)
    infos = g.probe()
    if args.json:
        print(json.dumps(infos, default=str))
        return 0
    for i in infos:
        if "error" in i and "state" not in i:
            print(f"## {i['name']}: {i['error']}\n")
            continue
        print(f"## {i['name']}  {i['uuid']}  {i['address']}  state={i['state']}  "
              f"view={_vid(i['view_id'])} ({i['view_size']})"
              f"{'  coordinator' if i['coordinator'] else ''}")
        print(f"   node {i['node_id']}  pid {i['pid']}  restarts {i['restarts']}  "
              f"http {i['http_url']}")
        print(f"   config {i['config']}")
        print(f"   figures {i['figures']}")
        if i["dropped"]:
            print(f"   dropped {i['dropped']}")
        if i["suspected"]:
            print(f"   suspected {i['suspected']}")
        if i["ray_signal"]:
            print(f"   ray signal {i['ray_signal']}")
        for layer, counts in sorted(i["stats"].items()):
            if counts:
                print(f"   {layer}: {counts}")
        print()
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    connect(args)
    from .group import Group
    groups = Group.list_groups(args.namespace)
    if args.json:
        print(json.dumps(groups))
    else:
        for c, names in groups.items():
            print(f"{c}: {len(names)} members {names}")
        if not groups:
            print("no groups")
    return 0


def cmd_bootstrap(args: argparse.Namespace) -> int:
    from raygroups.stack.discovery.bootstrap import generate_bootstrap
    if args.nodes:
        nodes: list = [n.strip() for n in args.nodes.split(",") if n.strip()]
    else:
        ray = connect(args)
        nodes = ray.nodes()
    mf = generate_bootstrap(nodes, args.cluster, port=args.port, per_node=args.per_node)
    text = mf.render()
    if args.json:
        text = json.dumps([{"name": e.name, "uuid": e.uid.hex(), "host": e.host,
                            "port": e.port, "coordinator": e.coord} for e in mf]) + "\n"
    if args.out:
        from raygroups.stack.runtime.stores import private_opener
        with open(args.out, "w", opener=private_opener) as f:
            f.write(text)
        _err(f"wrote {len(mf)} members to {args.out} (belongs at {mf.source} in the store)")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from .simulate import simulate
    options = _options(args.option)
    out = simulate(args.members, args.membership, args.preset, args.transport, args.seed,
                   args.crash, args.loss, args.join_interval, args.discovery, args.timeout,
                   options, progress=_err, stall_s=args.stall)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['members']} members, membership={out['membership']}, preset={out['preset']}, "
          f"transport={out['transport']}, loss={out['loss']}, seed={out['seed']}")
    if out["join_convergence_s"] is not None:
        print(f"  join: all {out['members']} agreed {out['join_convergence_s']:.3f}s after the "
              f"last started ({out['all_joined_s']:.2f}s simulated in all)")
    else:
        print(f"  join: NOT converged: {out['join_complete']}/{out['members']} members have the "
              f"whole list, {out['join_missing_entries']} entries missing "
              f"({out['all_joined_s']:.2f}s simulated)")
    if out.get("crashed"):
        def s(x):
            return "never" if x is None else f"{x:.3f}s"
        print(f"  crash of {out['crashed']}: detected first {s(out['detection_first_s'])}, "
              f"median {s(out['detection_median_s'])}, last {s(out['detection_last_s'])} "
              f"(by {out['detected_by']} members); converged "
              f"{s(out['convergence_after_crash_s'])} after the crash")
    print(f"  {out['packets']:,} packets ({out['dropped_packets']:,} dropped), "
          f"{out['wall_s']}s wall, {out['errors']} stack errors")
    return 0


# -- parser -------------------------------------------------------------------------------
def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="raygroups", description="raygroups: group membership on "
                "Ray (member actors, views, probe, simulator)")
    p.add_argument("--version", action="version", version=f"raygroups {__version__}")
    p.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS or auto)")
    p.add_argument("--namespace", default="raygroups", help="Ray namespace of the actors")
    p.add_argument("--timeout", dest="connect_timeout", type=float, default=30.0,
                   help="seconds to wait for the Ray cluster to answer (default 30)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser("up", help="launch (or attach to) a group's member actors")
    up.add_argument("cluster")
    up.add_argument("--members-per-node", type=int, default=1)
    up.add_argument("--members", type=int, default=None,
                    help="members in all, dealt over the nodes (overrides --members-per-node)")
    up.add_argument("--this-node", action="store_true",
                    help="only this node's members (each node's start command)")
    up.add_argument("--transport", choices=["udp", "tcp"], default="udp")
    up.add_argument("--preset", choices=["local", "lan", "wan"], default=None)
    up.add_argument("--discovery", default=None,
                    help="discovery store URL (file:///dir, s3://..., ray-kv://); "
                         "default: static host list")
    up.add_argument("--membership", choices=["views", "gossip"], default="views",
                    help="agreed views (default) or gossip: SWIM's eventually consistent "
                         "list, Serf-like, for large groups")
    up.add_argument("--bootstrap", default=None, metavar="FILE",
                    help="a bootstrap file (path or URL): its members, each on a node at "
                         "its line's address, in file order (JGroups cloud-store discovery)")
    up.add_argument("--port", type=int, default=None, help="member k of a node: port+k "
                    "(default 7800; free ports on loopback)")
    up.add_argument("--http-port", type=int, default=0, help="HTTP API port (0: any)")
    up.add_argument("--http-host", default=None, help="where the HTTP API listens: "
                    "'node' (the node's address), or an address (default 127.0.0.1)")
    up.add_argument("--http-auth", choices=["debug", "all"], default="debug",
                    help="'all': reads and the status page need the token too")
    up.add_argument("--http-cert", default=None, help="PEM certificate: serve HTTPS")
    up.add_argument("--http-key", default=None, help="PEM key of --http-cert")
    up.add_argument("--token", default=None, help="HTTP API token (default: random)")
    up.add_argument("--token-file", default=None, help="where to keep the HTTP token (0600; "
                    "default ~/.raygroups/<namespace>.<cluster>.token)")
    up.add_argument("--follow-nodes", action="store_true",
                    help="keep --members-per-node members on every node, added ones too")
    up.add_argument("--no-wait", action="store_true",
                    help="with --follow-nodes: return at once, members start in the "
                         "background (a cluster's start command never fails for the group)")
    up.add_argument("--insecure", action="store_true",
                    help="no group key: unauthenticated, unencrypted packets (default: a "
                         "random key, AES-GCM, handed to the members through Ray)")
    up.add_argument("--arbitrator", action="store_true",
                    help="one more member that votes in the group's majorities and holds no "
                         "queue (Galera's garbd), placed on a node without data members")
    up.add_argument("--durable", action="store_true",
                    help="every data member journals its queues (a publish returns once a "
                         "majority has it on disk); the group launched again finds them")
    up.add_argument("--journal-dir", default=None, metavar="DIR",
                    help="with --durable: journals under DIR/raygroups/journal/<group>/"
                         "<member> (default: the node's Ray temp dir)")
    up.add_argument("--no-ray-signal", action="store_true",
                    help="do not use Ray as a second failure signal")
    up.add_argument("--timeout", type=float, default=120.0)
    up.add_argument("--json", action="store_true")
    up.set_defaults(fn=cmd_up)

    down = sub.add_parser("down", help="shut a group down")
    down.add_argument("cluster")
    down.add_argument("--timeout", type=float, default=15.0)
    down.add_argument("--json", action="store_true")
    down.set_defaults(fn=cmd_down)

    rk = sub.add_parser("rotate-key", help="replace the group's key while it runs")
    rk.add_argument("cluster")
    rk.add_argument("--timeout", type=float, default=30.0,
                    help="seconds each member has to take each step")
    rk.add_argument("--json", action="store_true")
    rk.set_defaults(fn=cmd_rotate_key)

    upg = sub.add_parser("upgrade", help="a rolling upgrade: members replaced one at a time")
    upg.add_argument("cluster")
    upg.add_argument("--wheel", default=None, help="the new build: a raygroups wheel file")
    upg.add_argument("--option", "-o", action="append", metavar="LAYER__FIELD=VALUE",
                     help="stack option of the new members, e.g. "
                          "transport__wire_versions=[1,2] (JSON values)")
    upg.add_argument("--timeout", type=float, default=90.0,
                     help="seconds each member has to leave and its successor to join")
    upg.add_argument("--json", action="store_true")
    upg.set_defaults(fn=cmd_upgrade)

    mem = sub.add_parser("members", help="the view's members")
    mem.add_argument("cluster")
    mem.add_argument("--json", action="store_true")
    mem.set_defaults(fn=cmd_members)

    vw = sub.add_parser("views", help="the view history; --follow for new views")
    vw.add_argument("cluster")
    vw.add_argument("--follow", "-f", action="store_true")
    vw.add_argument("--timeout", type=float, default=None,
                    help="with --follow: stop after this long without a new view")
    vw.add_argument("--json", action="store_true", help="one JSON object a line")
    vw.set_defaults(fn=cmd_views)

    pr = sub.add_parser("probe", help="every member's state and attributes")
    pr.add_argument("cluster")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(fn=cmd_probe)

    ls = sub.add_parser("list", help="the groups that have member actors")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_list)

    bs = sub.add_parser("bootstrap", help="bootstrap files (JGroups cloud-store discovery)")
    bsub = bs.add_subparsers(dest="bootstrap_command", required=True)
    gen = bsub.add_parser("generate", help="a bootstrap file for the live Ray nodes")
    gen.add_argument("cluster")
    gen.add_argument("--port", type=int, default=7800)
    gen.add_argument("--per-node", type=_positive, default=1)
    gen.add_argument("--nodes", default=None,
                     help="comma-separated IPs instead of asking Ray for its nodes")
    gen.add_argument("--out", default=None, help="write here instead of stdout")
    gen.add_argument("--json", action="store_true", help="the entries as JSON")
    gen.set_defaults(fn=cmd_bootstrap)

    sim = sub.add_parser("simulate", help="run a config in the simulator at N members")
    sim.add_argument("--members", "-n", type=int, default=50)
    sim.add_argument("--membership", choices=["views", "gossip"], default="views")
    sim.add_argument("--preset", choices=["local", "lan", "wan"], default="local")
    sim.add_argument("--transport", choices=["udp", "tcp"], default="udp")
    sim.add_argument("--discovery", choices=["static", "multicast"], default="static")
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--crash", type=int, default=1, help="members crashed at once")
    sim.add_argument("--loss", type=float, default=0.0, help="packet loss probability")
    sim.add_argument("--join-interval", type=float, default=0.01,
                     help="simulated seconds between member starts")
    sim.add_argument("--timeout", type=float, default=600.0,
                     help="simulated seconds allowed per phase")
    sim.add_argument("--stall", type=float, default=30.0,
                     help="end a phase that made no progress for this many simulated seconds")
    sim.add_argument("--option", "-o", action="append", metavar="LAYER__FIELD=VALUE",
                     help="stack option, e.g. swim__probe_interval_s=0.5 (JSON values)")
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(fn=cmd_simulate)
    return p


def main(argv: Optional[list] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (| head): not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as e:
        if os.environ.get("RAYGROUPS_DEBUG"):
            raise
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        _err(f"raygroups {args.command}: {type(e).__name__}: {text}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
