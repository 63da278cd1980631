"""A durable group through Ray (the Qpid new-cluster design's persistent cluster):
``Group.launch(durable=True)`` journals every member's queues under the node's Ray temp
dir; the group shut down (every member actor gone) and launched again under its name finds
every acknowledged, unaccepted message (as ``ray down && ray up`` on the same nodes). A
durable queue asked of a group launched without ``durable`` raises QueueNotDurable."""
import asyncio
import os
import shutil

import pytest

pytest_plugins = ["tests.ray_fixtures"]


from raygroups.actors import Group, ray_compat  # noqa: E402
from raygroups.stack.workqueue import QueueNotDurable  # noqa: E402

from .. import cdp  # noqa: E402
from ..drain import drain  # noqa: E402

WAIT_S = 90.0


def test_a_durable_group_launched_again_keeps_what_was_not_accepted(ray_session):
    name = f"t-durable-{os.getpid()}"
    g = Group.launch(name, members=3, durable=True, timeout=WAIT_S, metrics_interval_s=0,
                     http=False)
    root = os.path.join(ray_compat.node_temp_dir(), "raygroups", "journal", name)
    try:
        names = sorted(g.member_names())
        infos = {n: g.info(n) for n in names}
        assert all(i["durable"] for i in infos.values()), infos
        assert {i["journal_dir"] for i in infos.values()} == \
            {os.path.join(root, n) for n in names}
        q = g.queue("orders", durable=True, alternate="orders.dead")
        bodies = [b"order-%d" % k for k in range(30)]
        q.publish_many(bodies)
        got = q.acquire_many(10, timeout_s=10)
        for d in got[:7]:
            d.accept()
        accepted = {d.body for d in got[:7]}
        held = got[7:]  # acquired, never settled: back on the queue after the restart
        assert q.info()["depth"] == 30 - 7
        g.shutdown()
        assert name not in Group.list_groups()

        g = Group.launch(name, members=3, durable=True, timeout=WAIT_S, metrics_interval_s=0,
                         http=False)
        assert sorted(g.member_names()) == names  # the same members, on their journals
        left = drain(g.queue("orders"))
        assert sorted(d.body for d in left) == sorted(set(bodies) - accepted)
        assert {d.body for d in held} <= {d.body for d in left if d.redelivered}
        with pytest.raises(ValueError, match="durable=True"):  # not attached as memory-only
            Group.launch(name, members=3, timeout=WAIT_S)
    finally:
        g.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def test_a_durable_queue_of_a_group_that_journals_nothing_is_refused(ray_session):
    g = Group.launch(f"t-plain-{os.getpid()}", members=1, timeout=WAIT_S,
                     metrics_interval_s=0, http=False)
    try:
        assert g.info(g.member_names()[0])["durable"] is False
        with pytest.raises(QueueNotDurable, match="durable=True"):
            g.queue("orders", durable=True)
        g.queue("orders").publish(b"memory only")  # durable=False: allowed, in memory
    finally:
        g.shutdown()


@pytest.mark.skipif(not cdp.available(),
                    reason=f"no Chromium at {cdp.CHROMIUM} (Debian: apt-get install chromium)")
def test_the_status_page_says_a_durable_member_journals(ray_session):
    """In a real browser: the status page of a durable group's member says "queues
    journaled" (tests/integration/test_http_api.py: a group without it does not)."""
    name = f"t-durpage-{os.getpid()}"
    g = Group.launch(name, members=1, durable=True, timeout=WAIT_S, metrics_interval_s=0)
    try:
        url = next(iter(g.status_urls().values()))

        async def main():
            async with cdp.Chromium() as page:
                await page.goto(url)
                await page.wait_for("document.getElementById('me').dataset.durable === 'true'")
                return await page.eval("document.getElementById('me').textContent")
        assert "queues journaled" in asyncio.run(main())
    finally:
        g.shutdown()
        shutil.rmtree(os.path.join(ray_compat.node_temp_dir(), "raygroups", "journal", name),
                      ignore_errors=True)
