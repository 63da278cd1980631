"""raygroups against JGroups 2.12 and Serf, side by side in one run, on loopback.

    python bench/compare.py                  # the full table (about 30 minutes)
    python bench/compare.py --quick          # fewer messages and trials (about 6 minutes)
    python bench/compare.py --json out.json  # also write every figure as JSON
    python bench/compare.py --only tput,join,detect,hang,converge,loss   # a subset

Installs nothing: it uses the peers when present and otherwise prints the setup step
(``apt-get install libjgroups-java serf``, plus a JDK for ``javac``) and skips their rows.
Run from the repository root, with the raygroups virtualenv's python. Every member of every
system is its own process on 127.0.0.1, and each row alternates runs of raygroups and of the
peer (raygroups, peer, raygroups, peer, ...), so both see the same machine state.

* throughput: one sender multicasts K messages (after a warm-up of K/5 and a 1 s pause) as
  fast as the channel takes them; the figure is K divided by the time from the sender's
  first measured send until the slowest member (the sender included) received the last
  one, the same definition on both sides (``bench/compare_member.py tput`` and
  ``bench/java/JgBench.java tput``, compiled here with javac into a temporary directory).
  JGroups runs its stock ``udp.xml`` / ``tcp.xml`` from the jar with bind_addr=127.0.0.1
  (and a private multicast port / TCPPING host list); raygroups runs
  ``StackConfig.local(...)`` with static discovery.
* join: connect() of the 2nd and the 5th member, existing members in one process (one JVM),
  the joiner in another that does one discarded warm-up join and then times each trial.
* detection: n members up (raygroups ``StackConfig.lan()``, FD_SOCK on as in that preset,
  static discovery; Serf agents ``serf agent -bind=127.0.0.1:<port>
  -rpc-addr=127.0.0.1:<port>``, LAN profile, joined with -join), kill -9 one at random, time until every survivor dropped it: raygroups members
  print a time.time() stamp with each view; Serf agents log ``EventMemberFailed`` (the
  stream ``serf monitor`` shows), stamped as each line arrives, and ``serf members`` then
  confirms the victim failed. The figure of a trial is its slowest survivor.
* hang detection: the same groups and figure, but one member (agent) is SIGSTOPped instead:
  its sockets stay open, so no connection closes and only timers find it. SIGCONT once
  every survivor dropped it; the next trial starts when all n share one view (list) again.
* join convergence: n-1 members up, the n-th started and idle; at t0 it is told to join
  (raygroups: "go" on its stdin, then Channel.connect; Serf: ``serf join`` through its RPC
  address); the figure is the time until every one of the n members lists all n.
* false exclusions: n live raygroups members, each dropping 10% of what it receives (the
  in-process fault layer, ``faults__drop_up=0.1``), LAN preset (FD_SOCK on); every member that any view
  removes is a false exclusion.

Targets (ratios raygroups/peer from this run): throughput >= 1.0x JGroups for 1 KB, 3
members, UDP and >= 0.8x for 100 B; the 2nd member's join <= 0.25x JGroups's; detection p50
<= 0.3x Serf's and <= 0.3 s at 5 and 10 members, with zero false exclusions at 10% loss;
hang detection p50 <= 2 s (Serf's figure and the ratio beside it, no ratio target).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, Optional, Sequence

import percentile
from raygroups.stack.runtime.ports import free_ports, free_run

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JGROUPS_JAR = "/usr/share/java/jgroups.jar"
JAVA_SRC = os.path.join(HERE, "java", "JgBench.java")
MEMBER = os.path.join(HERE, "compare_member.py")
SETUP = "sudo apt-get install -y libjgroups-java serf default-jdk-headless"

TARGETS = {
    "tput_1k_3_udp": 1.0,      # raygroups / JGroups msg/s, at least
    "tput_100b_3_udp": 0.8,
    "join_2nd": 0.25,          # raygroups / JGroups join time, at most
    "detect_p50": 0.3,         # raygroups / Serf detection p50, at most (5 and 10 members)
    "detect_p50_s": 0.3,       # and at most this many seconds, absolute
    "hang_p50_s": 2.0,         # SIGSTOP -> excluded at every survivor, p50 at most (s)
    "false_exclusions_10pct": 0,
}


# == pure helpers (tests/unit/test_compare_bench.py) ======================================
def summary(xs: Sequence[float]) -> dict:
    """Median, min, max and count of a list of figures (NaN-free)."""
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0, "all": []}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs),
            "all": list(xs)}


def pct(xs: Sequence[float], q: float) -> Optional[float]:
    """Nearest-rank percentile (bench/percentile.py); None when there are no figures."""
    return percentile.pct(xs, q, None)


def ratio(ours: Optional[float], peer: Optional[float]) -> Optional[float]:
    """ours / peer, None when either is missing or the peer's figure is zero."""
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


def target_met(r: Optional[float], bound: float, higher_is_better: bool) -> Optional[bool]:
    if r is None:
        return None
    return r >= bound if higher_is_better else r <= bound


def verdict(ok: Optional[bool]) -> str:
    return "n/a (peer missing)" if ok is None else ("met" if ok else "NOT met")


def json_lines(text: str) -> list:
    """The JSON objects among a process's output lines (JGroups also prints banners)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def throughput(results: Sequence[dict], count: int) -> float:
    """msg/s from the members' result lines: count / (slowest last_recv - first_send)."""
    first = [r["first_send"] for r in results if "first_send" in r]
    last = [r["last_recv"] for r in results if "last_recv" in r]
    if len(first) != 1 or not last:
        raise ValueError(f"incomplete results: {results}")
    return count / ((max(last) - first[0]) / 1e9)


