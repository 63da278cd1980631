"""The Ray-free parts of actors/ (issue 6): metrics figures, JSON logs, placement and
naming, the Ray signal's watch ring, the status page's contract, and the simulate command at a
small size. No Ray cluster, no sockets."""
import io
import json
import logging

import pytest

from raygroups.actors import cli
from raygroups.actors.logs import setup
from raygroups.actors.metrics import dropped, figures
from raygroups.actors.placement import (actor_name, alive_nodes, clusters_of, is_loopback,
                                        member_of, node_labels, plan, stack_config)
from raygroups.actors.simulate import simulate
from raygroups.actors.status_page import STATUS_PAGE
from raygroups.stack import Address

STATS = {
    "transport": {"sent_msgs": 10, "recv_msgs": 12, "sent_bytes": 1000, "recv_bytes": 1200,
                  "dropped_foreign_cluster": 2, "dropped_own": 5},
    "nakack": {"retransmitted": 3}, "unicast": {"retransmitted": 1, "dropped_window_full": 4},
    "swim": {"suspicions": 2, "malformed_header": 1}, "gms": {"views_installed": 4},
    "runtime": {}, "member": {"views_installed": 4},
}


def test_figures_and_dropped_from_channel_stats():
    assert figures(STATS) == {"views_installed": 4, "suspicions": 2, "messages_sent": 10,
                              "messages_received": 12, "messages_retransmitted": 4,
                              "bytes_sent": 1000, "bytes_received": 1200}
    assert dropped(STATS) == {"foreign_cluster": 2, "own": 5, "window_full": 4,
                              "swim_malformed_header": 1}
    gossip = {"member": {"views_installed": 7}, "transport": {}}
    assert figures(gossip)["views_installed"] == 7


def test_json_logs_carry_cluster_member_and_view_id():
    buf = io.StringIO()
    view = {"id": 3}
    root = logging.getLogger("raygroups")
    saved = (list(root.handlers), root.propagate, root.level)
    try:
        log = setup("orders", "vm-0", lambda: view["id"], stream=buf)
        log.info("hello %s", "world")
        logging.getLogger("raygroups.stack").warning("from the stack")
    finally:
        root.handlers[:], root.propagate = saved[0], saved[1]
        root.setLevel(saved[2])
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert lines[0]["msg"] == "hello world" and lines[0]["cluster"] == "orders"
    assert lines[0]["member"] == "vm-0" and lines[0]["view_id"] == 3
    assert lines[1]["logger"] == "raygroups.stack" and lines[1]["level"] == "WARNING"


def nodes(*ips, hosts=None):
    out = []
    for i, ip in enumerate(ips):
        out.append({"NodeID": f"{i:02d}" + "ab" * 27, "NodeManagerAddress": ip, "Alive": True,
                    "NodeManagerHostname": (hosts or ips)[i],
                    "Resources": {"node:__internal_head__": 1.0} if i == len(ips) - 1 else {}})
    return out


def test_names_and_placement():
    assert actor_name("orders", "vm-0") == "raygroups:orders:vm-0"
    assert member_of("raygroups:orders:vm-0", "orders") == "vm-0"
    assert member_of("raygroups:other:vm-0", "orders") is None
    assert clusters_of(["raygroups:a:x-0", "raygroups:a:y-0", "other"]) == {"a": ["x-0", "y-0"]}
    ns = alive_nodes(nodes("10.0.0.2", "10.0.0.1", hosts=["w", "h"]) +
                     [{"NodeID": "dead", "Alive": False}])
    assert [n["NodeManagerHostname"] for n in ns] == ["h", "w"]  # the head first
    slots = plan(ns, members_per_node=2)
    assert [(s.name, s.node_ip, s.k) for s in slots] == [
        ("h-0", "10.0.0.1", 0), ("h-1", "10.0.0.1", 1), ("w-0", "10.0.0.2", 0),
        ("w-1", "10.0.0.2", 1)]
    assert [s.name for s in plan(ns, members=3)] == ["h-0", "h-1", "w-0"]
    assert [s.name for s in plan(ns, only_node=ns[1]["NodeID"])] == ["w-0"]
    same = nodes("10.0.0.1", "10.0.0.2", hosts=["box", "box"])
    assert sorted(node_labels(same).values()) == ["box-10.0.0.1", "box-10.0.0.2"]
    one_machine = nodes("127.0.0.1", "127.0.0.1", hosts=["box", "box"])  # several raylets
    labels = node_labels(one_machine)
    assert sorted(labels.values()) == sorted(f"box-{i[:6]}" for i in labels)
    assert is_loopback("127.0.0.1") and not is_loopback("10.0.0.1")
    with pytest.raises(ValueError):
        plan(ns, members=0)


