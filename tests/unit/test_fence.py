"""The member actor's fence (actors/fence.py) without Ray: a fake node table, view, group
and clock. Each rule fires when it should and only then."""
import asyncio

import pytest

from raygroups.actors.fence import (ANSWER, ASK, FenceConfig, NodeFence, decode, encode,
                                    is_fence_message)

NODE = "n" * 56
CFG = FenceConfig(poll_s=1.0, gcs_timeout_s=0.05, ask_after_s=5.0, fence_after_s=20.0)


class Rig:
    def __init__(self, members=("me", "b", "c"), primary=True):
        self.now = 0.0
        self.nodes = [{"NodeID": NODE, "Alive": True}]
        self.reachable = True
        self.members, self.primary = list(members), primary
        self.sent, self.fenced, self.holds = [], [], []

        def read():
            if not self.reachable:
                raise ConnectionError("GCS unreachable")
            return self.nodes

        async def send(dest, payload):
            self.sent.append((dest, decode(payload)))

        async def fence(reason):
            self.fenced.append(reason)

        self.f = NodeFence(NODE, CFG, read, lambda: (self.members, self.primary, "me"), send,
                           fence, self.holds.append, clock=lambda: self.now)

    def check(self, at=None):
        if at is not None:
            self.now = at
        asyncio.run(self.f.check())


def test_a_node_ray_declared_dead_fences_at_once():
    r = Rig()
    r.check(0)
    assert r.fenced == []
    r.nodes[0]["Alive"] = False
    r.check(1)
    assert len(r.fenced) == 1 and "dead" in r.fenced[0] and r.f.fenced


def test_cut_off_from_the_head_while_the_peers_reach_it_fences_after_fence_after_s():
    r = Rig()
    r.check(0)
    r.reachable = False
    for t in range(1, 20):
        r.check(t)
        if t >= 6:  # unreachable since 1: asking the others every poll after ask_after_s
            assert r.sent[-1] == (None, [ASK, r.f.nonce])
        for m in ("b", "c"):
            asyncio.run(r.f.on_message(m, encode([ANSWER, r.f.nonce, 0.5])))
    assert r.fenced == [] and r.sent[0][1][0] == ASK and len(r.sent) == 14
    r.check(20)
    assert r.fenced == []
    for m in ("b", "c"):
        asyncio.run(r.f.on_message(m, encode([ANSWER, r.f.nonce, 0.5])))
    r.check(21)
    assert len(r.fenced) == 1 and "2 of the 2 other members reach it" in r.fenced[0]


def test_the_head_cut_off_from_most_members_fences_nobody():
    r = Rig(members=("me", "b", "c", "d", "e"))
    r.check(0)
    r.reachable = False
    for t in range(1, 40):
        r.check(t)
        asyncio.run(r.f.on_message("b", encode([ANSWER, r.f.nonce, 0.5])))  # b reaches it
        for m in ("c", "d", "e"):  # the others do not (answers older than ask_after_s)
            asyncio.run(r.f.on_message(m, encode([ANSWER, r.f.nonce, float(t)])))
    assert r.fenced == [] and r.f.head_note  # the group goes on; said once in the log


def test_cut_off_and_outside_a_primary_component_fences_without_asking():
    r = Rig(primary=False)
    r.check(0)
    r.reachable = False
    r.check(1)
    r.check(19)
    assert r.fenced == [] and r.sent == []  # outside a primary component nothing is sent
    r.check(21)
    assert len(r.fenced) == 1 and "not in a primary component" in r.fenced[0]


def test_the_gcs_back_before_fence_after_s_resets_everything():
    r = Rig(primary=False)
    r.check(0)
    r.reachable = False
    r.check(15)
    r.reachable = True
    r.check(16)
    r.reachable = False
    r.check(30)
    r.check(35)
    assert r.fenced == []  # unreachable since 30 only
    r.check(51)
    assert len(r.fenced) == 1


def test_an_excluded_member_holds_merges_until_ray_counts_its_node_alive():
    r = Rig()
    asyncio.run(r.f.excluded())
    assert r.holds == [True, False] and r.fenced == []  # asked at once: alive, released
    r.nodes[0]["Alive"] = False
    asyncio.run(r.f.excluded())
    assert r.holds == [True, False, True] and len(r.fenced) == 1  # dead: never released
    r2 = Rig()
    r2.reachable = False
    asyncio.run(r2.f.excluded())
    assert r2.holds == [True] and r2.f.held  # no answer: held until Ray answers


def test_questions_are_answered_with_the_age_of_the_last_read_and_junk_is_counted():
    r = Rig()
    r.check(3)
    r.now = 4.5
    asyncio.run(r.f.on_message("b", encode([ASK, 7])))
    assert r.sent == [("b", [ANSWER, 7, 1.5])]
    for junk in (b"\xa7FN", b"\xa7FN\xc1", encode([9]), encode([ASK]), encode([ANSWER, 1, "x"])):
        asyncio.run(r.f.on_message("b", junk))
    assert r.f.stats["malformed"] == 5 and len(r.sent) == 1
    assert is_fence_message(encode([ASK, 1])) and not is_fence_message(b"job-1")


@pytest.mark.parametrize("field", ["poll_s", "gcs_timeout_s", "ask_after_s", "fence_after_s",
                                   "exit_after_s"])
def test_config_fields_are_documented(field):
    import inspect

    import raygroups.actors.fence as mod
    assert f"    {field}: float" in inspect.getsource(mod.FenceConfig)
    assert field in FenceConfig.__dataclass_fields__