def jgroups_config(xml: str, kind: str, bind_addr: str = "127.0.0.1", mcast_port: int = 0,
                   mcast_addr: Optional[str] = None, tcp_port: int = 0,
                   tcp_range: int = 10) -> str:
    """The stock udp.xml / tcp.xml with bind_addr set on the transport, and (UDP) a private
    multicast group and port, or (TCP) the listen port range and a TCPPING host list
    covering it, so concurrent runs never meet. Every other setting stays as shipped."""
    transport = "UDP" if kind == "udp" else "TCP"
    m = re.search(r"<%s\b" % transport, xml)
    if m is None:
        raise ValueError(f"no <{transport}> element")
    attrs = {"bind_addr": bind_addr}
    if kind == "udp":
        if mcast_port:
            attrs["mcast_port"] = str(mcast_port)
        if mcast_addr:
            attrs["mcast_addr"] = mcast_addr
    else:
        if tcp_port:
            attrs["bind_port"] = str(tcp_port)
            attrs["port_range"] = str(tcp_range)
    end = xml.index("/>", m.end())
    element = xml[m.start():end]
    for key, value in attrs.items():
        pat = re.compile(r'(\s)%s="[^"]*"' % key)
        if pat.search(element):
            element = pat.sub(lambda mm: f'{mm.group(1)}{key}="{value}"', element)
        else:
            element = element.replace(f"<{transport}", f'<{transport} {key}="{value}"', 1)
    xml = xml[:m.start()] + element + xml[end:]
    if kind == "tcp" and tcp_port:
        hosts = f"{bind_addr}[{tcp_port}]"
        ping = re.search(r"<TCPPING\b[^>]*/>", xml, re.S)
        if ping is None:
            raise ValueError("no <TCPPING> element")
        el = re.sub(r'initial_hosts="[^"]*"', f'initial_hosts="{hosts}"', ping.group(0))
        el = re.sub(r'port_range="[^"]*"', f'port_range="{tcp_range}"', el)
        xml = xml[:ping.start()] + el + xml[ping.end():]
    return xml


def serf_event(line: str) -> Optional[tuple]:
    """("join"|"failed"|"leave", member name) from a Serf agent log line, else None.
    E.g. ``2024/01/01 12:00:00 [INFO] serf: EventMemberFailed: s3 127.0.0.1``."""
    m = re.search(r"serf: EventMember(Join|Failed|Leave): (\S+)", line)
    if m is None:
        return None
    return {"Join": "join", "Failed": "failed", "Leave": "leave"}[m.group(1)], m.group(2)


# == processes =============================================================================
class Proc:
    """A child process whose stdout lines are collected, each stamped with time.time() on
    arrival, by a reader thread. Its own process group, so ``kill`` gets everything."""

    def __init__(self, argv: list, cwd: str = REPO, env: Optional[dict] = None,
                 stderr_path: Optional[str] = None):
        self.argv = argv
        self.lines: list = []
        self.cond = threading.Condition()
        err = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
        self.p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        if stderr_path:
            err.close()
        self.stderr_path = stderr_path
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        for raw in self.p.stdout:
            now = time.time()
            with self.cond:
                self.lines.append((now, raw.decode(errors="replace").rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def objects(self) -> list:
        with self.cond:
            text = "\n".join(line for _, line in self.lines)
        return json_lines(text)

    def wait_for(self, pred: Callable[["Proc"], bool], timeout: float, what: str):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if pred(self):
                    return
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self.t.is_alive()):
                    tail = "\n".join(l for _, l in self.lines[-20:])
                    raise TimeoutError(f"{what}: not within {timeout:.0f} s "
                                       f"(exit {self.p.poll()}): {' '.join(self.argv[:4])}\n"
                                       f"{tail}\n{self.stderr_tail()}")
                self.cond.wait(min(left, 0.2))

    def wait_object(self, key: str, timeout: float, what: str = "") -> dict:
        """The first JSON line holding ``key`` (or "error", which raises)."""
        found: list = []

        def pred(p: "Proc") -> bool:
            for o in json_lines("\n".join(line for _, line in p.lines)):
                if key in o or "error" in o:
                    found.append(o)
                    return True
            return False
        self.wait_for(pred, timeout, what or key)
        if "error" in found[0] and key not in found[0]:
            raise RuntimeError(f"{what or key}: {found[0]['error']}\n{self.stderr_tail()}")
        return found[0]

    def stderr_tail(self) -> str:
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def write(self, line: str) -> None:
        try:
            self.p.stdin.write((line + "\n").encode())
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def close_stdin(self) -> None:
        try:
            self.p.stdin.close()
        except OSError:
            pass

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 5.0) -> None:
        """Close stdin (the members exit on EOF), then SIGKILL what is left."""
        self.close_stdin()
        try:
            self.p.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def stop_all(procs: Sequence[Proc], grace: float = 5.0) -> None:
    for p in procs:
        p.close_stdin()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        p.kill()
        try:
            p.p.wait(10)
        except subprocess.TimeoutExpired:
            pass


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cluster_name(tag: str) -> str:
    return f"cmp-{tag}-{uuid.uuid4().hex[:6]}"


# == peers =================================================================================
class Peers:
    """What is installed: a JDK (java + javac) with the JGroups jar, and serf."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.java = shutil.which("java")
        self.javac = shutil.which("javac")
        self.serf = shutil.which("serf")
        self.jar = JGROUPS_JAR if os.path.exists(JGROUPS_JAR) else None
        self.classes: Optional[str] = None
        self.missing: list = []
        if not (self.java and self.javac):
            self.missing.append("a JDK (java, javac)")
        if not self.jar:
            self.missing.append(f"JGroups 2.12 ({JGROUPS_JAR}, package libjgroups-java)")
        if not self.serf:
            self.missing.append("serf (package serf)")
        self.jgroups_version = None
        self.serf_version = None
        if self.serf:
            try:
                self.serf_version = subprocess.run([self.serf, "version"], capture_output=True,
                                                   text=True, timeout=10).stdout.split("\n")[0]
                pkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "serf"],
                                     capture_output=True, text=True, timeout=10).stdout
                if pkg:  # Debian's 0.9.4 build reports itself as 0.8.2-dev
                    self.serf_version += f" (package {pkg})"
            except (OSError, subprocess.SubprocessError):
                pass
        if self.jar:
            self.compile_version()

    @property
    def jgroups(self) -> bool:
        return bool(self.java and self.javac and self.jar)

    def compile_java(self) -> str:
        """javac bench/java/JgBench.java into a temporary directory (never the repo)."""
        if self.classes is None:
            out = os.path.join(self.tmp, "classes")
            os.makedirs(out, exist_ok=True)
            r = subprocess.run([self.javac, "-nowarn", "-cp", self.jar, "-d", out, JAVA_SRC],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"javac failed:\n{r.stdout}\n{r.stderr}")
            self.classes = out
        return self.classes

    def compile_version(self) -> None:
        try:
            import zipfile
            with zipfile.ZipFile(self.jar) as z:
                mf = z.read("META-INF/MANIFEST.MF").decode(errors="replace")
            m = re.search(r"(?:Bundle|Implementation)-Version:\s*(\S+)", mf)
            self.jgroups_version = m.group(1) if m else None
        except (OSError, KeyError, ValueError):
            pass

    def jgroups_xml(self, kind: str, **kw) -> str:
        """Write a per-run copy of the jar's udp.xml/tcp.xml; returns its path."""
        import zipfile
        with zipfile.ZipFile(self.jar) as z:
            xml = z.read(f"{kind}.xml").decode()
        path = os.path.join(self.tmp, f"{kind}-{uuid.uuid4().hex[:8]}.xml")
        with open(path, "w") as f:
            f.write(jgroups_config(xml, kind, **kw))
        return path

    def java_argv(self, *args) -> list:
        return [self.java, "-Djava.net.preferIPv4Stack=true", "-Xss512k",
                "-cp", f"{self.compile_java()}:{self.jar}", "JgBench", *map(str, args)]


