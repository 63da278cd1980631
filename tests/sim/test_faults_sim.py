"""FAULTS inside simulated groups on a perfect network: the reliability layers above it must
hide its drops, duplicates and reordering (exactly-once FIFO delivery), and a partition made
with drop_from heals without loss."""
from dataclasses import dataclass, field

import pytest

from raygroups.stack.config import StackConfig
from raygroups.stack.discovery.ping import Ping
from raygroups.stack.faults import FaultConfig, Faults
from raygroups.stack.gms import Gms
from raygroups.stack.nakack import NakAck
from raygroups.stack.sim import Simulation
from raygroups.stack.stable import Stable
from raygroups.stack.stack import Stack
from raygroups.stack.transport import Transport
from raygroups.stack.unicast import Unicast

from .history import History

HOSTILE = FaultConfig(drop_up=0.2, drop_down=0.2, duplicate=0.05, shuffle=0.3, hold_back=0.05,
                      hold_back_s=0.01, delay_up_s=(0.0, 0.002))


def base_config():
    """``local`` timers. GMS has no merge: a joiner that hears nobody founds a group of its
    own for good, so under 36% ping loss it waits for more empty discovery rounds."""
    return StackConfig.local(gms__found_after_rounds=10)


@dataclass
class WithFaults:
    """A StackConfig whose build() puts Faults right above the transport."""
    faults: FaultConfig = field(default_factory=FaultConfig)
    base: StackConfig = field(default_factory=base_config)

    def build(self, cluster, name, host, rng, uid=None):
        b = self.base
        layers = [Transport(b.transport), Faults(self.faults), Ping(b.discovery),
                  NakAck(b.nakack), Unicast(b.unicast), Stable(b.stable), Gms(b.gms)]
        return Stack(cluster, name, layers, host, rng, uid)


def agreed(members):
    views = {m.view.view_id for m in members if m.view is not None}
    return len(views) == 1 and all(m.view is not None and len(m.view) == len(members)
                                   for m in members)


def form(sim, names, faults):
    """Members join one after another (concurrent joiners that miss each other's pings
    would found separate groups), each under the faults."""
    members = []
    for name in names:
        members.append(sim.add_member("faulty", name, config=WithFaults(faults)))
        sim.run_until(lambda: agreed(members), 60, f"{len(members)} members agree")
    return members


def send_all(sim, h, members, per_member):
    while any(h.counters[m.address.uid] < per_member for m in members):
        for m in members:
            if h.counters[m.address.uid] < per_member and sim.rng.random() < 0.5:
                h.send(m)
        sim.run_for(sim.rng.uniform(0, 0.005))


def all_delivered(sim, h, members):
    sim.run_until(lambda: all(len(m.delivered) >= sum(1 for s in h.sent if m.address.uid in s[2])
                              for m in members), 60, "all delivered")


@pytest.mark.seeds(20)
def test_exactly_once_fifo_despite_drops_duplicates_and_reordering(sim_seed):
    sim = Simulation(sim_seed)  # a perfect network: every fault comes from the layer
    h = History(sim)
    members = form(sim, "ABCD", HOSTILE)
    send_all(sim, h, members, 300)
    all_delivered(sim, h, members)
    sim.run_for(0.5)  # late duplicates and retransmissions would show up here
    h.check_all(members)
    for m in members:
        got = h.delivered_by(m)
        assert len(got) == 4 and all(ks == list(range(1, 301)) for ks in got.values()), m
    stats = [m.stack.layer("faults").stats for m in members]
    for key in ("dropped_up", "dropped_down", "duplicated", "reordered", "delayed"):
        assert all(st[key] > 0 for st in stats), key


@pytest.mark.seeds(20)
def test_partition_by_drop_from_heals_without_loss(sim_seed):
    sim = Simulation(sim_seed)
    h = History(sim)
    members = form(sim, "ABC", FaultConfig())
    a, b, c = members
    fa, fc = a.stack.layer("faults"), c.stack.layer("faults")
    fa.drop_from(c.address)  # a symmetric cut between A and C; B still hears both
    fc.drop_from(a.address)
    send_all(sim, h, members, 50)
    sim.run_for(0.2)
    assert a.address.uid not in h.delivered_by(c) and c.address.uid not in h.delivered_by(a)
    assert fa.stats["dropped_up"] > 0 and fc.stats["dropped_up"] > 0
    fa.heal()
    fc.heal()
    all_delivered(sim, h, members)
    h.check_all(members)
