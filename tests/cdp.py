"""Headless Chromium driven over the Chrome DevTools protocol (for status-page tests).

No webdriver: Chromium is started with ``--remote-debugging-port=0``, its DevTools port is
read from ``DevToolsActivePort`` in a fresh profile directory, and the page is driven over a
websocket (aiohttp, which Ray already brings). ``CHROMIUM`` is where Debian's ``chromium``
package puts the browser; tests skip when it is missing (.ci/run installs it).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Optional

CHROMIUM = os.environ.get("RAYGROUPS_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0"]


def available() -> bool:
    return os.path.exists(CHROMIUM)


class Chromium:
    """``async with Chromium() as page: await page.goto(url); await page.eval("1+1")``."""

    def __init__(self, binary: str = CHROMIUM, flags: tuple = ()):
        self.binary, self.flags = binary, list(flags)
        self.proc: Optional[subprocess.Popen] = None
        self.profile: Optional[str] = None
        self.session = None
        self.ws = None
        self.ids = itertools.count(1)

    async def __aenter__(self) -> "Chromium":
        import aiohttp
        self.profile = tempfile.mkdtemp(prefix="raygroups-chromium-")
        self.proc = subprocess.Popen([self.binary, *FLAGS, *self.flags, f"--user-data-dir={self.profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(600):
            if os.path.exists(port_file):
                with open(port_file) as f:
                    lines = f.read().split()
                if lines:
                    break
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("chromium did not open its DevTools port")
        port = int(lines[0])
        self.session = aiohttp.ClientSession()
        for _ in range(100):
            async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [p for p in await r.json(content_type=None) if p.get("type") == "page"]
            if pages:
                break
            await asyncio.sleep(0.05)
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                                max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)

    async def send(self, method: str, **params: Any) -> dict:
        mid = next(self.ids)
        await self.ws.send_str(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = await self.ws.receive(timeout=30)
            data = json.loads(msg.data)
            if data.get("id") == mid:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data.get("result", {})

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def eval(self, expression: str) -> Any:
        r = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                            awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll ``expression`` in the page until it is truthy; its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = None
        while loop.time() < deadline:
            try:
                last = await self.eval(expression)
            except RuntimeError:
                last = None
            if last:
                return last
            await asyncio.sleep(0.1)
        raise AssertionError(f"page never satisfied {expression!r} (last: {last!r})")