def rg_argv(mode: str, *args, loop: str = "asyncio") -> list:
    return [sys.executable, MEMBER, mode, "--loop", loop, *map(str, args)]


# == throughput ============================================================================
def tput_timeout(count: int) -> float:
    """Seconds a throughput run may take before it counts as stalled (2,000 msg/s)."""
    return 30.0 + count / 2000


def _collect_tput(procs: list, count: int, timeout: float) -> dict:
    """The figures of one run, or {"error": ...} when a member reported one or stalled."""
    results = []
    try:
        for i, p in enumerate(procs):
            p.wait_object("last_recv", timeout + 60, f"member {i}: all {count} messages")
    except (RuntimeError, TimeoutError) as e:
        return {"error": str(e).split("\n")[0][:300]}
    for p in procs:
        results.extend(o for o in p.objects() if "first_send" in o or "last_recv" in o)
    cpu = [r["cpu_s"] for r in results if "cpu_s" in r]
    return {"msgs_per_s": throughput(results, count),
            "cpu_us_per_msg": 1e6 * sum(cpu) / count if len(cpu) == len(procs) else None}


def rg_tput(n: int, kind: str, size: int, count: int, warmup: int, tmp: str,
            loop: str = "asyncio") -> dict:
    ports = free_ports(n)
    mport = free_ports(1)[0]
    cluster = cluster_name("tput")
    procs = []
    timeout = tput_timeout(count)
    try:
        for i in range(n):
            procs.append(Proc(rg_argv("tput", "--cluster", cluster, "--index", i, "--members", n,
                                      "--ports", ",".join(map(str, ports)), "--transport", kind,
                                      "--size", size, "--count", count, "--warmup", warmup,
                                      "--mcast-port", mport, "--timeout", timeout, loop=loop),
                              stderr_path=os.path.join(tmp, f"rg-tput-{i}.err")))
            time.sleep(0.05)
        return _collect_tput(procs, count, timeout)
    finally:
        stop_all(procs)


def jg_tput(peers: Peers, n: int, kind: str, size: int, count: int, warmup: int,
            tmp: str) -> dict:
    if kind == "udp":
        xml = peers.jgroups_xml("udp", mcast_port=free_ports(1)[0])
    else:
        xml = peers.jgroups_xml("tcp", tcp_port=free_run(10), tcp_range=10)
    cluster = cluster_name("tput")
    procs = []
    timeout = tput_timeout(count)
    try:
        for i in range(n):
            procs.append(Proc(peers.java_argv("tput", xml, cluster, i, n, size, count, warmup,
                                              int(timeout)),
                              stderr_path=os.path.join(tmp, f"jg-tput-{i}.err")))
            time.sleep(0.05)
        return _collect_tput(procs, count, timeout)
    finally:
        stop_all(procs)


# == join time =============================================================================
def _join_trials(joiner: Proc, trials: int, what: str) -> list:
    joiner.wait_object("done", 60 + 15 * trials, what)
    objs = joiner.objects()
    errors = [o["error"] for o in objs if "error" in o]
    if errors:
        raise RuntimeError(f"{what}: {errors[0]}")
    return [o["join_ns"] / 1e6 for o in objs if "join_ns" in o]


def rg_join(existing: int, trials: int, tmp: str, loop: str = "asyncio") -> list:
    """Milliseconds of connect() for member existing+1, ``trials`` times."""
    ports = free_ports(existing + 1)
    mport = free_ports(1)[0]
    cluster = cluster_name("join")
    common = ["--cluster", cluster, "--ports", ",".join(map(str, ports)), "--mcast-port", mport]
    group = Proc(rg_argv("group", *common, "--members", existing, loop=loop),
                 stderr_path=os.path.join(tmp, "rg-group.err"))
    procs = [group]
    try:
        group.wait_object("ready", 60, f"raygroups group of {existing}")
        joiner = Proc(rg_argv("join", *common, "--index", existing, "--trials", trials,
                              "--expect", existing + 1, loop=loop),
                      stderr_path=os.path.join(tmp, "rg-join.err"))
        procs.append(joiner)
        return _join_trials(joiner, trials, f"raygroups join of member {existing + 1}")
    finally:
        stop_all(procs)


def jg_join(peers: Peers, existing: int, trials: int, tmp: str) -> list:
    xml = peers.jgroups_xml("udp", mcast_port=free_ports(1)[0])
    cluster = cluster_name("join")
    group = Proc(peers.java_argv("group", xml, cluster, existing),
                 stderr_path=os.path.join(tmp, "jg-group.err"))
    procs = [group]
    try:
        group.wait_object("ready", 60 + 5 * existing, f"JGroups group of {existing}")
        joiner = Proc(peers.java_argv("join", xml, cluster, trials, existing + 1),
                      stderr_path=os.path.join(tmp, "jg-join.err"))
        procs.append(joiner)
        return _join_trials(joiner, trials, f"JGroups join of member {existing + 1}")
    finally:
        stop_all(procs)


