"""The members' HTTP API (seed 004's endpoints) and the status page (issue 6).

A 3-member group: the read endpoints, the token on the guarded ones (401 without it or with
a wrong one), unsubscribe/subscribe, debug pause and shutdown; the status page in headless
Chromium shows the members and follows a member leaving and coming back.
"""
import asyncio
import json
import os
import urllib.error
import urllib.request

import pytest

from .. import cdp

pytest_plugins = ["tests.ray_fixtures"]

import aiohttp  # noqa: F401

from raygroups.actors import Group  # noqa: E402
from raygroups.stack.discovery.members_file import uid_to_text  # noqa: E402

WAIT_S = 60.0


def call(url: str, method: str = "GET", token=None) -> tuple:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, body.decode(errors="replace")


@pytest.fixture(scope="module")
def group(ray_session):
    g = Group.launch(f"t-http-{os.getpid()}", members=3, timeout=WAIT_S)
    yield g
    g.shutdown()


@pytest.fixture(scope="module")
def urls(group):
    u = group.status_urls()
    assert len(u) == 3
    return u


def wait_size(group, n: int):
    for v in group.views(timeout=WAIT_S):
        if len(v.members) == n:
            return v
    raise AssertionError(f"the view never had {n} members")


def test_read_endpoints(group, urls):
    v = group.view()
    recovery: dict = {}
    for name, url in urls.items():
        status, body = call(url + "membership/size")
        assert status == 200 and body["size"] == 3 and body["member"] == name
        assert body["view_id"] == [v.view_id.coord.name, v.view_id.id]
        status, body = call(url + "membership/nodes")
        assert status == 200
        assert [n["uuid"] for n in body["nodes"]] == [m.uuid_hex for m in v.members]
        # and as the members file writes it (16 base64url characters for random UUIDs)
        assert [n["uuid_text"] for n in body["nodes"]] == [uid_to_text(m.uid) for m in v.members]
        assert all({"name", "address", "state", "coordinator"} <= set(n) for n in body["nodes"])
        # the recovery status of the last state exchange, as this member answers it
        recovery[name] = {n["name"]: n["recovery"] for n in body["nodes"]}
        status, body = call(url + "membership/views")
        assert status == 200 and body["views"][-1]["view_id"] == body["views"][-1]["view_id"]
        assert body["views"][-1]["members"] == [m.name for m in v.members]
    status, page = 200, urllib.request.urlopen(next(iter(urls.values())), timeout=30).read()
    assert b"<title>raygroups status</title>" in page
    # every member gives the same answer, and everyone is ONLINE (no transfer running)
    first = next(iter(recovery.values()))
    assert all(r == first for r in recovery.values()) and set(first.values()) == {"ONLINE"}
    assert sorted(first) == sorted(m.name for m in v.members)


def test_guarded_endpoints_need_the_token(group, urls):
    url = next(iter(urls.values()))
    token = group.http_token()
    for method, path in [("GET", "membership/debug/state-info"),
                         ("POST", "membership/debug/pause?seconds=0.1"),
                         ("POST", "membership/debug/shutdown"),
                         ("POST", "membership/unsubscribe"),
                         ("POST", "membership/subscribe")]:
        assert call(url + path, method)[0] == 401, path
        assert call(url + path, method, token="wrong" + token)[0] == 401, path
    status, info = call(url + "membership/debug/state-info", token=token)
    assert status == 200 and info["state"] == "member" and "transport" in info["stats"]
    status, body = call(url + "membership/debug/pause?seconds=0.2", "POST", token=token)
    assert status == 200 and body["paused_until"] > 0
    assert call(url + "membership/debug/pause?seconds=nope", "POST", token=token)[0] == 400


def test_debug_shutdown_then_subscribe(group, urls):
    token = group.http_token()
    v = group.view()
    victim = v.members[-1]
    url = urls[victim.name]
    status, body = call(url + "membership/debug/shutdown", "POST", token=token)
    assert status == 200 and body["state"] == "shutdown"
    for w in group.views(after=v.view_id, timeout=WAIT_S):  # SWIM excludes it: a crash
        if victim not in w:
            break
    assert call(url + "membership/size")[1]["size"] == 0
    status, body = call(url + "membership/subscribe", "POST", token=token)
    assert status == 200 and body["state"] == "member" and body["uuid"] != victim.uuid_hex
    assert len(wait_size(group, 3).members) == 3


@pytest.mark.skipif(not cdp.available(),
                    reason=f"no Chromium at {cdp.CHROMIUM} (Debian: apt-get install chromium)")
def test_status_page_in_chromium_follows_a_leave(group, urls):
    token = group.http_token()
    v = wait_size(group, 3)
    watch = v.members[0].name
    leaver = v.members[-1].name
    rows = "document.querySelectorAll('#members tbody tr').length"
    names = "[...document.querySelectorAll('#members tbody tr')].map(r => r.dataset.member)"

    async def main():
        async with cdp.Chromium() as page:
            await page.goto(urls[watch])
            await page.wait_for(f"{rows} === 3")
            shown = await page.eval(names)
            assert sorted(shown) == sorted(m.name for m in v.members)
            # each member's uuid as its members-file line spells it (not a shared prefix)
            uuids = await page.eval("[...document.querySelectorAll('#members tbody tr')]"
                                    ".map(r => r.children[2].textContent)")
            assert sorted(uuids) == sorted(uid_to_text(m.uid) for m in v.members)
            assert await page.eval("document.querySelectorAll('#views tbody tr').length") >= 1
            assert await page.eval("document.getElementById('traffic').textContent"
                                   ".includes('messages sent')")
            states = await page.eval("[...document.querySelectorAll('#members tbody tr')]"
                                     ".map(r => r.dataset.state)")
            assert set(states) == {"alive"}
            recovery = await page.eval("[...document.querySelectorAll('#members tbody tr')]"
                                       ".map(r => r.dataset.recovery)")
            assert set(recovery) == {"ONLINE"}
            # not durable (tests/integration/test_durable_ray.py: a durable one says so)
            assert await page.eval("document.getElementById('me').dataset.durable") == "false"
            assert "journaled" not in await page.eval("document.getElementById('me').textContent")
            status, body = await asyncio.to_thread(
                call, urls[leaver] + "membership/unsubscribe", "POST", token)
            # the gossip design's unsubscribe: confirmed by the group, then the member's
            # stack shut down (its actor stays, serving this API)
            assert status == 200 and body == {"state": "left", "confirmed": True}
            assert (await asyncio.to_thread(call, urls[leaver] + "membership/size"))[1][
                "size"] == 0
            await page.wait_for(f"{rows} === 2")
            assert leaver not in await page.eval(names)
            assert await page.wait_for(
                "[...document.querySelectorAll('#views tbody tr td:last-child')]"
                f".some(td => td.textContent.includes({json.dumps(leaver)}))")
            status, body = await asyncio.to_thread(
                call, urls[leaver] + "membership/subscribe", "POST", token)
            assert status == 200
            await page.wait_for(f"{rows} === 3")
            assert leaver in await page.eval(names)
    asyncio.run(main())
