"""Groups on Ray are authenticated and encrypted without configuration: ``Group.launch``
makes a key (AES-GCM) that travels only through Ray; a capture of the members' packets on
loopback shows no plaintext and only sealed packets; a process that has the cluster name and
the ports but not the key cannot join, and what it sends is dropped and counted while the
group's view stays, its queue history is intact and the drops show on the status page;
``insecure=True`` is the explicit way out (plaintext on the wire)."""
import asyncio
import json
import os
import socket
import struct
import threading
import time
import urllib.request

import pytest

pytest_plugins = ["tests.ray_fixtures"]

from raygroups.actors import Group  # noqa: E402
from raygroups.stack import Channel, StackConfig  # noqa: E402

AESGCM_MODE = 0xA2  # stack/auth.py: the first byte of a packet sealed with AES-GCM


class LoopbackCapture:
    """UDP payloads to or from ``ports`` on the loopback interface (a raw socket: root)."""

    def __init__(self, ports: set):
        self.ports, self.payloads = ports, []
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(65535)
            except socket.timeout:
                continue
            ip = frame[14:]
            if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:  # IPv4 UDP only
                continue
            ihl = (ip[0] & 0x0F) * 4
            sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
            if sport in self.ports or dport in self.ports:
                self.payloads.append(ip[ihl + 8:])

    def close(self) -> list:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()
        return self.payloads


def member_ports(g) -> set:
    return {int(m["address"].rsplit(":", 1)[1]) for m in g.members()}


def capture_while_sending(g, marker: bytes) -> list:
    cap = LoopbackCapture(member_ports(g))
    try:
        for _ in range(20):
            g.send(marker)
            time.sleep(0.02)
        time.sleep(0.5)
    finally:
        payloads = cap.close()
    return payloads


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a raw socket (packet capture) "
                                "needs root")


@needs_root
def test_a_default_group_carries_only_sealed_encrypted_packets(ray_session):
    g = Group.launch(f"sec-{os.getpid()}", members=3, timeout=60)
    try:
        marker = b"PLAINTEXT-MARKER-" + os.urandom(4).hex().encode()
        payloads = capture_while_sending(g, marker)
        assert len(payloads) >= 20, "the capture saw the members' traffic"
        assert not any(marker in p for p in payloads)
        assert all(p[0] == AESGCM_MODE for p in payloads), {p[0] for p in payloads}
        stats = g.probe()
        assert all(i["stats"]["transport"].get("dropped_auth", 0) == 0 for i in stats)
    finally:
        g.shutdown()


@needs_root
def test_insecure_is_explicit_and_then_plaintext(ray_session):
    with pytest.raises(ValueError):
        Group.launch("never", members=1, cluster_key=b"k" * 32, insecure=True)
    g = Group.launch(f"insec-{os.getpid()}", members=2, insecure=True, timeout=60)
    try:
        marker = b"PLAINTEXT-MARKER-" + os.urandom(4).hex().encode()
        assert any(marker in p for p in capture_while_sending(g, marker))
    finally:
        g.shutdown()


def test_a_process_without_the_key_cannot_join_and_is_dropped_and_counted(ray_session):
    g = Group.launch(f"foreign-{os.getpid()}", members=3, timeout=60)
    try:
        names = g.member_names()
        q = g.queue("jobs", member=names[0])
        published = [b"job-%d" % i for i in range(50)]
        q.publish_many(published[:25])
        view = g.view()
        hosts = [(m["address"].rsplit(":", 1)[0], int(m["address"].rsplit(":", 1)[1]))
                 for m in g.members()]
        cfg = StackConfig.local(initial_hosts=hosts, transport__ip_multicast=False)

        async def intrude(name, config):
            """Nobody answers it: it founds a group of its own, alone."""
            ch = Channel(g.cluster, name, config)
            try:
                v = await ch.connect(timeout=10.0)
                await asyncio.sleep(2.0)  # its JOIN attempts, pings and merge INFOs go on
                return list(ch.view.members), v
            finally:
                await ch.close()
        for name, config in (("intruder", cfg),  # no key, and a key of its own
                             ("intruder2", cfg.with_options(cluster_key=os.urandom(32),
                                                            auth_mode="aesgcm"))):
            members, _ = asyncio.run(intrude(name, config))
            assert [a.name for a in members] == [name]
        q.publish_many(published[25:])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # and plain garbage
            for host, port in hosts:
                for _ in range(20):
                    s.sendto(os.urandom(200), (host, port))
        assert g.view().view_id == view.view_id  # the group never changed its view
        dropped = sum(i["stats"]["transport"].get("dropped_auth", 0) for i in g.probe())
        assert dropped > 0, "the intruders' packets are counted"
        g.send(b"still fine")
        assert len(g.view().members) == 3
        # the queue's history is intact: every job, once, through another member
        got = []
        q2 = g.queue("jobs", member=names[-1])
        while len(got) < len(published):
            for d in q2.acquire_many(len(published), timeout_s=20):
                got.append(d.body)
                d.accept()
        assert sorted(got) == sorted(published)
        # the drops are on each member's status page (its "dropped" table reads this)
        url = g.status_urls()[names[0]]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url + "membership/status", timeout=10) as r:
                shown = json.loads(r.read())["dropped"]
            if shown.get("unauthenticated", 0) >= 20 and shown.get("auth", 0) > 0:
                break
            time.sleep(0.2)
        assert shown.get("unauthenticated", 0) >= 20 and shown.get("auth", 0) > 0, shown
    finally:
        g.shutdown()