# == membership: raygroups members and Serf agents =========================================
def exclusions(views_by_member: dict, since: float) -> set:
    """(view id, member) for every member that a view installed after ``since`` removed
    from the installing member's previous view. A singleton view a member forms for itself
    after being excluded follows from an exclusion already counted, so it is skipped."""
    out = set()
    for who, views in views_by_member.items():
        prev = None
        for v in views:
            if prev is not None and v["t"] >= since and v["members"] != [who]:
                for m in prev["members"]:
                    if m not in v["members"]:
                        out.add((tuple(v["view_id"]), m))
            prev = v
    return out


def first_time(events: Sequence[dict], pred: Callable[[dict], bool],
               since: float) -> Optional[float]:
    """time of the first event at or after ``since`` that satisfies ``pred``."""
    for e in events:
        if e["t"] >= since and pred(e):
            return e["t"]
    return None


class RgGroup:
    """raygroups members, one process each (``compare_member.py member``), on 127.0.0.1 with
    static discovery; member i keeps its port across restarts (a fresh process is a fresh
    address). Views are read from the members' JSON lines (each stamped with time.time())."""

    def __init__(self, n: int, tag: str, tmp: str, preset: str = "lan",
                 drop_up: float = 0.0, membership: Optional[str] = None):
        self.n, self.tmp = n, tmp
        self.ports = free_ports(n)
        self.mport = free_ports(1)[0]
        self.cluster = cluster_name(tag)
        self.extra = ["--preset", preset]
        if drop_up:
            self.extra += ["--drop-up", drop_up]
        if membership:
            self.extra += ["--membership", membership]
        self.names = [f"m{i}" for i in range(n)]
        self.procs: list = [None] * n
        self.all: list = []
        self.seq = 0

    def spawn(self, i: int, wait_go: bool = False) -> Proc:
        self.seq += 1
        argv = rg_argv("member", "--cluster", self.cluster, "--ports",
                       ",".join(map(str, self.ports)), "--index", i, "--name", self.names[i],
                       "--mcast-port", self.mport, *self.extra,
                       *(["--wait-go"] if wait_go else []))
        p = Proc(argv, stderr_path=os.path.join(self.tmp, f"rg-{self.cluster}-{self.seq}.err"))
        self.procs[i] = p
        self.all.append(p)
        return p

    def views(self, i: int) -> list:
        return [o for o in self.procs[i].objects() if o.get("event") == "view"]

    def members(self, i: int) -> Optional[list]:
        v = self.views(i)
        return v[-1]["members"] if v else None

    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                state = "; ".join(f"{self.names[i]}: {self.members(i)}"
                                  for i in range(self.n) if self.procs[i] is not None)
                raise TimeoutError(f"raygroups {self.n}: no {what} in {timeout:.0f} s ({state})")
            time.sleep(0.01)

    def wait_full(self, idx: Sequence[int], names: Sequence[str], timeout: float = 60) -> None:
        want = sorted(names)
        self.wait(lambda: all(sorted(self.members(i) or []) == want for i in idx), timeout,
                  f"view of {len(want)}")

    def start(self) -> None:
        for i in range(self.n):
            self.spawn(i)
            time.sleep(0.2)
        self.wait_full(range(self.n), self.names)

    def kill(self, i: int) -> float:
        t = self.signal(i, signal.SIGKILL)
        self.procs[i].p.wait(10)
        return t

    def signal(self, i: int, sig: int) -> float:
        """Send ``sig`` to member i's process group; returns time.time() just before."""
        t = time.time()
        self.procs[i].kill(sig)
        return t

    def close(self) -> None:
        for p in self.all:
            p.kill(signal.SIGKILL)
        for p in self.all:
            try:
                p.p.wait(10)
            except subprocess.TimeoutExpired:
                pass


class SerfGroup:
    """Serf agents (LAN profile) on 127.0.0.1, one process each; each agent's log lines
    (``serf: EventMemberJoin/Failed/Leave: <name>``) are stamped with time.time() as they
    arrive, which gives the agent's own member list over time."""

    def __init__(self, serf: str, n: int, tmp: str):
        self.serf, self.n, self.tmp = serf, n, tmp
        self.ports = free_ports(n)
        self.rpc = free_ports(n)
        self.names: list = [f"s{i}" for i in range(n)]
        self.procs: list = [None] * n
        self.all: list = []
        self.incarnation = [0] * n

    def spawn(self, i: int, join: bool = True) -> Proc:
        self.incarnation[i] += 1
        if self.incarnation[i] > 1:
            self.names[i] = f"s{i}r{self.incarnation[i] - 1}"
            self.rpc[i] = free_ports(1)[0]
        argv = [self.serf, "agent", f"-node={self.names[i]}", f"-bind=127.0.0.1:{self.ports[i]}",
                f"-rpc-addr=127.0.0.1:{self.rpc[i]}", "-profile=lan", "-log-level=info"]
        if join:
            others = [k for k in range(self.n) if k != i and self.procs[k] is not None
                      and self.procs[k].p.poll() is None]
            if others:
                argv.append(f"-join=127.0.0.1:{self.ports[others[0]]}")
        p = Proc(argv, stderr_path=os.path.join(self.tmp, f"serf-{self.names[i]}.err"))
        self.procs[i] = p
        self.all.append(p)
        return p

    def events(self, i: int) -> list:
        """[{"t", "kind", "name"}] from agent i's log."""
        p = self.procs[i]
        with p.cond:
            lines = list(p.lines)
        out = []
        for t, line in lines:
            ev = serf_event(line)
            if ev is not None:
                out.append({"t": t, "kind": ev[0], "name": ev[1]})
        return out

    def alive(self, i: int) -> set:
        live: set = set()
        for e in self.events(i):
            if e["kind"] == "join":
                live.add(e["name"])
            else:
                live.discard(e["name"])
        return live

    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                state = "; ".join(f"{self.names[i]}: {sorted(self.alive(i))}"
                                  for i in range(self.n) if self.procs[i] is not None)
                raise TimeoutError(f"serf {self.n}: no {what} in {timeout:.0f} s ({state})")
            time.sleep(0.01)

    def wait_full(self, idx: Sequence[int], timeout: float = 60) -> None:
        want = {self.names[k] for k in idx}
        self.wait(lambda: all(self.alive(i) == want for i in idx), timeout,
                  f"list of {len(want)}")

    def start(self) -> None:
        for i in range(self.n):
            self.spawn(i)
            if i == 0:
                self.wait(lambda: self.names[0] in self.alive(0), 30, "first agent")
            time.sleep(0.2)
        self.wait_full(range(self.n))

    def members_cli(self, i: int) -> dict:
        """name -> status, from ``serf members -rpc-addr=...`` at agent i."""
        r = subprocess.run([self.serf, "members", f"-rpc-addr=127.0.0.1:{self.rpc[i]}",
                            "-format=json"], capture_output=True, text=True, timeout=20)
        return {m["name"]: m["status"] for m in json.loads(r.stdout or "{}").get("members", [])}

    def rpc_join(self, i: int, target: int) -> float:
        """Agent i joins through agent ``target`` (the RPC join command ``serf join`` sends);
        returns time.time() just before the request went out."""
        import msgpack
        with socket.create_connection(("127.0.0.1", self.rpc[i]), timeout=10) as s:
            unpacker = msgpack.Unpacker(raw=False)

            def reply() -> dict:
                while True:
                    for obj in unpacker:
                        return obj
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionError("serf RPC closed")
                    unpacker.feed(data)
            s.sendall(msgpack.packb({"Command": "handshake", "Seq": 0}) +
                      msgpack.packb({"Version": 1}))
            h = reply()
            if h.get("Error"):
                raise RuntimeError(f"serf handshake: {h['Error']}")
            t0 = time.time()
            s.sendall(msgpack.packb({"Command": "join", "Seq": 1}) +
                      msgpack.packb({"Existing": [f"127.0.0.1:{self.ports[target]}"],
                                     "Replay": False}))
            h = reply()
            if h.get("Error"):
                raise RuntimeError(f"serf join: {h['Error']}")
            reply()  # {"Num": joined}
            return t0

    def kill(self, i: int) -> float:
        t = self.signal(i, signal.SIGKILL)
        self.procs[i].p.wait(10)
        return t

    def signal(self, i: int, sig: int) -> float:
        """Send ``sig`` to member i's process group; returns time.time() just before."""
        t = time.time()
        self.procs[i].kill(sig)
        return t

    def close(self) -> None:
        for p in self.all:
            p.kill(signal.SIGKILL)
        for p in self.all:
            try:
                p.p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def rg_excluded(g: RgGroup, victim: int, t0: float) -> list:
    """Every survivor's delay from ``t0`` until its view dropped the victim (s)."""
    name = g.names[victim]
    survivors = [i for i in range(g.n) if i != victim]
    g.wait(lambda: all(name not in (g.members(i) or [name]) for i in survivors), 60,
           f"view without {name}")
    return [first_time(g.views(i), lambda v: name not in v["members"], t0) - t0
            for i in survivors]


