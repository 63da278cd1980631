"""Ray as a second failure signal.

Each member actor runs a ``RaySignal``: it watches the ``watchers`` members that follow it in
the view (a ring, so every member is watched by that many others and no member watches more)
and asks Ray's control store (the GCS actor table) every ``poll_s`` whether their actors still
live. A watched member counts as dead when its actor is DEAD or RESTARTING, when it restarted
since we began watching it (a new incarnation: the old address is gone for good), or when the
actor answers with a different member UUID (one that answers none has not joined yet, and is
asked again next round). The GCS learns of a killed or crashed actor within
a few ms and of a dead node after its health checks fail, so this catches what SWIM would
catch only after its probe and suspicion timeouts.

Why poll the actor table instead of holding a call on each actor: a call pending on an actor
Ray restarts fails only after about 2 s (``ActorUnavailableError``), while the table says
RESTARTING within about 20 ms. The table is read with ray_compat.actor_state (about 0.4 ms a
call; Ray's public state API needs the dashboard, which local runs leave out).
Members that are not actors of this group (a plain ``Channel`` that joined) are not watched.

The verdict goes to ``report(addr)``: the member feeds it to its own stack and to the acting
coordinator's (see ``MemberActor._on_ray_dead``).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Optional

import ray

from .placement import actor_name
from .ray_compat import actor_state

log = logging.getLogger("raygroups.watcher")


def successors(members: tuple, local: Any, k: int) -> list:
    """The ``k`` members after ``local`` in view order, wrapping around."""
    if local not in members or len(members) < 2:
        return []
    i = members.index(local)
    n = len(members)
    return [members[(i + j) % n] for j in range(1, min(k, n - 1) + 1)]


class _Watch:
    __slots__ = ("addr", "handle", "actor_id", "restarts", "reported", "unmanaged")

    def __init__(self, addr: Any):
        self.addr = addr
        self.handle = None
        self.actor_id: Optional[str] = None
        self.restarts: Optional[int] = None
        self.reported = False
        self.unmanaged = False


class RaySignal:
    def __init__(self, cluster: str, namespace: str, members: Callable[[], tuple],
                 local: Callable[[], Any], report: Callable[[Any], Awaitable[None]],
                 poll_s: float = 0.1, watchers: int = 2):
        self.cluster, self.namespace = cluster, namespace
        self.members, self.local, self.report = members, local, report
        self.poll_s, self.k = poll_s, watchers
        self.watches: dict = {}
        self.stats = {"polls": 0, "verdicts": 0, "resolve_failures": 0}

    def watched(self) -> list:
        return [w.addr.name for w in self.watches.values() if not w.unmanaged]

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._round(loop)
            except asyncio.CancelledError:
                raise
            except Exception:  # the failure signal never takes the member down
                log.exception("ray failure signal round failed")
            await asyncio.sleep(self.poll_s)

    async def _round(self, loop: asyncio.AbstractEventLoop) -> None:
        local = self.local()
        want = successors(self.members(), local, self.k) if local is not None else []
        for addr in list(self.watches):
            if addr not in want:
                del self.watches[addr]
        for addr in want:
            if addr not in self.watches:
                w = self.watches[addr] = _Watch(addr)
                await self._resolve(w, loop)
        live = [w for w in self.watches.values()
                if w.actor_id is not None and not w.reported and not w.unmanaged]
        if not live:
            return
        states = await loop.run_in_executor(None, lambda: [actor_state(w.actor_id) for w in live])
        self.stats["polls"] += 1
        for w, st in zip(live, states):
            if st is None:
                continue
            if st.get("State") in ("DEAD", "RESTARTING") or \
                    int(st.get("NumRestarts", 0)) != w.restarts:
                await self._verdict(w, f"actor {st.get('State', '?').lower()}, "
                                       f"restarts {st.get('NumRestarts')}")

    async def _resolve(self, w: _Watch, loop: asyncio.AbstractEventLoop) -> None:
        """Find the actor of ``w.addr`` and check that it still is that incarnation."""
        name = actor_name(self.cluster, w.addr.name)
        try:
            w.handle = await loop.run_in_executor(
                None, lambda: ray.get_actor(name, namespace=self.namespace))
        except ValueError:
            w.unmanaged = True  # not an actor of ours (or already gone): SWIM's job
            return
        except Exception:
            self.stats["resolve_failures"] += 1
            del self.watches[w.addr]  # try again next round
            return
        w.actor_id = w.handle._actor_id.hex()
        st = await loop.run_in_executor(None, actor_state, w.actor_id)
        w.restarts = int(st.get("NumRestarts", 0)) if st else 0
        if st is not None and st.get("State") in ("DEAD", "RESTARTING"):
            await self._verdict(w, f"actor {st['State'].lower()}")
            return
        try:
            uid = await asyncio.wait_for(w.handle.uid.remote(), 10.0)
        except ray.exceptions.ActorDiedError:
            await self._verdict(w, "actor died")
            return
        except Exception:
            return  # busy or restarting: the table tells us next round
        if uid is None:
            # not a member yet: its stack installed the view, the actor has not marked
            # itself joined (a launch under load; taken for "another incarnation" once, a
            # false exclusion); asked again next round, when a new incarnation that has
            # not joined yet answers too
            del self.watches[w.addr]
            return
        if uid != w.addr.uuid_hex:
            await self._verdict(w, f"actor runs another incarnation ({uid})")

    async def _verdict(self, w: _Watch, why: str) -> None:
        w.reported = True
        self.stats["verdicts"] += 1
        log.info("ray reports %s dead: %s", w.addr.name, why)
        await self.report(w.addr)
