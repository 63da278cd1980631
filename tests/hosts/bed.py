"""Ray on hosts in network namespaces, with a group and a client on every host, and the
faults of the campaign.

``HostCluster(nodes)`` builds a ``RayHosts(nodes + 1)`` bed (tests/raybed.py: a namespace, an
sshd, a private ``/tmp/ray`` and PID namespace per host). Host 0 is the operator's machine;
hosts 1..nodes run Ray: host 1 the head, started with ``ray start`` over SSH (as an operator
or the cluster launcher would), with GCS health checks every second (a silent node is
declared dead in about 8-16 s instead of Ray's 30-60 s, so a campaign schedule sees Ray's
verdicts in seconds; ``health`` sets others) and a raylet that gives up on an unreachable GCS after
``gcs_reconnect_s``. The group is launched from the head with ``follow_nodes=True`` (a member
on every node, on restarted hosts too), discovery in Ray's KV and the even-split tie-breaker; a client (tests/hosts/client.py) runs on every Ray
host and records its operations in ``<tmp>/hist-<k>-<n>.jsonl``.

With ``gcs_ft`` (the default, the configuration docs/architecture.md recommends), Ray's GCS
keeps its state in a Redis server on host 0 (Debian's redis-server, password made for the
run): a head host that is killed and booted again (``restart_head``) takes the cluster back,
and the workers' raylets, members and clients live through it.

Faults: ``partition`` (nftables, tests/netns.py), ``drop``, ``heal``; ``kill_host`` (every
process of the host, sshd included: the machine loses power) and ``boot_host`` (sshd, Ray,
the client again: the machine comes back); ``stop_host``/``cont_host`` (SIGSTOP/SIGCONT of
every process of the host); ``stop_raylet``/``cont_raylet`` (its raylet alone). After a
heal, ``repair()`` boots every host whose raylet is gone (Ray stopped it: its node was
declared dead, or it lost the GCS for too long), as an operator or autoscaler would.
"""
from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import sys
import time
from typing import Optional

from ..raybed import RayHosts

HEAD = 1
HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
          "health_check_failure_threshold": 8, "health_check_initial_delay_ms": 2000}
"""A silent node declared dead after about 8-16 s (Ray's defaults: 30-60 s); shorter ones
declared busy nodes of a loaded 2-core machine dead."""