def rg_detect_trial(g: RgGroup, rng: random.Random) -> list:
    """kill -9 one member; every survivor's delay until its view dropped it (s)."""
    victim = rng.randrange(g.n)
    delays = rg_excluded(g, victim, g.kill(victim))
    g.spawn(victim)
    g.wait_full(range(g.n), g.names)
    return delays


def while_stopped(g, victim: int, excluded: Callable[..., list]) -> list:
    """SIGSTOP the victim, ``excluded(g, victim, t_stop)`` (the survivors' delays), then
    SIGCONT, even when that failed."""
    t_stop = g.signal(victim, signal.SIGSTOP)
    try:
        return excluded(g, victim, t_stop)
    finally:
        g.signal(victim, signal.SIGCONT)


def rg_hang_trial(g: RgGroup, rng: random.Random) -> list:
    """SIGSTOP one member; every survivor's delay until its view dropped it (s); SIGCONT,
    and wait until all n share one view again."""
    victim = rng.randrange(g.n)
    delays = while_stopped(g, victim, rg_excluded)
    g.wait(lambda: len({tuple(g.views(i)[-1]["view_id"]) for i in range(g.n)}) == 1
           and sorted(g.members(0)) == sorted(g.names), 60, "one view after SIGCONT")
    return delays


def serf_failed(g: SerfGroup, victim: int, t0: float) -> list:
    """Every other agent's delay from ``t0`` until it logged the victim failed (s)."""
    name = g.names[victim]
    survivors = [i for i in range(g.n) if i != victim]

    def failed_at(i: int) -> Optional[float]:
        return first_time(g.events(i), lambda e: e["kind"] == "failed" and e["name"] == name,
                          t0)
    g.wait(lambda: all(failed_at(i) is not None for i in survivors), 90, f"{name} failed")
    status = g.members_cli(survivors[0]).get(name)  # and `serf members` agrees
    if status != "failed":
        raise RuntimeError(f"serf members at {g.names[survivors[0]]}: {name} is {status!r}")
    return [failed_at(i) - t0 for i in survivors]


def serf_detect_trial(g: SerfGroup, rng: random.Random) -> list:
    victim = rng.randrange(g.n)
    delays = serf_failed(g, victim, g.kill(victim))
    g.spawn(victim)
    g.wait_full(range(g.n))
    return delays


def serf_hang_trial(g: SerfGroup, rng: random.Random) -> list:
    """SIGSTOP one agent until every other one logged it failed; SIGCONT: it refutes its
    death, and every agent lists all n again."""
    victim = rng.randrange(g.n)
    delays = while_stopped(g, victim, serf_failed)
    g.wait_full(range(g.n), timeout=90)
    return delays


def rg_converge_trial(g: RgGroup) -> float:
    """Members 0..n-2 up; member n-1 starts idle, joins at t0; seconds until all n list all
    n; then it leaves again."""
    j = g.n - 1
    p = g.spawn(j, wait_go=True)
    p.wait_object("event", 60, "joiner ready")
    t0 = time.time()
    p.write("go")
    want = sorted(g.names)
    g.wait_full(range(g.n), g.names)
    t = max(first_time(g.views(i), lambda v: sorted(v["members"]) == want, t0)
            for i in range(g.n))
    p.write("leave")
    g.wait_full(range(j), g.names[:j])
    p.stop()
    return t - t0


