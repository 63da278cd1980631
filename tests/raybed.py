"""A multi-host test bed for ``ray up``: hosts in network namespaces, each with its own sshd.

``RayHosts(n)`` builds a ``NetLab(n)`` (tests/netns.py: a namespace per host on one bridge,
10.213.<lab>.<k+1>) and makes each host look like a machine of its own:

* host 0 is the operator's machine (where ``ray up`` runs); hosts 1..n-1 are cluster nodes,
  each with an sshd (Debian's openssh-server) listening on its own address, accepting only
  a key made for this run (``ssh-keygen``, in the lab's directory, 0600);
* each host has a private ``/tmp/ray`` (a mount namespace with a bind mount; Ray keeps its
  sessions, sockets and the local provider's cluster state there, durable members their
  journals; kept across ``ray down`` and ``ray up``, as a machine's disk), as separate
  machines would, and its own PID namespace (its sshd is PID 1 there): ``ray stop``, which
  ``cluster.yaml`` runs on every node, kills every Ray process it can see, and must see
  only its host's (not the other hosts', nor the test run's own Ray);
* each host has a default route through its own interface, so that Ray finds the host's
  address the way it does on a real machine; the route leads nowhere beyond the lab's
  bridge (no gateway answers), so nothing leaves the namespaces.

How raygroups gets onto the hosts without the package registry: the hosts share this
machine's filesystem, so the cluster config (the repository's ``cluster.yaml`` with the
provider's addresses, the run's key and ``ssh_user: root``) replaces ``~/raygroups-venv``
with the virtual environment running the tests (``sys.prefix``), in which raygroups is
installed, and its setup command only checks that ``raygroups.actors`` imports there. Every
command ``cluster.yaml`` gives Ray (``ray start``, ``raygroups up ...``) runs as written.

The hosts' user is root, whose home directory they share: the group is named
``orders<pid>`` (so its token file is the run's own), and ``close()`` removes the files Ray
and raygroups left there that did not exist before (``~/ray_bootstrap_config.yaml``,
``~/ray_bootstrap_key.pem``, the token file) and puts back ``~/.bashrc`` (cluster.yaml adds
the venv to PATH there: ``ray down`` runs a bare ``ray stop`` on the head).

Needs root, iproute2, nftables, openssh-server and rsync (``ray up`` copies its bootstrap
config with it); ``available()`` says what is missing. ``close()`` runs ``ray down`` if the
cluster is up, kills every process in the lab's namespaces and deletes them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Optional, Sequence

import yaml

from .netns import NetLab, _run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSHD = "/usr/sbin/sshd"
RECONNECT_S = 10
SSHD_CONFIG = """\
ListenAddress {addr}
Port 22
HostKey {tmp}/hostkey
PidFile {tmp}/sshd{k}.pid
AuthorizedKeysFile {tmp}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
SetEnv PYENV_REHASH_TIMEOUT=1
"""
# SetEnv: a host killed while a login's shell ran ``pyenv init`` (this machine's ~/.bashrc)
# leaves pyenv's rehash lock behind on the shared disk, and every later login would wait 60 s
# for it (seen once as a `_wait_ssh` timeout after a kill); with it, 1 s.


def available() -> tuple[bool, str]:
    ok, why = NetLab.available()
    if not ok:
        return ok, why
    missing = [p for p, path in (("openssh-server", SSHD), ("openssh-client", "ssh"),
                                 ("rsync", "rsync"), ("ssh-keygen", "ssh-keygen"),
                                 ("unshare", "unshare"))
               if not (os.path.exists(path) if path.startswith("/") else shutil.which(path))]
    if missing:
        return False, f"not installed: {', '.join(missing)} (apt-get install -y " \
                      "openssh-server rsync)"
    return True, ""


class RayHosts:
    def __init__(self, n: int = 5, venv: str = sys.prefix, cluster: Optional[str] = None,
                 up_args: str = ""):
        """``up_args``: added to cluster.yaml's ``raygroups up`` line (e.g. ``--durable``)."""
        self.lab = NetLab(n, keep_logs=bool(os.environ.get("RAYBED_KEEP_LOGS")))
        self.n, self.venv, self.up_args = n, venv, up_args
        self.cluster_name = cluster or f"rgbed{os.getpid()}"
        self.config_path: Optional[str] = None
        # as cluster.yaml says to run it (Ray's v1 autoscaler for the local provider)
        self.ray_env = {"RAY_UP_enable_autoscaler_v2":
                        os.environ.get("RAY_UP_enable_autoscaler_v2", "0")}
        self.group = f"orders{os.getpid()}"
        home = os.path.expanduser("~")
        self._bashrc_path = os.path.join(home, ".bashrc")  # cluster.yaml adds a PATH line
        try:
            with open(self._bashrc_path) as f:
                self.bashrc: Optional[str] = f.read()
        except FileNotFoundError:
            self.bashrc = None
        # what Ray and raygroups write into the (shared) home directory of the hosts' user
        self.leftovers = [p for p in (os.path.join(home, "ray_bootstrap_config.yaml"),
                                      os.path.join(home, "ray_bootstrap_key.pem"),
                                      os.path.join(home, ".raygroups",
                                                   f"raygroups.{self.group}.token"))
                          if not os.path.exists(p)]

    # -- building -------------------------------------------------------------------------
    def __enter__(self) -> "RayHosts":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "RayHosts":
        self.lab.start()
        try:
            self._build()
        except BaseException:
            self.lab.close()
            raise
        return self

    def _build(self) -> None:
        tmp = self.tmp
        for k in range(self.n):
            _run(["ip", "-n", self.lab.ns(k), "route", "add", "default", "dev", "eth0"])
            os.makedirs(self._private_dir(k), exist_ok=True)
        for name in ("id", "hostkey"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"raybed-{name}",
                  "-f", os.path.join(tmp, name)])
        os.replace(os.path.join(tmp, "id.pub"), os.path.join(tmp, "authorized_keys"))
        # cluster.yaml copies the operator's Ray token to every node: make it as its header
        # says (`ray get-auth-token --generate`; kept, as the first ray.init would; the
        # command prints the token, which is captured and dropped)
        if not os.path.exists(os.path.expanduser("~/.ray/auth_token")):
            subprocess.run([f"{self.venv}/bin/ray", "get-auth-token", "--generate"],
                           capture_output=True, timeout=60, check=True)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        os.makedirs("/tmp/ray", exist_ok=True)   # the mount point of each host's own
        for k in range(1, self.n):
            conf = os.path.join(tmp, f"sshd{k}.conf")
            with open(conf, "w") as f:
                f.write(SSHD_CONFIG.format(addr=self.addr(k), tmp=tmp, k=k))
            self._spawn_sshd(k)
        for k in range(1, self.n):
            self._wait_ssh(k)

    def _spawn_sshd(self, k: int) -> None:
        conf = os.path.join(self.tmp, f"sshd{k}.conf")
        self.lab.spawn(k, self._private([SSHD, "-D", "-e", "-f", conf], k, pids=True),
                       name="sshd")

    def restart_sshd(self, k: int) -> None:
        """Host k boots again after ``kill_host``: a fresh sshd (and PID namespace)."""
        self._spawn_sshd(k)
        self._wait_ssh(k)

    def _private_dir(self, k: int) -> str:
        return os.path.join(self.tmp, f"host{k}-tmp-ray")

    def _private(self, argv: Sequence[str], k: int, pids: bool = False) -> list:
        """``argv`` with host k's own /tmp/ray (a private mount namespace); with ``pids``,
        in a PID namespace of its own too (``ray stop`` on a host kills what it sees)."""
        own = ["--pid", "--fork", "--mount-proc"] if pids else []
        return ["unshare", "--mount", "--propagation", "private", *own, "sh", "-c",
                f'mount --bind "{self._private_dir(k)}" /tmp/ray && exec "$@"', "sh", *argv]

    def _wait_ssh(self, k: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                r = self.ssh(k, "true", timeout=10)
                if r.returncode == 0:
                    return
                why = r.stderr.strip()
            except subprocess.TimeoutExpired:
                why = "a login took over 10 s"
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of host {k} does not answer: {why}")
            time.sleep(0.2)

    # -- addressing and commands ----------------------------------------------------------
    @property
    def tmp(self) -> str:
        return self.lab.tmp

    def addr(self, k: int) -> str:
        return self.lab.addr(k)

    def run(self, k: int, argv: Sequence[str], timeout: float = 120.0,
            env: Optional[dict] = None) -> subprocess.CompletedProcess:
        """``argv`` on host k (its namespace and its own /tmp/ray), output captured."""
        return subprocess.run(["ip", "netns", "exec", self.lab.ns(k), *self._private(argv, k)],
                              capture_output=True, text=True, timeout=timeout,
                              env=env)

    def ssh(self, k: int, command: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """``command`` on host k through its sshd, from the operator's host 0."""
        return self.lab.run(0, ["ssh", "-i", os.path.join(self.tmp, "id"), "-o", "BatchMode=yes",
                                "-o", "StrictHostKeyChecking=no", "-o",
                                "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                                "-o", "ConnectTimeout=5", f"root@{self.addr(k)}", command],
                            timeout=timeout)

    def pids(self, k: int) -> list:
        r = _run(["ip", "netns", "pids", self.lab.ns(k)], check=False)
        return [int(t) for t in r.stdout.split()]

    def commands(self, k: int) -> list:
        """The command lines of host k's processes."""
        out = []
        for pid in self.pids(k):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    out.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
            except OSError:
                pass
        return out

    def kill_host(self, k: int, timeout: float = 30.0) -> int:
        """SIGKILL every process of host k (a machine losing power), again until none is
        left (one forked meanwhile, or not yet gone: its sockets, sshd's port among them,
        would keep the host's next sshd from binding); returns how many."""
        killed: set = set()
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids(k)
            if not pids:
                return len(killed)
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {k}: processes {pids} outlive SIGKILL")
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            killed.update(pids)
            time.sleep(0.05)

    # -- ray up / ray down ------------------------------------------------------------------
    def cluster_config(self, head: int, workers: Sequence[int]) -> str:
        """The repository's cluster.yaml for these hosts (see the module doc); its path."""
        with open(os.path.join(REPO, "cluster.yaml")) as f:
            c = yaml.safe_load(f)
        c["cluster_name"] = self.cluster_name
        c["provider"] = {"type": "local", "head_ip": self.addr(head),
                         "worker_ips": [self.addr(w) for w in workers]}
        c["auth"] = {"ssh_user": "root", "ssh_private_key": os.path.join(self.tmp, "id")}
        c["min_workers"] = c["max_workers"] = len(workers)
        # the PATH line as written (`ray down` runs a bare `ray stop` on the head), then a
        # check that raygroups imports from the venv instead of installing it
        c["setup_commands"] = [
            cmd.replace("$HOME/raygroups-venv", self.venv).replace("raygroups-venv/bin",
                                                                    f"{self.venv}/bin")
            for cmd in c["setup_commands"] if "bashrc" in cmd] + [
            f"{self.venv}/bin/python -c 'import raygroups.actors'"]
        for key in ("head_start_ray_commands", "worker_start_ray_commands"):
            up = " ".join(["", "up", self.group, *self.up_args.split(), ""])
            c[key] = [cmd.replace("~/raygroups-venv", self.venv).replace(" up orders ", up)
                      for cmd in c[key]]
        # a worker's raylet gives up on a head that went away (ray down) after 10 s instead
        # of 60: what the test waits for after ray down
        c["worker_start_ray_commands"] = [
            cmd.replace("RAY_AUTH_MODE=token ", "RAY_AUTH_MODE=token "
                        f"RAY_gcs_rpc_server_reconnect_timeout_s={RECONNECT_S} ")
            for cmd in c["worker_start_ray_commands"]]
        path = os.path.join(self.tmp, "cluster.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(c, f)
        self.config_path = path
        return path

    def ray(self, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess:
        """``ray <args>`` on the operator's host 0 (e.g. ``up -y CONFIG``)."""
        env = {**os.environ, **self.ray_env}
        return self.run(0, [f"{self.venv}/bin/ray", *args], timeout=timeout, env=env)

    def ray_up(self, head: int, workers: Sequence[int],
               restart: bool = True) -> subprocess.CompletedProcess:
        """``ray up`` of the cluster; ``restart=False`` (``--no-restart``) updates a running
        one: the head's autoscaler takes the new config (e.g. another worker)."""
        path = self.cluster_config(head, workers)
        return self.ray("up", "-y", "--no-config-cache", *([] if restart else ["--no-restart"]),
                        path)

    def ray_down(self) -> subprocess.CompletedProcess:
        r = self.ray("down", "-y", self.config_path)
        self.config_path = None
        return r

    def close(self) -> None:
        if self.config_path is not None:
            try:
                self.ray_down()
            except Exception:
                pass
        self.lab.close()
        if self.bashrc is None:
            try:
                os.unlink(self._bashrc_path)
            except OSError:
                pass
        else:
            with open(self._bashrc_path, "w") as f:
                f.write(self.bashrc)
        for path in self.leftovers:
            try:
                os.unlink(path)
            except OSError:
                pass
