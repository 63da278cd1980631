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
leaves no namespace. The group is durable (``--durable`` on cluster.yaml's ``raygroups up``
line, as its comment says): a driver publishes 20 messages and accepts 5 after the first
``ray up``; after ``ray down`` and ``ray up`` again (the killed host booted again), a
driver finds exactly the 15 it did not accept, through two restarts of Ray on every node
and a host's power cut (the Qpid new-cluster design's persistent cluster). (A node that
joins a running cluster gets its member without a restart:
tests/integration/test_follow_nodes.py, on a multi-node Ray on loopback.)
Skips (with the reason) only where it cannot be root or build namespaces, or sshd/rsync are
missing.
"""
import json
import os
import time

import pytest

from ..raybed import REPO, RayHosts, available
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


def on_head(bed: RayHosts, code: str, what: str) -> list:
    """``code`` run by a driver on the head host after attaching to the group as ``g``;
    the words of its output line that begins with ``out``."""
    src = ("import ray; from raygroups.actors import Group; "
           "ray.init(address='auto', logging_level='ERROR'); "
           f"g = Group.attach('{bed.group}')\n{code}")
    r = bed.run(HEAD, [f"{bed.venv}/bin/python", "-c", src], timeout=180)
    assert r.returncode == 0, fail(r, what)
    lines = [x.split()[1:] for x in r.stdout.splitlines() if x.startswith("out")]
    assert len(lines) == 1, r.stdout  # (Ray's driver may print the autoscaler's events)
    return lines[0]


PUBLISH = """q = g.queue("jobs", durable=True)
q.publish_many([b"job-%d" % k for k in range(20)])
got = []
while len(got) < 5:
    got += q.acquire_many(5 - len(got), timeout_s=60)
for d in got:
    d.accept()
print("out", *sorted(d.body.decode() for d in got))
"""
DRAIN = f"""import sys; sys.path.insert(0, {REPO!r}); from tests.drain import drain
print("out", *sorted(d.body.decode() for d in drain(g.queue("jobs"), timeout_s=10)))
"""


def test_ray_up_on_hosts_then_kill_a_host_and_down():
    bed = RayHosts(5, up_args="--durable")
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

        out = on_head(bed, "v = g.view(); print('out', len(v.members), *g.member_names())",
                      "Group.attach on the head")
        assert out[0] == "3" and len(out) == 4, out
        accepted = on_head(bed, PUBLISH, "publishing to the durable queue")
        assert len(accepted) == 5, accepted

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

        bed.restart_sshd(W2)  # the host that lost power boots again
        r = bed.ray_up(HEAD, [W1, W2, W3])
        assert r.returncode == 0, fail(r, "ray up after ray down")
        wait_members(bed, four, "after ray down and ray up")
        left = on_head(bed, DRAIN, "draining the durable queue")
        assert sorted(left) == sorted({f"job-{k}" for k in range(20)} - set(accepted)), left
    assert not [ns for ns in _netns_list() if tag in ns], "namespaces left behind"