def serf_converge_trial(g: SerfGroup) -> float:
    j = g.n - 1
    p = g.spawn(j, join=False)
    deadline = time.monotonic() + 30
    while True:  # the agent logs its own join, then opens its RPC port
        try:
            with socket.create_connection(("127.0.0.1", g.rpc[j]), timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    name = g.names[j]
    old = [g.names[k] for k in range(j)]
    t0 = g.rpc_join(j, 0)

    def seen(i: int, who: str) -> Optional[float]:
        return first_time(g.events(i), lambda e: e["kind"] == "join" and e["name"] == who, t0)
    g.wait(lambda: all(seen(i, name) is not None for i in range(j))
           and all(seen(j, o) is not None for o in old), 60, f"{name} joined")
    t = max([seen(i, name) for i in range(j)] + [seen(j, o) for o in old])
    p.kill(signal.SIGINT)  # a graceful leave
    try:
        p.p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
    g.wait(lambda: all(name not in g.alive(i) for i in range(j)), 60, f"{name} left")
    return t - t0


def rg_false_exclusions(n: int, loss: float, seconds: float, tmp: str) -> dict:
    g = RgGroup(n, f"loss{n}", tmp, drop_up=loss)
    try:
        g.start()
        t0 = time.time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(2.0, max(0.0, end - time.monotonic())))
            dead = [i for i in range(n) if g.procs[i].p.poll() is not None]
            if dead:
                raise RuntimeError(f"members {dead} exited: {g.procs[dead[0]].stderr_tail()}")
        for i in range(n):
            g.procs[i].write("stats")
        g.wait(lambda: all(any(o.get("event") == "stats" for o in g.procs[i].objects())
                           for i in range(n)), 20, "stats")
        stats = [[o for o in g.procs[i].objects() if o.get("event") == "stats"][-1]["stats"]
                 for i in range(n)]
        found = exclusions({g.names[i]: g.views(i) for i in range(n)}, t0)
        swim = {k: sum(s.get("swim", {}).get(k, 0) for s in stats)
                for k in ("probes", "suspicions", "refutations", "dead")}
        dropped = sum(s.get("faults", {}).get("dropped_up", 0) for s in stats)
        received = sum(s.get("transport", {}).get("recv_packets", 0) for s in stats)
        one_view = len({tuple(g.views(i)[-1]["view_id"]) for i in range(n)}) == 1
        return {"members": n, "loss": loss, "seconds": round(time.time() - t0, 1),
                "false_exclusions": len(found), "excluded": sorted(map(list, found)),
                "swim": swim, "dropped_up": dropped, "received_packets": received,
                "one_view_at_end": one_view}
    finally:
        g.close()


# == the run ===============================================================================
def fmt_rate(s: dict) -> str:
    if not s or s.get("median") is None:
        return "-"
    return f"{s['median']:,.0f} ({s['min']:,.0f}-{s['max']:,.0f})"


def fmt_time(s: dict, unit: str = "ms") -> str:
    if not s or s.get("median") is None:
        return "-"
    k, d = (1000.0, 1) if unit == "ms" else (1.0, 2)
    return (f"{s['median'] * k:,.{d}f} ({s['min'] * k:,.{d}f}-{s['max'] * k:,.{d}f}) "
            f"{'ms' if unit == 'ms' else 's'}")


def fmt_ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.2f}x"


def row_record(kind: str, label: str, ours: list, peer: Optional[list], peer_name: str,
               higher_is_better: bool, target: Optional[float] = None,
               extra: Optional[dict] = None) -> dict:
    s_ours, s_peer = summary(ours), summary(peer or [])
    r = ratio(s_ours["median"], s_peer["median"])
    rec = {"kind": kind, "row": label, "raygroups": s_ours, "peer": peer_name,
           "peer_figures": s_peer if peer is not None else None, "ratio": r,
           "higher_is_better": higher_is_better}
    if target is not None:
        rec["target"] = target
        rec["target_met"] = target_met(r, target, higher_is_better)
    rec.update(extra or {})
    return rec


def alternate(n: int, ours: Callable[[], object], peer: Optional[Callable[[], object]],
              label: str) -> tuple:
    """n runs of each, alternating (ours first); each result or {"error": ...}."""
    a, b = [], []
    for k in range(n):
        for fn, out, who in ((ours, a, "raygroups"), (peer, b, "peer")):
            if fn is None:
                continue
            try:
                res = fn()
            except (RuntimeError, TimeoutError, OSError, ValueError) as e:
                res = {"error": str(e).split("\n")[0][:300]}
            out.append(res)
            shown = ([round(x, 4) for x in res] if isinstance(res, list) else
                     round(res, 4) if isinstance(res, float) else res)
            log(f"  {label} [{who} {k + 1}/{n}]: {shown}")
    return a, b


def run_throughput(args, peers: Peers, tmp: str, res: dict) -> None:
    count, warmup, reps = args.count, args.count // 5, args.repeat
    for size in (1000, 100):
        for n in (2, 3):
            for kind in ("udp", "tcp"):
                label = f"multicast {'1 KB' if size == 1000 else '100 B'}, {n} members, {kind.upper()}"
                ours = lambda: rg_tput(n, kind, size, count, warmup, tmp, args.loop)  # noqa: E731
                peer = (lambda: jg_tput(peers, n, kind, size, count, warmup, tmp)) \
                    if peers.jgroups else None  # noqa: E731
                a, b = alternate(reps, ours, peer, label)
                target = None
                if n == 3 and kind == "udp":
                    target = TARGETS["tput_1k_3_udp" if size == 1000 else "tput_100b_3_udp"]

                def ok(rs):
                    return [r["msgs_per_s"] for r in rs if "msgs_per_s" in r]

                def cpu(rs):
                    xs = [r["cpu_us_per_msg"] for r in rs if r.get("cpu_us_per_msg")]
                    return statistics.median(xs) if xs else None
                rec = row_record("throughput", label, ok(a), ok(b) if peer else None,
                                 "JGroups 2.12", True, target,
                                 {"size": size, "members": n, "transport": kind,
                                  "messages": count, "runs": {"raygroups": a, "peer": b},
                                  "cpu_us_per_msg": {"raygroups": cpu(a),
                                                     "peer": cpu(b) if peer else None},
                                  "failed_runs": {"raygroups": len(a) - len(ok(a)),
                                                  "peer": len(b) - len(ok(b))}})
                res["rows"].append(rec)


