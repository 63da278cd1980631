"""Real-network fault labs: hosts in Linux network namespaces, faults cut with nftables.

Topology of one ``NetLab(n)`` (``<tag>`` = ``<pid>.<4 hex>``, unique per lab)::

        namespace rgbr.<tag>                     namespace rgh<k>.<tag>  (k = 0 .. n-1)
     +-----------------------------+          +----------------------------------------+
     |  br0 (bridge, no IGMP        |  veth    |  eth0  10.213.<lab>.<k+1>/24           |
     |       snooping: floods       |----------|        route 224.0.0.0/4 dev eth0      |
     |       multicast)      h<k> --|          |  lo    127.0.0.1                       |
     +-----------------------------+          |  nft table inet raygroups:             |
                                              |    input  (partition cut, random loss) |
                                              |    output (partition cut, optional)    |
                                              +----------------------------------------+

Everything lives in namespaces the lab creates: the bridge has its own namespace, so the root
namespace (and the machine's external address) is never touched, and interface names
(``br0``, ``h<k>``, ``eth0``) cannot collide between labs running in parallel. The host
namespaces hold only the lab subnet and loopback: no default route, IPv6 disabled (no
neighbour-discovery noise in the nft counters). IP multicast crosses the bridge.

Faults are nftables rules in each host namespace, table ``inet raygroups``:

* ``partition([[0, 1], [2]])``: each host drops (at input) packets whose source is a host
  of another group; hosts named in no group are isolated. ``heal()`` lifts it.
* ``isolate(k)``: host k drops everything on its eth0, in and out (a lost host, or a dead
  link: nothing arrives and nothing leaves; its TCP connections see no reset). ``heal()``
  lifts it.
* ``drop(k, 30)``: host k drops 30 % of the packets arriving on its eth0
  (``numgen random mod 10000 < 3000``); ``drop_all(p)`` for every host; 0 lifts it.
* named counters per host: ``seen_in`` (packets arriving on eth0), ``lost_in`` (dropped by
  ``drop``), ``cut_in`` / ``cut_out`` (dropped by the partition or the isolation) --
  ``lab.counters(k)``.

Cleanup: ``close()`` (the context manager, and ``atexit`` for labs never closed) kills every
process inside the lab's namespaces and deletes the namespaces (veths and bridge go with them).
A lab created later also sweeps namespaces left by dead processes (e.g. a SIGKILLed pytest):
the pid is part of the name. Needs root, ``ip`` (iproute2) and ``nft`` (nftables).
"""
from __future__ import annotations

import atexit
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Optional, Sequence

TABLE = "raygroups"
_NAME_RE = re.compile(r"^rg(?:br|h\d+|probe)\.(\d+)\.[0-9a-f]{4}$")
_live: "set[NetLab]" = set()
_live_lock = threading.Lock()
_avail: Optional[tuple[bool, str]] = None


