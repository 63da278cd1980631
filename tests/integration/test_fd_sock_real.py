"""FD_SOCK on real sockets, real processes (``python -m tests.member_proc`` on 127.0.0.1,
LAN preset): kill -9 of a member closes its watch connection at once, its watcher suspects
it and SWIM's verification finds it gone, so the survivors exclude it by that path (the
watcher's ``verified_dead``), in views and gossip modes, over UDP and TCP; a member whose
watchers' connections are reset (RST, as a middlebox would) while it stays up is suspected
and verified reachable, never excluded; a member that leaves says goodbye on its watch
connection and is not suspected. The assertions read the
outcome and the counters, never a duration (``bench/failure.py`` measures)."""
import signal
import time
import uuid

import pytest

from ..member_proc import LoopbackMembers

N = 4
DEADLINE = 30.0


def formed(g: LoopbackMembers) -> dict:
    """The group formed, every watch connection up; every member's stats."""
    g.start(stagger=0.2)
    g.wait_all(lambda v: len(v["members"]) == N, timeout=DEADLINE, what=f"{N}-member view",
               same=False)
    time.sleep(1.0)  # every watch connection up
    up = g.stats(list(range(N)))
    assert sum(s["fd_sock"].get("connected", 0) >= 1 for s in up.values()) == N, up
    return up


@pytest.mark.parametrize("transport,membership", [("udp", "views"), ("tcp", "views"),
                                                  ("udp", "gossip")])
def test_kill9_is_excluded_through_the_lost_watch_connection(transport, membership):
    extra = ["--preset", "lan", "--transport", transport, "--membership", membership]
    with LoopbackMembers(N, f"fdsock-{uuid.uuid4().hex[:6]}", extra=extra) as g:
        formed(g)
        victim = 1
        name = g.names[victim]
        survivors = [i for i in range(N) if i != victim]
        t_kill = g.signal(victim, signal.SIGKILL)
        g.wait_all(lambda v: name not in v["members"] and len(v["members"]) == N - 1,
                   survivors, timeout=DEADLINE, what=f"lists without {name}",
                   same=membership == "views")
        after = g.stats(survivors)
        fd = {g.names[i]: s["fd_sock"] for i, s in after.items()}
        swim = {g.names[i]: s["swim"] for i, s in after.items()}
        # exactly one member watched it, saw its connection close and verified the death
        watchers = [n for n, s in fd.items() if s.get("suspected", 0) >= 1]
        assert len(watchers) == 1, fd
        w = watchers[0]
        assert fd[w].get("lost_eof", 0) + fd[w].get("lost_reset", 0) >= 1, fd[w]
        assert swim[w].get("connection_lost", 0) >= 1 and \
            swim[w].get("verified_dead", 0) == 1, swim[w]
        # nobody else was excluded along the way
        alive = {g.names[k] for k in survivors}
        for i in survivors:
            for v in g.views(i):
                if v["t"] >= t_kill:
                    assert alive <= set(v["members"]), (g.names[i], v)


def test_a_leaver_says_goodbye_and_is_not_suspected():
    with LoopbackMembers(N, f"fdleave-{uuid.uuid4().hex[:6]}", extra=["--preset", "lan"]) as g:
        formed(g)
        leaver = 2
        name = g.names[leaver]
        rest = [i for i in range(N) if i != leaver]
        g.command(leaver, "leave")
        g.wait_all(lambda v: name not in v["members"], rest, timeout=DEADLINE,
                   what=f"view without {name}")
        time.sleep(0.5)  # its sockets closed meanwhile
        after = g.stats(rest)
        assert all(s["fd_sock"].get("suspected", 0) == 0 for s in after.values()), after
        assert all(s["swim"].get("verified_dead", 0) == 0 for s in after.values()), after


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_a_reset_watch_connection_of_a_healthy_member_excludes_nobody(transport):
    """The connections watching a member are reset (RST) while it stays up, twice: its
    watcher suspects it at once, SWIM's verification reaches it, and every view stays."""
    extra = ["--preset", "lan", "--transport", transport]
    with LoopbackMembers(N, f"fdreset-{uuid.uuid4().hex[:6]}", extra=extra) as g:
        before = formed(g)
        target = 2
        first = {i: g.last_view(i)["view_id"] for i in range(N)}
        for _ in range(2):
            n_ok = len(g.events(target, "ok"))
            g.command(target, "reset-watchers")
            g.wait(lambda: len(g.events(target, "ok")) > n_ok, DEADLINE, "reset",
                   live=list(range(N)))
            assert g.events(target, "ok")[-1]["reset"] >= 1
            time.sleep(2.0)  # the verification, the refutation, the reconnection
        after = g.stats(list(range(N)))
        lost = sum(s["swim"].get("connection_lost", 0) for s in after.values())
        assert lost >= 2, {i: s["swim"] for i, s in after.items()}
        assert all(s["swim"].get("verified_dead", 0) == 0 for s in after.values())
        assert {i: g.last_view(i)["view_id"] for i in range(N)} == first
        # one watcher lost its connection twice, and connected again each time
        delta = {i: {k: s["fd_sock"].get(k, 0) - before[i]["fd_sock"].get(k, 0)
                     for k in ("suspected", "connected")} for i, s in after.items()}
        assert sorted(d["suspected"] for d in delta.values()) == [0] * (N - 1) + [2], delta
        assert all(d["connected"] == d["suspected"] for d in delta.values()), delta