def run_join(args, peers: Peers, tmp: str, res: dict) -> None:
    blocks, per = (2, 3) if args.quick else (3, 5)
    for existing in (1, 4):
        label = f"join of the {'2nd' if existing == 1 else '5th'} member (connect)"
        a, b = alternate(blocks, lambda: rg_join(existing, per, tmp, args.loop),
                         (lambda: jg_join(peers, existing, per, tmp)) if peers.jgroups else None,
                         label)
        flat = lambda rs: [x / 1000 for r in rs if isinstance(r, list) for x in r]  # noqa
        rec = row_record("join", label, flat(a), flat(b) if peers.jgroups else None,
                         "JGroups 2.12", False, TARGETS["join_2nd"] if existing == 1 else None,
                         {"unit": "s", "members_before": existing,
                          "errors": [r for r in a + b if isinstance(r, dict)]})
        res["rows"].append(rec)


def paired_runs(g: RgGroup, s: Optional[SerfGroup], start: Callable[[], None], trials: int,
                ours: Callable[[], object], peer: Callable[[], object], label: str) -> tuple:
    """``start()`` the groups, then ``alternate`` runs of ours and (with a Serf group) the
    peer's; both groups are closed at the end."""
    try:
        start()
        return alternate(trials, ours, peer if s is not None else None, label)
    except (RuntimeError, TimeoutError, OSError) as e:
        log(f"  {label}: the groups did not form: {e}")
        return [{"error": str(e)[:300]}], []
    finally:
        g.close()
        if s is not None:
            s.close()


def detection_row(args, peers: Peers, tmp: str, res: dict, n: int, rng: random.Random,
                  label: str, kind: str, rg_trial, serf_trial) -> None:
    """One row: a raygroups group and a Serf group of n, trials alternating; the figure of a
    trial is its slowest survivor. kill -9 ("detection") has a ratio target and an
    absolute one, a hang ("hang") an absolute one."""
    trials = args.trials or (4 if args.quick else 12)
    g = RgGroup(n, f"{kind}{n}", tmp)
    s = SerfGroup(peers.serf, n, tmp) if peers.serf else None

    def start() -> None:
        g.start()
        if s is not None:
            s.start()
    a, b = paired_runs(g, s, start, trials, lambda: rg_trial(g, rng),
                       lambda: serf_trial(s, rng), label)
    slow = lambda rs: [max(r) for r in rs if isinstance(r, list)]  # noqa: E731
    flat = lambda rs: [x for r in rs if isinstance(r, list) for x in r]  # noqa: E731
    abs_target = TARGETS["detect_p50_s" if kind == "detection" else "hang_p50_s"]
    p50 = summary(slow(a))["median"]
    rec = row_record(kind, label, slow(a), slow(b) if s else None,
                     "Serf " + (peers.serf_version or ""), False,
                     TARGETS["detect_p50"] if kind == "detection" else None,
                     {"unit": "s", "members": n, "figure": "per trial, the slowest survivor",
                      "abs_target_s": abs_target,
                      "abs_target_met": p50 is not None and p50 <= abs_target,
                      "p99": {"raygroups": pct(slow(a), 0.99),
                              "peer": pct(slow(b), 0.99) if s else None},
                      "per_member_p50": {"raygroups": pct(flat(a), 0.5),
                                         "peer": pct(flat(b), 0.5) if s else None},
                      "errors": [r for r in a + b if isinstance(r, dict)]})
    res["rows"].append(rec)


def run_membership(args, peers: Peers, tmp: str, res: dict) -> None:
    rng = random.Random(args.seed)
    conv_trials = 3 if args.quick else 8
    for n in (5, 10):
        if "detect" in args.only:
            detection_row(args, peers, tmp, res, n, rng, f"crash detection (kill -9), {n} "
                          "members", "detection", rg_detect_trial, serf_detect_trial)
        if "hang" in args.only:
            detection_row(args, peers, tmp, res, n, rng, f"hang detection (SIGSTOP), {n} "
                          "members", "hang", rg_hang_trial, serf_hang_trial)
        if "converge" in args.only:
            label = f"join convergence, {n}th member joins {n - 1}"
            g = RgGroup(n, f"conv{n}", tmp)
            s = SerfGroup(peers.serf, n, tmp) if peers.serf else None

            def start_all_but_one(g=g, s=s) -> None:
                for i in range(n - 1):
                    g.spawn(i)
                    time.sleep(0.2)
                g.wait_full(range(n - 1), g.names[:n - 1])
                if s is not None:
                    for i in range(n - 1):
                        s.spawn(i)
                        time.sleep(0.2)
                    s.wait_full(range(n - 1))
            a, b = paired_runs(g, s, start_all_but_one, conv_trials,
                               lambda: rg_converge_trial(g), lambda: serf_converge_trial(s),
                               label)
            ok = lambda rs: [r for r in rs if isinstance(r, float)]  # noqa: E731
            rec = row_record("convergence", label, ok(a), ok(b) if s else None,
                             "Serf " + (peers.serf_version or ""), False, None,
                             {"unit": "s", "members": n,
                              "errors": [r for r in a + b if isinstance(r, dict)]})
            res["rows"].append(rec)


def run_loss(args, tmp: str, res: dict) -> None:
    seconds = args.loss_seconds or (30.0 if args.quick else 120.0)
    for n in (5, 10):
        log(f"  false exclusions: {n} members, 10% loss, {seconds:.0f} s")
        try:
            r = rg_false_exclusions(n, 0.10, seconds, tmp)
        except (RuntimeError, TimeoutError, OSError) as e:
            r = {"members": n, "loss": 0.1, "error": str(e)[:500], "false_exclusions": None}
        r["target"] = TARGETS["false_exclusions_10pct"]
        r["target_met"] = r.get("false_exclusions") == 0
        log(f"    {r}")
        res["false_exclusions"].append(r)


