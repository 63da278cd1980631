"""Transport layer: the bottom of the stack.

Packs each message once, bundles messages per destination for one loop turn, fans a
multicast out (IP multicast, or one copy per view member where multicast is unavailable),
loops messages for the local member straight back up, and on the way up decodes and
validates bundles, dropping and counting anything malformed, foreign or not for us.
With a cluster key every packet is sealed on the way out (``flush``) and opened on the way in
(``receive``, before decoding): see ``auth.py``.

Wire versions (``wire.py``): multicasts and unicasts to members of the current view go in the
view's version (``View.wire_version``, adopted when GMS installs the view, after its flush);
everything else - unicasts to addresses outside the view, ``EmitTo`` (discovery, INFO) - in
version 1, which every build reads. Bundles are kept per destination and version.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from . import wire
from .auth import Auth, AuthError
from .errors import ConfigError, MessageTooLarge
from .events import (AddPhysical, EmitTo, GetBundleRoom, GetPhysical, ViewInstalled,
                     WireVersions)
from .layer import MCAST, Layer
from .message import NO_LOOPBACK, Message
from .transport_frag import FRAG_HEADER, Fragmenter


@dataclass
class TransportConfig:
    kind: str = "udp"
    """"udp" (datagrams, IP multicast) or "tcp" (length-prefixed frames, one connection per
    peer pair; multicast becomes one copy per member)."""
    bind_addr: str = "127.0.0.1"
    """Interface the member's sockets bind to. Loopback by default."""
    port: int = 0
    """Unicast (UDP) or listen (TCP) port; 0 picks a free one."""
    ip_multicast: bool = True
    """UDP only: send multicasts to the group address once. False: one unicast per member
    (for networks without multicast). TCP always fans out."""
    mcast_addr: str = "228.8.8.8"
    """IP multicast group for data (UDP) and discovery pings (both transports)."""
    mcast_port: int = 45588
    """Port of the multicast group. Clusters may share it: packets carry the cluster name."""
    mcast_ttl: int = 1
    """Multicast TTL: 0 stays on the host, 1 on the LAN segment."""
    max_bundle_size: int = 60_000
    """Bytes per datagram/frame. Larger bundles amortise per-packet costs. A message that
    does not fit one bundle (a large VIEW or JOIN_RSP, an application message in a stack
    without FRAG) is cut into fragments here and joined by the receiver (``transport_frag``:
    a lost fragment loses the whole message, which NAKACK/UNICAST retransmit)."""
    max_message_size: int = wire.MAX_PACKET
    """Bytes of one packed message, fragmented or not: larger raises MessageTooLarge when
    sent, and a receiver keeps at most this much of one sender's incomplete messages."""
    frag_pending_total: int = 64 * 1024 * 1024
    """Bytes of incomplete fragmented messages kept for all senders together; beyond, the
    oldest incomplete message is dropped (counted as ``frag_dropped_evicted``)."""
    frag_timeout_s: float = 10.0
    """An incomplete fragmented message that received no fragment for this long is dropped
    (``frag_dropped_expired``); its sender's reliability layer sends it again whole."""
    recv_buffer: int = 4 * 1024 * 1024
    """SO_RCVBUF in bytes (capped by net.core.rmem_max). Bigger absorbs bursts."""
    send_buffer: int = 4 * 1024 * 1024
    """SO_SNDBUF in bytes."""
    tcp_max_queued: int = 32 * 1024 * 1024
    """TCP: bytes queued on one connection before further frames are dropped and counted
    (reliability layers retransmit them), bounding memory behind a slow peer."""
    cluster_key: Union[bytes, str, list, tuple, None] = field(default=None, repr=False)
    """None (default): packets are not authenticated. A key (bytes), or a key ring (a list:
    senders seal with the first key, receivers accept any): every packet is authenticated
    (``auth_mode``) and replay-checked; anything else is dropped and counted (dropped_auth,
    dropped_replay, dropped_unauthenticated). All members need a common key. Rotation: add
    the new key second everywhere, then make it first everywhere, then drop the old one
    (see ``stack/auth.py``). Never shown in the config's repr (logs)."""
    auth_mode: str = "hmac"
    """With a cluster key: "hmac" (HMAC-SHA256 tag, 61 bytes per packet, contents readable on
    the wire) or "aesgcm" (AES-256-GCM encryption, 45 bytes per packet, confidential)."""
    replay_window: int = 1024
    """Packets per sender that may arrive out of order (newest counter minus this) before
    older ones are refused as replays. Larger tolerates more reordering; retransmission
    recovers what falls out of it."""
    wire_versions: tuple = (1, 1)
    """The wire formats this member speaks, ``(lowest, highest)`` of ``wire.VERSIONS``
    (MySQL Group Replication's version handshake): a group speaks the highest version every
    member has, and refuses a joiner whose range has none in common with the group's. (1, 2)
    speaks the next format once every member does; (2, 2) no longer joins a group at 1.
    Upgrade a running group by restarting its members one by one with the wider range.
    Gossip mode stays at 1 (it has no agreed views to switch at)."""
    gc_threshold: Optional[tuple] = (10_000, 20, 20)
    """The asyncio runtime raises CPython's garbage-collector thresholds (``gc.set_threshold``,
    process-wide, only ever upwards) to at least these when a channel starts. The stack keeps
    a few container objects per message until it is stable; with the defaults (700, 10, 10)
    the collector's full passes over them took about 40% of the CPU at 50k msg/s. None leaves
    the collector alone."""


