"""One story with Ray's control plane: a member fences itself on a node Ray gave up on.

Ray treats a node its GCS declared dead as dead: it reschedules the node's actors elsewhere,
and when the node's raylet hears the verdict it stops every worker there, ours included. A
member that went on serving from such a node would be excluded by its peers (Ray's death
signal, actors/watcher.py), merge back seconds later (its process still runs), and be
excluded again when the raylet stops it: the group would change views three times for one
event, and the work queue would requeue what the member held in between. So a member
*fences* itself as soon as it learns that Ray gave up on its node, and never serves from it
again:

* ``ray.nodes()`` (Ray's node table, read every ``poll_s``) says this node is dead: fence.
  A frozen raylet (SIGSTOP) is such a case: the member's process runs on and still reaches
  the GCS, which declares the node dead once its health checks fail.
* The GCS has been unreachable from this member for ``fence_after_s`` (well within Ray's
  node-death timeout and the 60 s after which a raylet that lost its GCS exits), and either
  this member is not in a primary component (cut off from its peers too) or a majority of
  the other members of its view answer that they reach the GCS (asked over the group, see
  below): Ray will declare this node dead, so the member leaves first instead of being
  killed, or of merging back in between. When most members do not reach the GCS either,
  the head is what is cut off or down: the group goes on (its members own their sockets;
  Ray's control plane is not on their data path), and this member logs once what Ray will
  do (stop this node's workers when its raylet gives up on the GCS, unless the cluster runs
  GCS fault tolerance).

An excluded member (one that finds itself alone in a view after a bigger one: its peers
excluded it, Ray's death signal among the reasons) holds merges (``Gms.hold_merges``: it
neither leads nor takes part in one, and announces nothing) and asks Ray's node table at
once: it merges back only once Ray counts its node alive, and fences if Ray does not. So a
member never comes back from a node Ray gave up on, even for the seconds before its raylet
stops it.

Fencing: the member says why in its log (``fenced: ...``), leaves the group (a graceful
leave when it is in a primary component, which also fails the work queue's calls under way;
otherwise it only stops), refuses to rejoin, and its process exits ``exit_after_s`` later,
so that Ray starts a fresh incarnation where it can: on the same node if Ray still counts it
alive (a partition that healed before the verdict), nowhere there if not (the node-following
supervisor and Ray's placement only use alive nodes). Peers exclude the member once.

The question to the peers travels over the group itself, as messages the member actors
take out of the stream (``FENCE_MAGIC``): ``[ASK, nonce]`` multicast by a member that has
not reached the GCS for ``ask_after_s``, and ``[ANSWER, nonce, age]`` unicast back, ``age``
being the seconds since the answering member last read the node table (-1: never).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

import msgpack

log = logging.getLogger("raygroups.fence")

FENCE_MAGIC = b"\xa7FN"
ASK, ANSWER = 0, 1


@dataclass
class FenceConfig:
    poll_s: float = 1.0
    """How often the member reads Ray's node table (one ``ray.nodes()`` call: its cost grows
    with the number of nodes; raise it for clusters of hundreds of nodes)."""
    gcs_timeout_s: float = 3.0
    """A read that has not answered after this long counts as the GCS being unreachable."""
    ask_after_s: float = 5.0
    """The GCS unreachable this long: ask the other members whether they reach it (every
    ``poll_s``); an answer younger than this counts as "reaches the GCS"."""
    fence_after_s: float = 20.0
    """The GCS unreachable this long, and the member cut off (see the module doc): fence.
    Keep it below Ray's node-death timeout (GCS health checks: about 30-60 s with Ray's
    defaults) and its 60 s GCS reconnect timeout, so the member leaves before Ray acts."""
    exit_after_s: float = 2.0
    """After fencing, the process exits this much later (Ray restarts a fresh incarnation
    where it can)."""


def is_fence_message(payload: Any) -> bool:
    return isinstance(payload, (bytes, bytearray)) and payload.startswith(FENCE_MAGIC)


def encode(obj: list) -> bytes:
    return FENCE_MAGIC + msgpack.packb(obj, use_bin_type=True)


def decode(payload: bytes) -> Optional[list]:
    """A fence message, or None when malformed (counted by the caller)."""
    try:
        obj = msgpack.unpackb(bytes(payload[3:]), raw=False)
    except Exception:
        return None
    if type(obj) is not list or not obj or obj[0] not in (ASK, ANSWER):
        return None
    if obj[0] == ASK and (len(obj) != 2 or type(obj[1]) is not int):
        return None
    if obj[0] == ANSWER and (len(obj) != 3 or type(obj[1]) is not int or
                             type(obj[2]) not in (int, float)):
        return None
    return obj


def node_alive(nodes: list, node_id: str) -> Optional[bool]:
    """Whether Ray's node table (``ray.nodes()``) counts ``node_id`` alive (None: absent)."""
    for n in nodes:
        if n.get("NodeID") == node_id:
            return bool(n.get("Alive"))
    return None