def _run(argv: Sequence[str], check: bool = True, input: Optional[str] = None,
         timeout: float = 20.0) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _netns_list() -> list[str]:
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_netns_pids(ns: str) -> None:
    """SIGKILL whatever still runs inside namespace ``ns`` (only lab namespaces are passed)."""
    r = _run(["ip", "netns", "pids", ns], check=False)
    for tok in r.stdout.split():
        try:
            os.kill(int(tok), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def _delete_netns(ns: str) -> None:
    _kill_netns_pids(ns)
    _run(["ip", "netns", "del", ns], check=False)


def sweep_stale() -> list[str]:
    """Delete lab namespaces (and log dirs) whose creating process is gone; returns the
    namespaces deleted."""
    gone = []
    for ns in _netns_list():
        m = _NAME_RE.match(ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            _delete_netns(ns)
            gone.append(ns)
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        m = re.match(r"^netlab-(\d+)\.[0-9a-f]{4}-", d)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
    return gone


class NetLab:
    """``n`` hosts on one bridge, each in its own network namespace. See the module doc."""

    def __init__(self, n: int = 3, lab: Optional[int] = None, keep_logs: bool = False):
        if not 1 <= n <= 250:
            raise ValueError("1 <= n <= 250 hosts")
        self.n = n
        self.tag = f"{os.getpid()}.{random.getrandbits(16):04x}"
        self.lab = lab if lab is not None else random.randint(1, 254)
        self.bridge_ns = f"rgbr.{self.tag}"
        self.hosts = [f"rgh{k}.{self.tag}" for k in range(n)]
        self.tmp = tempfile.mkdtemp(prefix=f"netlab-{self.tag}-")
        self.keep_logs = keep_logs
        self.procs: list[subprocess.Popen] = []
        self._groups: Optional[list[list[int]]] = None
        self._outbound = False
        self._isolated: set[int] = set()
        self._loss: dict[int, float] = {}
        self._created: list[str] = []
        self._closed = False
        self._seq = 0

    # -- availability -----------------------------------------------------------------
    @staticmethod
    def available() -> tuple[bool, str]:
        """(True, "") if labs can be built here, else (False, why) -- for pytest.skip."""
        global _avail
        if _avail is not None:
            return _avail
        if not sys.platform.startswith("linux"):
            _avail = (False, "network namespaces need Linux")
        elif os.geteuid() != 0:
            _avail = (False, "needs root (network namespaces, nftables)")
        elif shutil.which("ip") is None:
            _avail = (False, "`ip` (iproute2) not installed")
        elif shutil.which("nft") is None:
            _avail = (False, "`nft` not installed: apt-get install -y nftables")
        else:
            ns = f"rgprobe.{os.getpid()}.{random.getrandbits(16):04x}"
            try:
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "add", "br0", "type", "bridge"])
                _run(["ip", "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
                _run(["ip", "netns", "exec", ns, "nft", "add", "table", "inet", TABLE])
                _avail = (True, "")
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                _avail = (False, f"cannot build a network namespace lab here: {e}")
            finally:
                _run(["ip", "netns", "del", ns], check=False)
        return _avail

    # -- lifecycle --------------------------------------------------------------------
    def __enter__(self) -> "NetLab":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "NetLab":
        ok, why = self.available()
        if not ok:
            raise RuntimeError(why)
        sweep_stale()
        with _live_lock:
            _live.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _ns_add(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._created.append(ns)

    def _build(self) -> None:
        br = self.bridge_ns
        self._ns_add(br)
        ipb = ["ip", "-n", br]
        _run(ipb + ["link", "set", "lo", "up"])
        _run(ipb + ["link", "add", "br0", "type", "bridge", "mcast_snooping", "0",
                    "stp_state", "0", "forward_delay", "0"])
        _run(ipb + ["link", "set", "br0", "up"])
        for k, ns in enumerate(self.hosts):
            self._ns_add(ns)
            sysctl = ["ip", "netns", "exec", ns, "sysctl", "-qw"]
            for key in ("all", "default"):
                _run(sysctl + [f"net.ipv6.conf.{key}.disable_ipv6=1"], check=False)
            _run(ipb + ["link", "add", f"h{k}", "type", "veth", "peer", "name", "eth0",
                        "netns", ns])
            _run(ipb + ["link", "set", f"h{k}", "master", "br0", "up"])
            ip = ["ip", "-n", ns]
            _run(ip + ["link", "set", "lo", "up"])
            _run(ip + ["addr", "add", f"{self.addr(k)}/24", "dev", "eth0"])
            _run(ip + ["link", "set", "eth0", "up"])
            _run(ip + ["route", "add", "224.0.0.0/4", "dev", "eth0"])
            self._nft(k, textwrap.dedent(f"""\
                table inet {TABLE} {{
                    counter seen_in {{}}
                    counter lost_in {{}}
                    counter cut_in {{}}
                    counter cut_out {{}}
                    chain input {{ type filter hook input priority -10; policy accept; }}
                    chain output {{ type filter hook output priority -10; policy accept; }}
                }}
                """))
            self._apply(k)

    def close(self) -> None:
        """Kill every lab process, delete every lab namespace. Idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            _terminate(p)
        for ns in reversed(self._created):
            try:
                _delete_netns(ns)
            except Exception:  # keep cleaning the rest
                pass
        with _live_lock:
            _live.discard(self)
        if not self.keep_logs:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- addressing -------------------------------------------------------------------
    def addr(self, k: int) -> str:
        """IPv4 address of host k: 10.213.<lab>.<k+1>."""
        if not 0 <= k < self.n:
            raise IndexError(f"host {k} not in lab of {self.n}")
        return f"10.213.{self.lab}.{k + 1}"

    def ns(self, k: int) -> str:
        return self.hosts[k]

    # -- processes --------------------------------------------------------------------
    def spawn(self, k: int, argv: Sequence[str], env: Optional[dict] = None,
              cwd: Optional[str] = None, name: Optional[str] = None) -> subprocess.Popen:
        """Start ``argv`` inside host k's namespace. stdin is a text pipe (line buffered);
        stdout/stderr go to files, paths in ``proc.out_path`` / ``proc.err_path``. Killed
        by ``close()``."""
        self._check_open()
        self._seq += 1
        base = os.path.join(self.tmp, f"{self._seq:03d}-h{k}-{name or os.path.basename(argv[0])}")
        out, err = open(base + ".out", "wb"), open(base + ".err", "wb")
        try:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns(k), *argv], env=env, cwd=cwd,
                                 stdin=subprocess.PIPE, stdout=out, stderr=err, text=True,
                                 bufsize=1, start_new_session=True)
        finally:
            out.close()
            err.close()
        p.out_path, p.err_path = base + ".out", base + ".err"  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def run(self, k: int, argv: Sequence[str], timeout: float = 30.0,
            input: Optional[str] = None) -> subprocess.CompletedProcess:
        """Run ``argv`` to completion inside host k's namespace (output captured)."""
        self._check_open()
        return _run(["ip", "netns", "exec", self.ns(k), *argv], check=False, input=input,
                    timeout=timeout)

    def kill(self, p: subprocess.Popen) -> None:
        _terminate(p)

    # -- faults -----------------------------------------------------------------------
    def partition(self, groups: Sequence[Sequence[int]], outbound: bool = False,
                  bridges: bool = False) -> None:
        """Cut the lab into ``groups`` of host indexes; hosts in no group are isolated.
        Packets from another group are dropped at input (the sender sees nothing, as with
        a real cut). ``outbound=True`` also drops them at output, where a UDP ``sendto``
        then fails with EPERM -- unlike a real network. ``bridges=True`` lets a host be in
        several groups: it sees all of them, and they do not see each other."""
        seen: set[int] = set()
        for g in groups:
            for k in g:
                self.addr(k)
                if k in seen and not bridges:
                    raise ValueError(f"host {k} in two groups")
                seen.add(k)
        self._groups = [list(g) for g in groups]
        self._outbound = outbound
        for k in range(self.n):
            self._apply(k)

    def isolate(self, k: int) -> None:
        """Host k drops every packet on its lab interface, arriving and leaving (a UDP
        ``sendto`` there fails with EPERM). Only host k's rules change."""
        self.addr(k)
        self._isolated.add(k)
        self._apply(k)

    def heal(self) -> None:
        """Lift the partition and every isolation (random loss set with ``drop`` stays)."""
        self._groups = None
        self._isolated.clear()
        for k in range(self.n):
            self._apply(k)

    def drop(self, k: int, percent: float) -> None:
        """Host k drops ``percent`` % (0..100, two decimals) of the packets arriving on its
        lab interface, independently at random. 0 lifts it."""
        if not 0 <= percent <= 100:
            raise ValueError("percent in 0..100")
        self.addr(k)
        self._loss[k] = float(percent)
        self._apply(k)

    def drop_all(self, percent: float) -> None:
        for k in range(self.n):
            self.drop(k, percent)

    def clear(self) -> None:
        """No partition, no isolation, no loss."""
        self._groups, self._loss = None, {}
        self._isolated.clear()
        for k in range(self.n):
            self._apply(k)

    def counters(self, k: int) -> dict[str, int]:
        """Packet counts of host k's named counters (seen_in, lost_in, cut_in, cut_out)."""
        r = self.run(k, ["nft", "-j", "list", "counters", "table", "inet", TABLE])
        if r.returncode != 0:
            raise RuntimeError(f"nft list counters on host {k}: {r.stderr.strip()}")
        out = {}
        for item in json.loads(r.stdout)["nftables"]:
            c = item.get("counter")
            if c:
                out[c["name"]] = c["packets"]
        return out

    def reset_counters(self, k: Optional[int] = None) -> None:
        for h in range(self.n) if k is None else [k]:
            self._nft(h, f"reset counters table inet {TABLE}\n")

    def rules(self, k: int) -> str:
        """``nft list table`` of host k (for failure messages)."""
        return self.run(k, ["nft", "list", "table", "inet", TABLE]).stdout

    def _blocked(self, k: int) -> list[str]:
        if self._groups is None:
            return []
        mine = {h for g in self._groups if k in g for h in g} or {k}
        return [self.addr(h) for h in range(self.n) if h not in mine]

    def _apply(self, k: int) -> None:
        """Rewrite host k's chains from the current partition and loss, in one transaction
        (named counters survive)."""
        lines = [f"flush chain inet {TABLE} input", f"flush chain inet {TABLE} output",
                 f'add rule inet {TABLE} input iifname "eth0" counter name "seen_in"']
        if k in self._isolated:
            lines += [f'add rule inet {TABLE} input iifname "eth0" counter name "cut_in" drop',
                      f'add rule inet {TABLE} output oifname "eth0" counter name "cut_out" drop']
        blocked = self._blocked(k)
        if blocked:
            s = ", ".join(blocked)
            lines.append(f'add rule inet {TABLE} input ip saddr {{ {s} }} '
                         f'counter name "cut_in" drop')
            if self._outbound:
                lines.append(f'add rule inet {TABLE} output ip daddr {{ {s} }} '
                             f'counter name "cut_out" drop')
        share = round(self._loss.get(k, 0.0) * 100)
        if share > 0:
            lines.append(f'add rule inet {TABLE} input iifname "eth0" '
                         f'numgen random mod 10000 < {share} counter name "lost_in" drop')
        self._nft(k, "\n".join(lines) + "\n")

    def _nft(self, k: int, script: str) -> None:
        self._check_open()
        r = self.run(k, ["nft", "-f", "-"], input=script)
        if r.returncode != 0:
            raise RuntimeError(f"nft on host {k} failed: {r.stderr.strip()}\n{script}")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("lab closed")

    # -- probes -----------------------------------------------------------------------
    def udp_probe(self, src: int, dst: int, count: int = 5, port: int = 9999,
                  interval: float = 0.002, wait: float = 0.5) -> int:
        """Send ``count`` numbered datagrams from host src to an echo server on host dst;
        returns how many distinct echoes came back."""
        server = self.spawn(dst, [sys.executable, "-c", _ECHO, self.addr(dst), str(port)],
                            name="echo")
        try:
            deadline = time.monotonic() + 10
            while b"ready" not in _read(server.out_path):  # type: ignore[attr-defined]
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("echo server did not start: "
                                       + _read(server.err_path).decode())  # type: ignore
                time.sleep(0.01)
            r = self.run(src, [sys.executable, "-c", _PROBE, self.addr(src), self.addr(dst),
                               str(port), str(count), str(interval), str(wait)])
            if r.returncode != 0:
                raise RuntimeError(f"probe failed: {r.stderr}")
            return int(r.stdout.strip())
        finally:
            _terminate(server)

    def reachable(self, src: int, dst: int, count: int = 5) -> bool:
        """Does any of ``count`` UDP probes from src to dst come back?"""
        return self.udp_probe(src, dst, count=count) > 0


_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    data, src = s.recvfrom(2048)
    s.sendto(data, src)
"""

_PROBE = """
import socket, sys, time
me, dst, port, count, interval, wait = sys.argv[1:7]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((me, 0))
s.setblocking(False)
got = set()
def drain():
    while True:
        try:
            got.add(s.recv(2048))
        except (BlockingIOError, ConnectionRefusedError, PermissionError):
            return
for i in range(int(count)):
    try:
        s.sendto(b"%d" % i, (dst, int(port)))
    except PermissionError:
        pass
    time.sleep(float(interval))
    drain()
end = time.monotonic() + float(wait)
while time.monotonic() < end:
    time.sleep(0.01)
    drain()
print(len(got))
"""


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _terminate(p: subprocess.Popen, grace: float = 2.0) -> None:
    """SIGTERM the process group of ``p`` (spawned with its own session), then SIGKILL."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)
    if p.stdin is not None:
        try:
            p.stdin.close()
        except OSError:
            pass


@atexit.register
def _close_all() -> None:
    with _live_lock:
        labs = list(_live)
    for lab in labs:
        lab.close()