def print_report(res: dict) -> None:
    m = res["machine"]
    print(f"\nraygroups vs JGroups {res['versions'].get('jgroups') or '(missing)'} and "
          f"{res['versions'].get('serf') or 'Serf (missing)'} on loopback, "
          f"{'quick' if res['quick'] else 'full'} run: {m['cpus']} CPUs, Python {m['python']} "
          f"({res['loop']}), Java {m.get('java') or '-'}; load average {m['load_start']} at "
          f"the start, {m.get('load_end')} at the end. Each row alternates runs of both "
          f"systems; median (min-max).\n")
    print("| measurement | raygroups | peer | raygroups/peer | CPU µs/msg (rg / peer) | target |")
    print("|---|---|---|---|---|---|")
    for r in res["rows"]:
        if r["kind"] == "throughput":
            ours = fmt_rate(r["raygroups"]) + " msg/s"
            peer = (r["peer"] + ": " + fmt_rate(r["peer_figures"])) if r["peer_figures"] \
                else "(missing)"
            c = r["cpu_us_per_msg"]
            cpu = (f"{c['raygroups']:.1f} / " if c["raygroups"] else "- / ") + \
                (f"{c['peer']:.1f}" if c["peer"] else "-")
            fails = r["failed_runs"]
            if fails["raygroups"] or fails["peer"]:
                peer += f" [{fails['peer']} stalled]" if fails["peer"] else ""
                ours += f" [{fails['raygroups']} stalled]" if fails["raygroups"] else ""
        else:
            unit = "ms" if r["kind"] in ("join", "convergence") else "s"
            ours = fmt_time(r["raygroups"], unit)
            peer = (r["peer"].strip() + ": " + fmt_time(r["peer_figures"], unit)) \
                if r["peer_figures"] else "(missing)"
            cpu = ""
        tgt = []
        if "target" in r:
            sign = ">=" if r["higher_is_better"] else "<="
            tgt.append(f"{sign} {r['target']}x: {verdict(r['target_met'])}")
        if "abs_target_s" in r:
            tgt.append(f"p50 <= {r['abs_target_s']} s: {verdict(r['abs_target_met'])}")
        tgt = "; ".join(tgt)
        print(f"| {r['row']} | {ours} | {peer} | {fmt_ratio(r['ratio'])} | {cpu} | {tgt} |")
    for f in res["false_exclusions"]:
        fe = f.get("false_exclusions")
        detail = f.get("error") or (f"{f['seconds']:.0f} s, {f['dropped_up']:,} packets "
                                    f"dropped, {f['swim']['suspicions']} suspicions "
                                    f"refuted {f['swim']['refutations']}, one view at the "
                                    f"end: {f['one_view_at_end']}")
        print(f"| false exclusions at 10% loss, {f['members']} members | {fe} ({detail}) | "
              f"- | - | | zero: {verdict(f['target_met'])} |")
    print()
    det = [r for r in res["rows"] if r["kind"] == "detection"]
    fe_ok = all(f.get("target_met") for f in res["false_exclusions"]) \
        if res["false_exclusions"] else None
    if det:
        what = "detection p50 <= 0.3x Serf at 5 and 10 members with zero false exclusions at 10% loss"
        if fe_ok is None:
            print(f"{what}: n/a (false exclusions not measured in this run)")
        elif any(r.get("target_met") is None for r in det):
            print(f"{what}: {verdict(None)}")
        else:
            print(f"{what}: {verdict(fe_ok and all(r['target_met'] for r in det))}")
    for kind, what in (("detection", "kill -9 detection p50 <= 0.3 s"),
                       ("hang", "hang detection p50 <= 2 s")):
        rows = [r for r in res["rows"] if r["kind"] == kind]
        if rows:
            print(f"{what} at {' and '.join(str(r['members']) for r in rows)} members: "
                  f"{verdict(all(r['abs_target_met'] for r in rows))}")
    for r in res["rows"]:
        if "target" in r and r["kind"] not in ("detection", "hang"):
            sign = ">=" if r["higher_is_better"] else "<="
            print(f"{r['row']}: {fmt_ratio(r['ratio'])} {sign} {r['target']}x: "
                  f"{verdict(r['target_met'])}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true", help="fewer messages and trials")
    ap.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    ap.add_argument("--only", default="tput,join,detect,hang,converge,loss",
                    help="comma list of: tput,join,detect,hang,converge,loss")
    ap.add_argument("--count", type=int, help="messages per throughput run "
                    "(default 100,000; 20,000 with --quick)")
    ap.add_argument("--repeat", type=int, help="throughput runs per system and row "
                    "(default 3; 2 with --quick)")
    ap.add_argument("--trials", type=int,
                    help="kill -9 and SIGSTOP trials per system and group size")
    ap.add_argument("--loss-seconds", type=float, help="seconds of each 10%% loss run")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="event loop of the raygroups members (default asyncio)")
    ap.add_argument("--seed", type=int, default=1, help="which members get killed")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    args.only = set(filter(None, args.only.split(",")))
    args.count = args.count or (20_000 if args.quick else 100_000)
    args.repeat = args.repeat or (2 if args.quick else 3)
    tmp = tempfile.mkdtemp(prefix="rg-compare-")
    peers = Peers(tmp)
    if peers.missing:
        print(f"peers missing: {', '.join(peers.missing)}. Their rows are skipped; to "
              f"include them, install them once:\n    {SETUP}\n", flush=True)
    java = None
    if peers.jgroups:
        try:
            peers.compile_java()
            r = subprocess.run([peers.java, "-version"], capture_output=True, text=True)
            java = (r.stderr.splitlines() or [""])[0]
        except (RuntimeError, OSError) as e:
            print(f"cannot compile bench/java/JgBench.java ({e}); JGroups rows skipped")
            peers.jar = None
    res: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "java": java,
                    "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "versions": {"jgroups": peers.jgroups_version if peers.jgroups else None,
                     "serf": peers.serf_version},
        "quick": args.quick, "loop": args.loop, "targets": TARGETS,
        "settings": {"messages": args.count, "warmup": args.count // 5,
                     "repeat": args.repeat, "only": sorted(args.only)},
        "rows": [], "false_exclusions": []}
    started = time.monotonic()
    try:
        if "tput" in args.only:
            log("throughput (raygroups UDP/TCP vs JGroups udp.xml/tcp.xml)")
            run_throughput(args, peers, tmp, res)
        if "join" in args.only:
            log("join time (raygroups vs JGroups udp.xml)")
            run_join(args, peers, tmp, res)
        if args.only & {"detect", "hang", "converge"}:
            log("crash and hang detection, join convergence (raygroups lan vs Serf lan)")
            run_membership(args, peers, tmp, res)
        if "loss" in args.only:
            log("false exclusions at 10% loss (raygroups lan, fault layer)")
            run_loss(args, tmp, res)
    finally:
        res["machine"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        res["wall_s"] = round(time.monotonic() - started, 1)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print_report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
