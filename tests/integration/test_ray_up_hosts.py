"""``ray up`` for real, over SSH, on hosts in network namespaces (tests/raybed.py), with the
repository's cluster.yaml and Ray's ``local`` node provider.

From the operator's host, ``ray up`` brings up a head and two workers; the head's start
command starts the group once (``raygroups up --follow-nodes --no-wait``). Then, from a
driver on the head host: ``raygroups members`` lists one member per host with that host's
address; ``Group.attach`` works; a second ``ray up`` with a third worker in ``worker_ips``
(Ray's local provider reads them when Ray starts, so Ray restarts on every node, as
cluster.yaml says) ends with one member on each of the four hosts; killing every process of
one host takes its member out of the view; after ``ray down`` no process but sshd is left
on any host (a worker's raylet exits once the head's GCS has been gone for its reconnect
timeout, and cluster.yaml's watchdog then runs ``ray stop`` there), and closing the bed
leaves no namespace. (A node that joins a running cluster gets its member without a
restart: tests/integration/test_follow_nodes.py, on a multi-node Ray on loopback.)
Skips (with the reason) only where it cannot be root or build namespaces, or sshd/rsync are
missing.
"""
import json
import os
import time

import pytest

from ..raybed import RayHosts, available
from ..netns import _netns_list

_ok, _why = available()
pytestmark = [pytest.mark.root] + ([] if _ok else [pytest.mark.skip(reason=_why)])

OPERATOR, HEAD, W1, W2, W3 = range(5)
WAIT_S = 180.0


def members(bed: RayHosts) -> list:
    """The group's members as ``raygroups --address auto members --json`` prints them on the
    head host (the way the README says to ask, from any machine of the cluster)."""
    r = bed.run(HEAD, [f"{bed.venv}/bin/raygroups", "--address", "auto", "--timeout", "20",
                       "members", bed.group, "--json"], timeout=90)
    if r.returncode != 0:
        return []
    return json.loads(r.stdout)


def wait_members(bed: RayHosts, want: set, what: str, wait_s: float = WAIT_S) -> list:
    """Until the members' hosts are exactly ``want`` (addresses), each once."""
    deadline, got = time.monotonic() + wait_s, []
    while time.monotonic() < deadline:
        got = members(bed)
        hosts = [m["address"].rsplit(":", 1)[0] for m in got]
        if sorted(hosts) == sorted(want) and all(m["state"] == "alive" for m in got):
            return got
        time.sleep(1.0)
    raise AssertionError(f"{what}: members {got}, wanted one on each of {sorted(want)}")


def fail(r, what: str) -> str:
    return f"{what} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def test_ray_up_on_hosts_then_kill_a_host_and_down():
    bed = RayHosts(5)
    tag = bed.lab.tag
    with bed:
        r = bed.ray_up(HEAD, [W1, W2])
        assert r.returncode == 0, fail(r, "ray up")
        three = {bed.addr(k) for k in (HEAD, W1, W2)}
        got = wait_members(bed, three, "after ray up")
        assert all(m["address"].endswith(":7800") for m in got), got  # port 7800 on each
        token_file = os.path.expanduser(f"~/.raygroups/raygroups.{bed.group}.token")
        token = open(token_file).read().strip()
        assert token and token not in r.stdout + r.stderr, "ray up's output shows no token"
        assert os.stat(token_file).st_mode & 0o777 == 0o600

        driver = ("import ray; from raygroups.actors import Group; "
                  "ray.init(address='auto', logging_level='ERROR'); "
                  f"g = Group.attach('{bed.group}'); v = g.view(); "
                  "print('members', len(v.members), sorted(g.member_names()))")
        r = bed.run(HEAD, [f"{bed.venv}/bin/python", "-c", driver], timeout=120)
        assert r.returncode == 0, fail(r, "Group.attach on the head")
        # (Ray's driver may print the autoscaler's events around it)
        assert [x.split()[1] for x in r.stdout.splitlines() if x.startswith("members ")] == \
            ["3"], r.stdout

        r = bed.ray_up(HEAD, [W1, W2, W3])  # a fourth host in worker_ips, the same ray up
        assert r.returncode == 0, fail(r, "the second ray up")
        four = three | {bed.addr(W3)}
        wait_members(bed, four, "after the second ray up")

        assert bed.kill_host(W2) > 0  # the host loses power: sshd, raylet, member, all
        wait_members(bed, four - {bed.addr(W2)}, "after killing a host")

        # ray down stops Ray on the head; a worker's raylet exits once the head's GCS has
        # been gone for its reconnect timeout (60 s by default, 10 s in the bed), its
        # workers (the member actor) with it,
        # and cluster.yaml's watchdog runs `ray stop` for what is left (Ray's local provider
        # runs no command on the workers at `ray down`)
        r = bed.ray_down()

        def left() -> list:
            return [c for k in (HEAD, W1, W3) for c in bed.commands(k) if "sshd" not in c]
        deadline = time.monotonic() + 150
        while left() and time.monotonic() < deadline:
            time.sleep(1.0)
        assert not left(), f"after ray down: {[c[:120] for c in left()]}\n{fail(r, 'down')}"
        assert bed.commands(W2) == []
    assert not [ns for ns in _netns_list() if tag in ns], "namespaces left behind"