class HostCluster:
    def __init__(self, nodes: int = 3, gcs_reconnect_s: int = 30, group: Optional[str] = None,
                 health: Optional[dict] = None, gcs_ft: bool = True, pipeline: bool = False):
        self.nodes = nodes
        self.health = health or HEALTH
        self.redis_password = secrets.token_hex(16) if gcs_ft else None
        self.bed = RayHosts(nodes + 1)
        self.group = group or f"hosts{os.getpid()}"
        self.gcs_reconnect_s = gcs_reconnect_s
        self.clients: dict = {}      # name -> Popen of a client (the pipeline's included)
        self.pipeline = pipeline
        self.boots: dict = {}        # host -> how often it (re)started
        self.stopped: set = set()    # hosts (or raylets, as -k) under SIGSTOP

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "HostCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def tmp(self) -> str:
        return self.bed.tmp

    @property
    def hosts(self) -> list:
        return list(range(1, self.nodes + 1))

    def addr(self, k: int) -> str:
        return self.bed.addr(k)

    def start(self) -> None:
        self.bed.start()
        try:
            if self.redis_password is not None:
                self._start_redis()
            for k in self.hosts:
                self._ray_start(k)
            self._launch()
            for k in self.hosts:
                self._start_client(k)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.heal()
        for k in list(self.stopped):
            self._signal_pids(abs(k), signal.SIGCONT, raylet=k < 0)
        self.stopped.clear()
        with open(self.stop_file, "w"):
            pass
        self.bed.close()

    @property
    def stop_file(self) -> str:
        return os.path.join(self.tmp, "stop-clients")

    @property
    def sink(self) -> str:
        """The Spark pipeline's output (``pipeline=True``: tests/hosts/pipeline.py)."""
        return os.path.join(self.tmp, "pipeline-out")

    # -- Ray and the group --------------------------------------------------------------
    def _ssh(self, k: int, command: str, timeout: float = 120.0):
        r = self.bed.ssh(k, command, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"host {k}: {command[:80]} failed ({r.returncode}): "
                               f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
        return r

    def _start_redis(self) -> None:
        """Redis for the GCS's state, on host 0 (the head's side of every partition)."""
        conf = os.path.join(self.tmp, "redis.conf")
        with open(conf, "w") as f:  # 0600: it holds the password
            os.chmod(conf, 0o600)
            f.write(f"bind {self.addr(0)}\nport 6380\nrequirepass {self.redis_password}\n"
                    f"save \"\"\nappendonly no\ndir {self.tmp}\n")
        self.bed.lab.spawn(0, [shutil.which("redis-server") or "redis-server", conf],
                           name="redis")
        deadline = time.monotonic() + 20
        ping = ["redis-cli", "-h", self.addr(0), "-p", "6380", "--no-auth-warning", "-a",
                self.redis_password, "ping"]
        while self.bed.lab.run(0, ping).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.2)

    def _ray_start(self, k: int) -> None:
        ray = f"{self.bed.venv}/bin/ray"
        env = "RAY_AUTH_MODE=token RAY_gcs_rpc_server_reconnect_timeout_s=" \
              f"{self.gcs_reconnect_s}"
        if k == HEAD:
            conf = shlex.quote(json.dumps(self.health))
            ft = "" if self.redis_password is None else (
                f"RAY_REDIS_ADDRESS={self.addr(0)}:6380 ")
            auth = "" if self.redis_password is None else (
                f" --redis-username default --redis-password {self.redis_password}")
            cmd = (f"{ft}{env} {ray} start --head --port=6379 --node-ip-address={self.addr(k)} "
                   f"--num-cpus=1 --include-dashboard=false --system-config={conf}{auth}")
        else:
            cmd = (f"{env} {ray} start --address={self.addr(HEAD)}:6379 "
                   f"--node-ip-address={self.addr(k)} --num-cpus=1")
        self._ssh(k, f"{ray} stop --force >/dev/null 2>&1; {cmd}", timeout=180)
        self.boots[k] = self.boots.get(k, 0) + 1

    def driver(self, k: int, code: str, timeout: float = 120.0):
        """Run Python ``code`` on host k, connected to Ray (``ray.init(address="auto")``
        done, ``Group`` imported); its stdout."""
        pre = ("import ray, json; from raygroups.actors import Group; "
               "ray.init(address='auto', logging_level='ERROR', log_to_driver=False)\n")
        path = os.path.join(self.tmp, f"driver-{time.monotonic_ns()}.py")
        with open(path, "w") as f:
            f.write(pre + code)
        return self._ssh(k, f"cd {shlex.quote(_repo())} && {self.bed.venv}/bin/python {path}",
                         timeout=timeout).stdout

    def _launch(self) -> None:
        # the configuration docs/architecture.md recommends for a group this small: the
        # even-split tie-breaker, its lease in Ray's KV (a primary view of two that loses one
        # to Ray's verdict is primary again once its survivor holds the lease)
        self.driver(HEAD, f"Group.launch({self.group!r}, 1, follow_nodes=True, timeout=90, "
                          "discovery='ray-kv://', "
                          "stack_options={'primary__tie_breaker': 'store'})", timeout=180)

    def _start_client(self, k: int) -> None:
        n = self.boots.get(k, 0)
        out = os.path.join(self.tmp, f"hist-{k}-{n}.jsonl")
        self._spawn(k, f"tests.hosts.client --group {self.group} --out {out} "
                       f"--stop {self.stop_file} --seed {k * 1000 + n}", out, f"client{k}")
        if k == HEAD and self.pipeline:  # started again whenever it exits non-zero
            out = os.path.join(self.tmp, f"hist-pipeline-{n}.jsonl")
            self._spawn(k, f"tests.hosts.pipeline --group {self.group} --out {out} "
                           f"--sink {self.sink} --stop {self.stop_file}", out, "pipeline",
                        again=True)

    def _spawn(self, k: int, module_args: str, out: str, name: str,
               again: bool = False) -> None:
        """``python -m <module_args>`` on host k over SSH, its output in ``<out>.log``;
        ``again``: started again until it exits 0."""
        run = f"{self.bed.venv}/bin/python -m {module_args} >> {out}.log 2>&1"
        cmd = f"cd {shlex.quote(_repo())} && " + (
            f"until {run}; do sleep 1; done" if again else f"exec {run}")
        self.clients[name] = self.bed.lab.spawn(k, ["ssh", "-i", os.path.join(self.tmp, "id"),
                                                    "-o", "BatchMode=yes", "-o",
                                                    "StrictHostKeyChecking=no", "-o",
                                                    "UserKnownHostsFile=/dev/null", "-o",
                                                    "LogLevel=ERROR", f"root@{self.addr(k)}",
                                                    cmd], name=name)

    def histories(self) -> list:
        """Every client's records, all hosts and boots."""
        out = []
        for name in sorted(os.listdir(self.tmp)):
            if name.startswith("hist-") and name.endswith(".jsonl"):
                with open(os.path.join(self.tmp, name)) as f:
                    for line in f:
                        try:
                            out.append(json.loads(line))
                        except ValueError:
                            pass  # a line cut by a kill
        return out

    def raylet_alive(self, k: int) -> bool:
        return any("raylet" in c.split(" ")[0] for c in self.bed.commands(k))

    # -- faults -------------------------------------------------------------------------
    def partition(self, groups: list, bridges: bool = False) -> None:
        """Host groups (host 0, the operator, goes with the head); ``bridges``: a host may
        be in two groups and see both."""
        groups = [list(g) + ([0] if HEAD in g else []) for g in groups]
        self.bed.lab.partition(groups, bridges=bridges)

    def drop(self, k: int, percent: float) -> None:
        self.bed.lab.drop(k, percent)

    def heal(self) -> None:
        try:
            self.bed.lab.clear()
        except Exception:
            pass  # a closed lab

    def kill_host(self, k: int) -> None:
        self.bed.kill_host(k)

    def restart_head(self) -> None:
        """The head's machine loses power and comes back (with ``gcs_ft``, the GCS reloads
        the cluster from Redis)."""
        self.kill_host(HEAD)
        self.boot_host(HEAD)

    def boot_host(self, k: int) -> None:
        """The machine is back: sshd, Ray, the client (its member comes from the group's
        node follower)."""
        self.bed.restart_sshd(k)
        self._ray_start(k)
        self._start_client(k)

    def _signal_pids(self, k: int, sig: int, raylet: bool = False) -> int:
        n = 0
        for pid in self.bed.pids(k):
            if raylet:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if b"raylet" not in f.read().split(b"\0")[0]:
                            continue
                except OSError:
                    continue
            try:
                os.kill(pid, sig)
                n += 1
            except ProcessLookupError:
                pass
        return n

    def stop_host(self, k: int) -> None:
        self._signal_pids(k, signal.SIGSTOP)
        self.stopped.add(k)

    def cont_host(self, k: int) -> None:
        self._signal_pids(k, signal.SIGCONT)
        self.stopped.discard(k)

    def stop_raylet(self, k: int) -> None:
        self._signal_pids(k, signal.SIGSTOP, raylet=True)
        self.stopped.add(-k)

    def cont_raylet(self, k: int) -> None:
        self._signal_pids(k, signal.SIGCONT, raylet=True)
        self.stopped.discard(-k)

    def repair(self) -> list:
        """Boot every host whose raylet is gone; the hosts booted."""
        booted = []
        for k in self.hosts:
            if not self.raylet_alive(k):
                self.kill_host(k)
                self.boot_host(k)
                booted.append(k)
        return booted


def _repo() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


if __name__ == "__main__":  # a manual look: python -m tests.hosts.bed
    with HostCluster() as c:
        print(c.driver(HEAD, f"print(Group.attach({c.group!r}).member_names())"))
        sys.stdout.flush()