def check_wire_versions(value: Any) -> tuple:
    """``value`` as a ``(lowest, highest)`` range of versions this build speaks, or
    ConfigError."""
    ok = isinstance(value, (tuple, list)) and len(value) == 2 and \
        all(type(v) is int for v in value)
    if not ok or not wire.VERSIONS[0] <= value[0] <= value[1] <= wire.VERSIONS[-1]:
        raise ConfigError(f"transport.wire_versions must be (lowest, highest) with "
                          f"{wire.VERSIONS[0]} <= lowest <= highest <= {wire.VERSIONS[-1]} "
                          f"(the versions this build speaks), not {value!r}")
    return tuple(value)


class Transport(Layer):
    name = "transport"

    def __init__(self, config: TransportConfig):
        super().__init__(config)
        self.wire_range = check_wire_versions(config.wire_versions)
        self.phys: dict = {}
        self.members: tuple = ()
        self.in_view: frozenset = frozenset()
        self.loopback: list[Message] = []
        self.flush_scheduled = False
        self.fan_out = config.kind == "tcp" or not config.ip_multicast

    def init(self, ctx) -> None:
        super().init(ctx)
        cfg = self.config
        self.auth = None
        if cfg.cluster_key is not None:
            self.auth = Auth(cfg.cluster_key, cfg.auth_mode, ctx.local.uid, cfg.replay_window)
            self.receive = self._receive_sealed  # the unauthenticated path stays untouched
        room = cfg.max_bundle_size - (self.auth.overhead if self.auth else 0)
        lo, hi = self.wire_range
        self.bundlers = {v: wire.Bundler(ctx.cluster, ctx.local.uid, room, v)
                         for v in sorted({wire.VERSION, *range(lo, hi + 1)})}
        self.accept = frozenset(self.bundlers)
        self.prefixes = tuple(b.prefix for b in self.bundlers.values())
        self.base = self.bundlers[wire.VERSION]  # the handshake format
        self.bundler = self.base                 # the current view's format
        self.version = wire.VERSION
        self.max_message = min(b.max_message for b in self.bundlers.values())
        """Largest packed message that fits one bundle of any version."""
        self.frag = Fragmenter(self.stats, cfg.max_message_size, cfg.frag_pending_total,
                               cfg.frag_timeout_s)

    # -- down ---------------------------------------------------------------------------
    def down(self, msg: Message) -> None:
        local = self.ctx.local
        msg.sender = local
        dest = msg.dest
        packed = wire.encode_message(None if dest is None else dest.uid, msg.flags, msg.headers,
                                     msg.payload)
        st = self.stats
        st["sent_msgs"] += 1
        bundler = self.bundler
        if bundler is not self.base and dest is not None and dest not in self.in_view:
            bundler = self.base  # outside our view: maybe a build that reads version 1 only
        add = bundler.add
        if len(packed) > self.max_message and dest != local:
            # too large for one bundle: its fragments instead (transport_frag)
            packed = self._split(None if dest is None else dest.uid, msg.flags, packed)
            add = bundler.add_many
        if dest is None:
            if self.fan_out:
                phys = self.phys
                for m in self.members:
                    if m is not local and m in phys:
                        add(phys[m], packed)
            else:
                add(MCAST, packed)
            if not msg.flags & NO_LOOPBACK:
                self.loopback.append(msg)
        elif dest == local:
            self.loopback.append(msg)
        else:
            p = self.phys.get(dest)
            if p is None:
                st["no_route"] += 1
                return
            add(p, packed)
        self._schedule_flush()

    def _split(self, dest_uid, flags: int, packed: bytes) -> list:
        """A packed message too large for one bundle: its packed fragments."""
        if len(packed) > self.config.max_message_size:
            raise MessageTooLarge(f"{len(packed)} bytes packed; at most "
                                  f"{self.config.max_message_size} (transport max_message_size)")
        return self.frag.split(dest_uid, flags, packed, self.max_message)

    def _schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.ctx.schedule(0, self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        emit, st, auth = self.ctx.host.emit, self.stats, self.auth
        for bundler in self.bundlers.values():
            for dest, data in bundler.drain():
                if auth is not None:
                    data = auth.seal(data)
                st["sent_packets"] += 1
                st["sent_bytes"] += len(data)
                emit(dest, data)
        if self.loopback:
            batch, self.loopback = self.loopback, []
            self.above.up(batch)

    # -- up -----------------------------------------------------------------------------
    def _receive_sealed(self, data: bytes, src: Any = None) -> None:
        """``receive`` with a cluster key: open (verify, decrypt, replay-check), then decode."""
        st = self.stats
        if len(data) > wire.MAX_PACKET + self.auth.overhead:
            st["dropped_oversized"] += 1
            return
        if self.auth.peek_sender(data) == self.ctx.local.uid:
            st["dropped_own"] += 1  # our multicast echoed (or replayed to us): no crypto
            return
        try:
            uid, bundle = self.auth.open(data)
        except AuthError as e:
            st["dropped_" + e.reason] += 1
            return
        Transport.receive(self, bundle, src, uid, len(data))

    def receive(self, data: bytes, src: Any = None, auth_uid: Optional[bytes] = None,
                size: int = 0) -> None:
        """Entry point for the runtime: one datagram or frame (``auth_uid``, ``size``: the
        authenticated sender and packet size, from ``_receive_sealed``)."""
        st = self.stats
        if auth_uid is None and type(data) is bytes and data.startswith(self.prefixes):
            st["dropped_own"] += 1  # our multicast echoed by the kernel: not even decoded
            return
        try:
            sender_uid, msgs = wire.decode(data, self.ctx.cluster, self.accept)
        except wire.DecodeError as e:
            st["dropped_" + e.reason] += 1
            return
        if auth_uid is not None and sender_uid != auth_uid:
            st["dropped_auth"] += 1  # sealed by one member, claiming to be another
            return
        local = self.ctx.local
        if sender_uid == local.uid:
            st["dropped_own"] += 1  # our multicast, echoed by the kernel; loopback has it
            return
        st["recv_packets"] += 1
        st["recv_bytes"] += size or len(data)
        sender = self.ctx.book.get(sender_uid)
        if src is not None and sender not in self.phys:
            self.phys[sender] = src
        batch = []
        lu = local.uid
        for d, flags, headers, payload in msgs:
            if d is not None and d != lu:
                st["dropped_not_for_me"] += 1
                continue
            if FRAG_HEADER in headers:
                try:
                    whole = self.frag.add(sender_uid, headers[FRAG_HEADER], payload,
                                          self.ctx.now())
                except (TypeError, ValueError, KeyError, OverflowError):
                    st["dropped_frag_malformed"] += 1
                    continue
                if whole is None:
                    continue
                d, flags, headers, payload = whole
                if d is not None and d != lu:
                    st["dropped_not_for_me"] += 1
                    continue
            batch.append(Message(None if d is None else local, payload, flags, headers, sender))
        st["recv_msgs"] += len(batch)
        if batch:
            self.above.up(batch)

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is EmitTo:
            m = ev.msg
            m.sender = self.ctx.local
            uid = None if m.dest is None else m.dest.uid
            packed = wire.encode_message(uid, m.flags, m.headers, m.payload)
            # to a physical address (discovery, INFO): whoever listens there, in version 1
            if len(packed) > self.max_message:
                self.base.add_many(ev.phys, self._split(uid, m.flags, packed))
            else:
                self.base.add(ev.phys, packed)
            self._schedule_flush()
            return None
        if t is AddPhysical:
            if ev.addr != self.ctx.local and ev.phys is not None:
                self.phys[ev.addr] = tuple(ev.phys)
            return None
        if t is GetPhysical:
            return self.ctx.host.local_phys if ev.addr is None else self.phys.get(ev.addr)
        if t is GetBundleRoom:
            return self.max_message
        if t is WireVersions:
            return self.wire_range
        if t is ViewInstalled:
            view = ev.view
            self.members = view.members
            keep = self.in_view = view.member_set
            if len(self.phys) > 4 * len(keep) + 64:  # bound the cache of departed members
                self.phys = {a: p for a, p in self.phys.items() if a in keep}
            if self.ctx.local in keep:  # (a view that drops us is not ours to speak)
                self._switch(view.wire_version)
        return None

    def _switch(self, version: int) -> None:
        """Speak ``version`` from now on (a view was installed: its flush is done, so no
        message of the old view is still to be sent in it). Messages already bundled keep
        the version they were packed for."""
        if version == self.version:
            return
        if version not in self.bundlers:  # a view that says we speak what we do not
            self.stats["views_version_unsupported"] += 1
            return
        self.stats["version_switches"] += 1
        self.ctx.log(f"wire version {self.version} -> {version}")
        self.version = version
        self.bundler = self.bundlers[version]

    @property
    def pending_frag_bytes(self) -> int:
        """Bytes of incomplete fragmented messages held for reassembly."""
        return self.frag.total
