"""Stack configuration: one dataclass per layer, composed into ``StackConfig``, with named
presets. ``local`` is tuned for one host (fast timers), ``lan`` for a data-centre network,
``wan`` for long, lossy links."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from .discovery.ping import DiscoveryConfig, Ping
from .discovery.store_discovery import StoreDiscovery, StoreDiscoveryConfig
from .faults import FaultConfig, Faults
from .fd_sock import FdSock, FdSockConfig
from .flow_control import FlowControl, FlowControlConfig
from .frag import Frag, FragConfig
from .errors import ConfigError
from .primary import TIE_BREAKERS, Primary, PrimaryConfig
from .rng import Rng
from .sequencer import Sequencer, SequencerConfig
from .state_transfer import StateTransfer, StateTransferConfig
from .gms import Gms, GmsConfig
from .gossip import GossipConfig, GossipMembership
from .layer import Host
from .merge import MergeConfig, MergeDetector
from .nakack import NakAck, NakAckConfig
from .stable import Stable, StableConfig
from .stack import Stack
from .swim import Swim, SwimConfig
from .transport import Transport, TransportConfig, check_wire_versions
from .unicast import Unicast, UnicastConfig

MEMBERSHIP_MODES = ("views", "gossip")


@dataclass
class StackConfig:
    transport: TransportConfig = field(default_factory=TransportConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    nakack: NakAckConfig = field(default_factory=NakAckConfig)
    unicast: UnicastConfig = field(default_factory=UnicastConfig)
    stable: StableConfig = field(default_factory=StableConfig)
    gms: GmsConfig = field(default_factory=GmsConfig)
    swim: SwimConfig = field(default_factory=SwimConfig)
    fd_sock: FdSockConfig = field(default_factory=FdSockConfig)
    """Crash detection by connection loss (JGroups' FD_SOCK), verified by SWIM: on in
    ``local`` and ``lan``, off in ``wan``."""
    merge: MergeConfig = field(default_factory=MergeConfig)
    gossip: GossipConfig = field(default_factory=GossipConfig)
    flow_control: FlowControlConfig = field(default_factory=FlowControlConfig)
    """Credit-based flow control above GMS (views mode only)."""
    frag: FragConfig = field(default_factory=FragConfig)
    primary: PrimaryConfig = field(default_factory=PrimaryConfig)
    sequencer: SequencerConfig = field(default_factory=SequencerConfig)
    state_transfer: StateTransferConfig = field(default_factory=StateTransferConfig)
    """Fragmentation of large payloads: the top layer."""
    store: Optional[StoreDiscoveryConfig] = None
    """Cloud-store discovery (members files per coordinator, bootstrap file) instead of PING;
    set by the ``discovery="file:///dir"`` / ``"s3://..."`` / ``"ray-kv://"`` and
    ``bootstrap=`` shortcuts, tuned with ``store__field=value``. None (default): PING."""
    faults: Optional[FaultConfig] = None
    """Fault injection (drop, delay, duplicate, reorder) right above the transport, for
    tests and chaos drills on real sockets; None (default) leaves the layer out."""
    membership: str = "views"
    """"views": agreed views through GMS (default, like JGroups); "gossip": each member's own
    eventually consistent list from SWIM alone (like Serf, for very large groups; multicast is
    then best effort)."""

    # -- presets --------------------------------------------------------------------------
    @classmethod
    def local(cls, transport: str = "udp", **options: Any) -> "StackConfig":
        """One host, loopback: short timers everywhere. FD_SOCK on (the dataclass default):
        a killed member is excluded once its watcher's connection closes and SWIM verified
        it, about 0.09 s, where SWIM's timers alone take about 1 s."""
        cfg = cls(
            transport=TransportConfig(kind=transport),
            discovery=DiscoveryConfig(timeout_s=0.15),
            nakack=NakAckConfig(xmit_interval_s=0.02, highest_interval_s=0.05),
            unicast=UnicastConfig(xmit_interval_s=0.02),
            stable=StableConfig(desired_avg_gossip_s=0.2),
            gms=GmsConfig(join_timeout_s=0.5, view_bundling_s=0.002, view_ack_timeout_s=1.0,
                          leave_timeout_s=2.0),
        )
        return cfg.with_options(**options)

    @classmethod
    def lan(cls, transport: str = "udp", **options: Any) -> "StackConfig":
        """A data-centre LAN: the dataclass defaults (FD_SOCK on, as in ``local``).

        Its failure-detection timers, each with what it buys. Measured with
        ``bench/failure.py`` (real processes, 20 trials per row, 2026-11-27, a 2-core machine
        at load average 3-11), at every survivor, p50 / max: kill -9 0.095 / 0.109 s at 5
        members and 0.106 / 0.233 s at 10; SIGSTOP 0.98 / 2.21 s and 0.95 / 1.63 s (commit
        b944491, load 2-3; 1.98 / 2.75 s and 1.19 / 4.23 s before SWIM counted the
        confirmations of a member hung again after it merged back); a member
        whose namespace nftables cut off 1.32 / 2.86 s and 1.20 / 2.57 s; no false exclusion
        in 300 s of 5 members at 5 % and at 10 % loss.

        * ``fd_sock.enabled=True`` (reconnect after 0.2 s, doubling to 5 s): a crash closes
          the watch connection, so kill -9 is out in about 0.1 s instead of SWIM's 1 s; a
          hung process or a lost host closes nothing, and the timers below find those.
        * ``swim.probe_interval_s=0.2``: each member probes one other per round, so the group
          probes every member about once per 0.2 s and misses a hung one within that;
          halving it doubles probe traffic to save at most 0.1 s of a 1-2 s hang detection.
        * ``swim.probe_timeout_s=0.08``: LAN round trips are well under 1 ms, so 80 ms leaves
          a busy event loop room before the indirect probes go out (at 0.08 s, and the
          round ends at 0.2 s); Lifeguard stretches it by 1 + local health.
        * ``swim.indirect_probes=3``: at 10 % loss on receipt a direct probe fails 19 % of
          the time and each 4-hop indirect path 34 %, so a live member stays unanswered in
          0.19 x 0.34^3 = 0.8 % of probes (about 60 of the 7,235 measured in 300 s at 5
          members; 76 suspicions were measured, none ending in an exclusion).
        * ``swim.suspicion_min_s=0.5``, ``suspicion_max_factor=3.0``,
          ``suspicion_confirmations=3`` (Lifeguard's dynamic suspicion): a lone suspicion
          lasts 1.5 s, shrinking to 0.5 s (times log10 N beyond 10 members) as 3 others
          confirm it; a live member refutes within a round trip plus gossip (tens of ms),
          and a hang costs up to 0.2 s until a probe, 0.24 s of probing and 0.5-1.5 s of
          suspicion, hence about 1-2 s.
        * ``swim.verify_window_s=0.5``: a suspect heard from within 0.5 s is not removed by
          a timer (JGroups' VERIFY_SUSPECT); it costs a hang nothing, since every suspicion
          outlasts it.
        * ``swim.max_health=8`` (Lifeguard's local health): a member that misses acks because
          it is the slow one stretches its own probe interval and timeout up to 9x instead
          of suspecting others: no false exclusion when the machine is starved, at the
          price of a longer hang tail there (likely the 4.23 s measured at load 11)."""
        return cls(transport=TransportConfig(kind=transport, bind_addr="0.0.0.0")).with_options(**options)

    @classmethod
    def wan(cls, transport: str = "tcp", **options: Any) -> "StackConfig":
        """Long, lossy links: no IP multicast, patient timers. FD_SOCK off: middleboxes on
        long-haul paths reset idle connections, and SWIM's patient timers are the point."""
        cfg = cls(
            transport=TransportConfig(kind=transport, bind_addr="0.0.0.0", ip_multicast=False),
            discovery=DiscoveryConfig(mode="static", timeout_s=2.0),
            fd_sock=FdSockConfig(enabled=False),
            nakack=NakAckConfig(xmit_interval_s=0.2, highest_interval_s=0.5),
            unicast=UnicastConfig(xmit_interval_s=0.2),
            stable=StableConfig(desired_avg_gossip_s=1.0),
            gms=GmsConfig(join_timeout_s=5.0, view_bundling_s=0.05, view_ack_timeout_s=5.0,
                          leave_timeout_s=10.0),
        )
        return cfg.with_options(**options)

    def with_options(self, **options: Any) -> "StackConfig":
        """Override fields by ``layer__field=value`` (e.g. ``discovery__mode="static"``), or
        shortcuts: ``initial_hosts=[...]`` (static discovery), ``port``, ``bind_addr``,
        ``mcast_port``, ``cluster_key=b"..."`` (or a key ring ``[first, other, ...]``) and
        ``auth_mode="hmac"|"aesgcm"`` (authenticated packets, see ``TransportConfig``)."""
        shortcuts = {"initial_hosts": "discovery__initial_hosts", "port": "transport__port",
                     "bind_addr": "transport__bind_addr", "mcast_port": "transport__mcast_port",
                     "mcast_addr": "transport__mcast_addr",
                     "cluster_key": "transport__cluster_key",
                     "auth_mode": "transport__auth_mode"}
        cfg = dataclasses.replace(self, **{f.name: dataclasses.replace(getattr(self, f.name))
                                            for f in dataclasses.fields(self)
                                            if dataclasses.is_dataclass(getattr(self, f.name))})
        for key, value in options.items():
            key = shortcuts.get(key, key)
            if key == "membership":
                if value not in MEMBERSHIP_MODES:
                    raise ValueError(f"membership is one of {MEMBERSHIP_MODES}, not {value!r}")
                cfg.membership = value
                cfg.swim.mode = value
                continue
            if key in ("discovery", "bootstrap") and not isinstance(value, DiscoveryConfig):
                # store discovery: discovery="<store url>", bootstrap="<path or url>"
                if cfg.store is None:
                    cfg.store = StoreDiscoveryConfig(probe_timeout_s=cfg.discovery.timeout_s)
                setattr(cfg.store, "url" if key == "discovery" else key, value)
                continue
            if key == "store" and isinstance(value, str):
                key = "store__url"
            if key == "discovery__initial_hosts":
                cfg.discovery.mode = "static"
                value = tuple((str(h), int(p)) for h, p in value)
            if key == "transport__wire_versions":
                value = check_wire_versions(value)  # ConfigError now, not when it starts
            layer, sep, name = key.partition("__")
            if layer == "faults" and cfg.faults is None:
                cfg.faults = FaultConfig()
            if layer == "store" and cfg.store is None:
                cfg.store = StoreDiscoveryConfig(probe_timeout_s=cfg.discovery.timeout_s)
            sub = getattr(cfg, layer, None) if sep else None
            if sub is None or not hasattr(sub, name):
                raise TypeError(f"unknown stack option {key!r}")
            setattr(sub, name, value)
        cfg.check_primary()
        return cfg

    def check_primary(self) -> None:
        """``primary.expected_size`` is a whole number of members (at least 1),
        ``primary.tie_breaker`` is known, and "store" has a store to take leases in
        (ConfigError otherwise)."""
        es = self.primary.expected_size
        if type(es) is not int or es < 1:
            raise ConfigError(f"primary.expected_size is a number of members (an int, at least "
                              f"1), not {es!r}")
        tb = self.primary.tie_breaker
        if tb not in TIE_BREAKERS:
            raise ConfigError(f"primary.tie_breaker is one of {TIE_BREAKERS}, not {tb!r}")
        if tb == "store" and self.membership == "views" and \
                (self.store is None or not self.store.url):
            raise ConfigError("primary.tie_breaker='store' takes its leases in the discovery "
                              "store: configure store discovery (discovery='file:///dir', "
                              "'s3://bucket/prefix', 'ray-kv://' or 'memory://name')")

    @property
    def needs_mcast_socket(self) -> bool:
        t = self.transport
        return (t.kind == "udp" and t.ip_multicast) or \
            (self.discovery.mode == "multicast" and self.store is None)

    def agreed(self) -> dict:
        """The settings every member of a group must share, ``"layer.field": value``: the
        layer fields marked ``metadata={"agreed": True}`` and ``gms.agreed`` (an
        application's own, e.g. ``{"app.schema": 3}``). A joiner whose settings differ from
        the coordinator's is refused with ``JoinRejected``. A field marked
        ``"agreed": "unless_default"`` (one added after builds that did not know it) is left
        out at its default, so those builds, which send nothing for it, still match."""
        out = {}
        for f in dataclasses.fields(self):
            sub = getattr(self, f.name)
            if dataclasses.is_dataclass(sub):
                out.update((f"{f.name}.{g.name}", getattr(sub, g.name))
                           for g in dataclasses.fields(sub) if g.metadata.get("agreed")
                           and not (g.metadata["agreed"] == "unless_default"
                                    and getattr(sub, g.name) == g.default))
        for key, value in self.gms.agreed.items():
            if type(key) is not str or type(value) not in (str, int, float, bool):
                raise TypeError(f"gms__agreed: str keys and str/int/float/bool values, "
                                f"not {key!r}: {value!r}")
            out[key] = value
        return out

    def build(self, cluster: str, name: str, host: Host, rng: Rng,
              uid: Optional[bytes] = None) -> Stack:
        """Compose the layers bottom-first into a Stack (ConfigError for settings no stack
        can run with)."""
        self.check_primary()
        bottom = [Transport(self.transport)]
        if self.faults is not None:
            bottom.append(Faults(self.faults))
        discovery = Ping(self.discovery) if self.store is None else StoreDiscovery(self.store)
        fd_sock = [FdSock(self.fd_sock)] if self.fd_sock.enabled else []  # right above SWIM
        if self.membership == "gossip":
            # no FlowControl: multicast is best effort here, so a lost message's credit
            # would never come back
            layers = [discovery, Swim(self.swim), *fd_sock, Unicast(self.unicast),
                      GossipMembership(self.gossip),
                      Frag(self.frag)]
        else:
            layers = [discovery, MergeDetector(self.merge), Swim(self.swim), *fd_sock,
                      NakAck(self.nakack), Unicast(self.unicast), Stable(self.stable),
                      Gms(dataclasses.replace(self.gms, agreed=self.agreed())),
                      FlowControl(self.flow_control),
                      Primary(self.primary), Sequencer(self.sequencer),
                      Frag(self.frag),  # FRAG above everything that sends data
                      StateTransfer(self.state_transfer)]
        return Stack(cluster, name, bottom + layers, host, rng, uid)