def test_stack_config_per_member():
    hosts = [("127.0.0.1", 7000), ("127.0.0.1", 7001)]
    cfg = stack_config("127.0.0.1", 7001, hosts)
    assert cfg.transport.bind_addr == "127.0.0.1" and cfg.transport.port == 7001
    assert cfg.discovery.mode == "static" and cfg.discovery.initial_hosts == tuple(hosts)
    assert cfg.transport.ip_multicast is False
    assert cfg.gms.join_timeout_s == 0.5  # the local preset on loopback
    lan = stack_config("10.0.0.1", 7800, [("10.0.0.1", 7800)], transport="tcp")
    assert lan.transport.kind == "tcp" and lan.gms.join_timeout_s == 2.0
    opt = stack_config("127.0.0.1", 1, hosts, options={"swim__probe_interval_s": 0.5})
    assert opt.swim.probe_interval_s == 0.5


def test_the_ray_signal_watches_a_ring():
    from raygroups.actors.watcher import successors
    a, b, c, d = (Address(bytes([i]) * 16, n) for i, n in enumerate("abcd", 1))
    assert successors((a, b, c, d), a, 2) == [b, c]
    assert successors((a, b, c, d), d, 2) == [a, b]
    assert successors((a, b), b, 2) == [a]
    assert successors((a,), a, 2) == [] and successors((a, b), c, 2) == []


def test_status_page_contract():
    for eid in ("members", "views", "suspected", "suspicions", "traffic", "dropped",
                "updated", "error", "me"):
        assert f'id="{eid}"' in STATUS_PAGE
    assert "membership/status" in STATUS_PAGE and "setTimeout(refresh, 1000)" in STATUS_PAGE


def test_simulate_small_groups():
    views = simulate(8, "views", crash=2, seed=3)
    assert views["members"] == 8 and views["crashed"] == 2 and views["errors"] == 0
    assert 0 < views["detection_first_s"] <= views["detection_median_s"] <= \
        views["detection_last_s"] <= views["convergence_after_crash_s"]
    again = simulate(8, "views", crash=2, seed=3)  # deterministic: the same figures
    assert {k: v for k, v in again.items() if k != "wall_s"} == \
        {k: v for k, v in views.items() if k != "wall_s"}
    gossip = simulate(10, "gossip", crash=1, seed=1, loss=0.02)
    assert gossip["membership"] == "gossip" and gossip["detection_last_s"] > 0


def test_cli_parser():
    p = cli.parser()
    a = p.parse_args(["up", "orders", "--members", "5"])
    assert a.command == "up" and a.members == 5 and a.members_per_node == 1
    a = p.parse_args(["simulate", "--members", "1000", "--membership", "gossip"])
    assert a.members == 1000 and a.membership == "gossip"
    a = p.parse_args(["views", "orders", "--follow"])
    assert a.follow
    a = p.parse_args(["--timeout", "5", "members", "orders"])
    assert a.connect_timeout == 5.0 and a.command == "members"


def test_secrets_are_written_owner_only(tmp_path):
    path = tmp_path / "new" / "group.token"
    cli.write_secret(str(path), "s3cret")
    assert path.read_text() == "s3cret\n"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    path.chmod(0o644)  # an existing file with wider permissions is narrowed
    cli.write_secret(str(path), "other")
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text() == "other\n"


def test_the_ray_signal_asks_again_a_member_that_has_not_joined_yet(monkeypatch):
    """A watched actor that answers no UUID yet (its stack installed the view, the actor has
    not marked itself joined: a launch under load) is asked again next round, not reported
    as another incarnation; once it answers, only another UUID is a verdict. (The Ray
    calls are replaced: this checks the watcher's rule alone.)"""
    import asyncio

    from raygroups.actors import watcher
    a, b = Address(bytes([1]) * 16, "a"), Address(bytes([2]) * 16, "b")
    answers = [None, None, b.uuid_hex, "another"]

    class Handle:
        class _actor_id:
            @staticmethod
            def hex():
                return "ab" * 16

        class uid:
            @staticmethod
            async def remote():
                return answers.pop(0)

    monkeypatch.setattr(watcher.ray, "get_actor", lambda name, namespace: Handle())
    monkeypatch.setattr(watcher, "actor_state", lambda aid: {"State": "ALIVE", "NumRestarts": 0})
    reported = []

    async def report(addr):
        reported.append(addr)

    sig = watcher.RaySignal("c", "ns", lambda: (a, b), lambda: a, report)

    async def rounds():
        loop = asyncio.get_running_loop()
        for _ in range(3):  # no UUID twice, then its own
            await sig._round(loop)
        assert reported == [] and sig.watched() == ["b"]
        del sig.watches[b]  # a new watch of b: its actor now runs another incarnation
        await sig._round(loop)
    asyncio.run(rounds())
    assert reported == [b] and answers == []