class NodeFence:
    """The fence of one member actor. ``read_nodes``: Ray's node table (blocking; run on a
    thread of its own); ``view``: () -> (member addresses, primary, local address) of the
    member's current view, or None; ``send``: async (dest address or None, payload);
    ``fence``: async (reason) that does the fencing."""

    def __init__(self, node_id: str, config: FenceConfig,
                 read_nodes: Callable[[], list], view: Callable[[], Optional[tuple]],
                 send: Callable[[Any, bytes], Awaitable[None]],
                 fence: Callable[[str], Awaitable[None]],
                 hold: Callable[[bool], None] = lambda held: None,
                 clock: Callable[[], float] = time.monotonic):
        self.node_id, self.config = node_id, config
        self.read_nodes, self.view, self.send, self.fence = read_nodes, view, send, fence
        self.hold = hold
        self.held = False  # merges held until Ray counts our node alive
        self.clock = clock
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fence")
        self.reading: Optional[asyncio.Future] = None
        self.last_ok: Optional[float] = None      # last node table read that answered
        self.unreachable_since: Optional[float] = None
        self.nonce = 0
        self.answers: dict = {}                   # member -> (nonce, age)
        self.fenced: Optional[str] = None
        self.head_note = False                    # said once that the head is cut off
        self.stats = {"reads": 0, "read_failures": 0, "asks": 0, "answers_sent": 0,
                      "malformed": 0, "exclusions": 0}

    # -- the loop ------------------------------------------------------------------------
    async def run(self) -> None:
        while self.fenced is None:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # the fence never takes the member down
                log.exception("fence check failed")
            await asyncio.sleep(self.config.poll_s)

    async def check(self) -> None:
        now = self.clock()
        alive = await self._read(now)
        if alive is False:
            await self._fence(f"Ray declared this member's node {self.node_id[:12]} dead")
            return
        if alive is not None:
            self.unreachable_since = None
            self.head_note = False
            if self.held:
                self.held = False
                self.hold(False)
            return
        if self.unreachable_since is None:
            self.unreachable_since = now
        out = now - self.unreachable_since
        if out >= self.config.ask_after_s:
            await self._ask()
        if out >= self.config.fence_after_s:
            await self._judge(out)

    async def excluded(self) -> None:
        """The member was excluded (alone in a view after a bigger one): no merge back
        until Ray's node table says our node is alive."""
        if self.fenced is not None:
            return
        self.stats["exclusions"] += 1
        if not self.held:
            self.held = True
            self.hold(True)
        await self.check()

    async def _read(self, now: float) -> Optional[bool]:
        """True/False: the node table's verdict on our node; None: no answer in time."""
        loop = asyncio.get_running_loop()
        if self.reading is None:  # a read still hanging is waited for, not repeated
            self.reading = loop.run_in_executor(self.pool, self.read_nodes)
        try:
            nodes = await asyncio.wait_for(asyncio.shield(self.reading),
                                           self.config.gcs_timeout_s)
        except asyncio.TimeoutError:
            self.stats["read_failures"] += 1
            return None
        except Exception:
            self.reading = None
            self.stats["read_failures"] += 1
            return None
        self.reading = None
        self.stats["reads"] += 1
        self.last_ok = self.clock()
        alive = node_alive(nodes, self.node_id)
        return True if alive is None else alive  # not listed yet: a node still registering

    async def _ask(self) -> None:
        v = self.view()
        if v is None or not v[1]:
            return  # outside a primary component nothing can be sent (and we fence anyway)
        self.nonce += 1
        self.stats["asks"] += 1
        try:
            await self.send(None, encode([ASK, self.nonce]))
        except Exception as e:
            log.debug("fence question not sent: %s", e)

    async def _judge(self, out: float) -> None:
        v = self.view()
        if v is None:
            return
        members, primary, local = v
        others = [m for m in members if m != local]
        if not primary:
            await self._fence(f"no answer from Ray's GCS for {out:.0f} s and not in a primary "
                              f"component: cut off, Ray will declare this node dead")
            return
        recent = self.nonce - 1  # this round's question or the one before
        reach = sum(1 for m in others if m in self.answers and self.answers[m][0] >= recent
                    and 0 <= self.answers[m][1] < self.config.ask_after_s)
        if others and 2 * reach > len(others):
            await self._fence(f"no answer from Ray's GCS for {out:.0f} s while {reach} of the "
                              f"{len(others)} other members reach it: this node is cut off "
                              f"from Ray's head, which will declare it dead")
        elif not self.head_note:
            self.head_note = True
            log.warning("Ray's GCS has not answered for %.0f s, nor does it answer most other "
                        "members: Ray's head is cut off or down. The group goes on; Ray stops "
                        "this node's workers when its raylet gives up on the GCS (60 s by "
                        "default) unless the cluster runs GCS fault tolerance", out)

    async def _fence(self, reason: str) -> None:
        if self.fenced is not None:
            return
        self.fenced = reason
        log.error("fenced: %s; leaving the group, never rejoining from this node", reason)
        await self.fence(reason)

    # -- the question over the group -------------------------------------------------------
    async def on_message(self, sender: Any, payload: bytes) -> None:
        obj = decode(payload)
        if obj is None:
            self.stats["malformed"] += 1
            return
        if obj[0] == ASK:
            age = -1.0 if self.last_ok is None else round(self.clock() - self.last_ok, 3)
            self.stats["answers_sent"] += 1
            try:
                await self.send(sender, encode([ANSWER, obj[1], age]))
            except Exception as e:
                log.debug("fence answer not sent: %s", e)
        else:
            self.answers[sender] = (obj[1], float(obj[2]))
            while len(self.answers) > 4096:  # bounded: members that left long ago go first
                del self.answers[next(iter(self.answers))]

    def info(self) -> dict:
        now = self.clock()
        return {"fenced": self.fenced, "merges_held": self.held,
                "gcs_unreachable_s": (round(now - self.unreachable_since, 1)
                                      if self.unreachable_since is not None else 0.0),
                **self.stats}

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def exit_process(delay: float) -> None:
    """The fenced member's process goes, so that Ray starts a fresh incarnation where it can
    (a crash exit: ``max_restarts`` applies)."""
    asyncio.get_running_loop().call_later(delay, os._exit, 3)
