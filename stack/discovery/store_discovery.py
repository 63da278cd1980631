"""Cloud-store discovery: one members file per coordinator (JGroups' design, JGRP-1841).

Replaces PING when ``StackConfig.local(discovery="file:///dir")`` (or ``"s3://..."``,
``"ray-kv://"``) names a store. Sans-IO like every layer: it never touches a file or the
network; it calls the host's ``StoreClient`` (``host.store``; stack/discovery/store.py) and
gets results by callback on the stack's loop.

Files: ``<location>/<cluster>/<coordinator uuid>.list`` (format: members_file.py).

Joining (GMS's ``FindMembers``): list the files (1 read), read one (1 read; a file already
read is not read again while its etag is the same), teach the transport every address in it
(``AddPhysical``), probe the coordinator marked ``T`` and answer GMS with its ``PingData``,
so GMS joins it unchanged. Several files (a partition): one is picked at random. No file, or
no answer from its coordinator (probed again for ``coordinator_wait_s``: a burst of loss must
not split a joiner off a live group): an empty answer, and GMS founds the group after its
empty rounds (a member whose own uuid names a file, i.e. the first member of a bootstrap
file, is that coordinator and founds at once). A joiner not in the file announces itself by joining:
its JOIN_REQ carries its address, the VIEW spreads it, and the coordinator rewrites its file.

The coordinator's file: written when it becomes coordinator (create-only) and whenever a view
brings a member the file does not list (replace-only-this-version, ``if_match``); one write
in flight at a time, so bundled joins cost one write. A conflict (the file changed under us:
a person edited it, a supervisor wrote it) re-reads it and merges: lines of members this
coordinator never saw in a view are kept, so no member line is lost. Members that leave are
not written out (saves a write; the next join writes the cleaned list). A leaving coordinator
deletes its own file; a coordinator that becomes a participant of a MergeView leaves its file
to the merge coordinator, which reads the subgroups' files, writes its own and deletes them.

Rendezvous (beyond the seed): every ``rendezvous_interval_s`` a coordinator lists the files.
Its own file missing (deleted as stale while we were cut off) is written again. For every
other file it probes that file's coordinator every ``probe_interval_s``; a coordinator that
answers with another view goes up to GMS as ``MergeInfo(is_coord=True)`` (and becomes a
``DiscoveryTargets`` target for MERGE's INFO), so two partitions that declared each other dead
still find each other and merge. A file whose coordinator is a member of our view is obsolete
and deleted; a file whose coordinator has not answered for ``stale_after_s`` and whose view id
is older than ours (or silent for three times that: a whole group that died) is the leftover
of a kill -9 and is deleted. A coordinator cut off longer than ``stale_after_s`` may lose its
file that way; it writes it again at its next rendezvous.

A store that is down degrades discovery and never blocks the group: the last listing and
files read are used, one warning is logged (and one line when the store is back), writes are
retried with exponential backoff until they succeed (the file catches up). A joiner that
never read the store waits up to ``store_wait_s`` for it before founding alone (a merge
through the rendezvous joins the groups once the store is back).

Bootstrap (seed): with ``bootstrap=`` (a MembersFile, loaded by the host before the stack is
built) a member listed in it needs no discovery round: its cache is filled from the file and
it joins the member marked ``T`` at once (or founds, being it). A member not listed probes
``T``. After ``bootstrap_rounds`` failed rounds the store is used (without a store: every
listed member is probed, like TCPPING).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from ..events import (AddPhysical, DiscoveryTargets, EmitTo, FindMembers, GetPhysical, Leave,
                      MembershipStatus, MergeInfo, PingData, ViewInstalled)
from ..layer import Layer
from ..message import CONTROL, Message
from ..view import MergeView, View
from .members_file import SUFFIX, Entry, MembersFile, file_name, uid_from_file_name
from .store import StoreConflict

log = logging.getLogger("raygroups.discovery")

PROBE, PROBE_RSP = 2, 3  # header 1 is the discovery slot; PING uses types 0 and 1
RENDEZVOUS = 0           # the nonce of probes to other files' coordinators
NEVER = float("-inf")


@dataclass
class StoreDiscoveryConfig:
    url: Optional[str] = None
    """Where the members files live: ``file:///dir``, ``s3://bucket/prefix?endpoint_url=...``,
    ``ray-kv://``, ``memory://name``. None: the bootstrap file only."""
    bootstrap: Any = None
    """A bootstrap file: path or URL (the host loads it before building the stack), or a
    MembersFile."""
    use_bootstrap_identity: bool = True
    """Take logical name, port and seeded UUID from the bootstrap file (first start in the
    process only; a restart takes a fresh random UUID). False: always a random UUID."""
    probe_timeout_s: float = 0.5
    """How long a join round waits for the file's coordinator to answer."""
    num_probes: int = 3
    """Probes sent per round, spread over the timeout (one lost packet hides nobody)."""
    rendezvous_interval_s: float = 2.0
    """How often a coordinator lists the files (1 store read each time): own file check,
    partitions to merge, stale files. Shorter merges sooner and costs more calls."""
    probe_interval_s: float = 0.3
    """How often a coordinator probes other files' coordinators (network only, no store
    calls). Two answers per GMS merge check make a merge candidate."""
    stale_after_s: float = 20.0
    """A file whose coordinator stayed silent this long (and whose view id is older than
    ours) is deleted as a kill -9 leftover. Longer spares coordinators cut off by a long
    partition; shorter cleans up sooner."""
    retry_s: float = 0.5
    """First retry delay after a failed store call; doubles up to ``retry_max_s``."""
    retry_max_s: float = 5.0
    """Longest retry delay while the store is down."""
    coordinator_wait_s: float = 1.0
    """A joiner keeps probing a file's silent coordinator this long (over several probe
    timeouts) before it gives that file up and, with no other, founds a group of its own.
    Longer than a burst of loss, which would otherwise split a joiner off a live group;
    shorter means a joiner founds sooner beside the file of a group that was killed."""
    store_wait_s: float = 10.0
    """A joiner that never reached the store waits this long before founding alone."""
    bootstrap_rounds: int = 3
    """Join rounds taken from the bootstrap file alone before the store is used."""
    fetch_interval_s: float = 1.0
    """At most one read of the coordinator's file this often for addresses missing from
    the transport's cache."""


class _Foreign:
    """Another coordinator's file, as the rendezvous sees it."""
    __slots__ = ("name", "etag", "coord", "phys", "counter", "since", "alive_at", "deleting")

    def __init__(self, name: str, now: float):
        self.name, self.etag = name, None
        self.coord = self.phys = None
        self.counter = 0
        self.since = now          # silent since (first seen, or last changed)
        self.alive_at = NEVER     # last answer of its coordinator as coordinator
        self.deleting = False


class StoreDiscovery(Layer):
    name = "discovery"
    header_id = 1

    def __init__(self, config: StoreDiscoveryConfig):
        super().__init__(config)
        self.store = None
        self.boot: Optional[MembersFile] = (config.bootstrap if isinstance(config.bootstrap,
                                                                          MembersFile) else None)
        self.status: Optional[MembershipStatus] = None
        self.view: Optional[View] = None
        self.leaving = False
        self.listing: Optional[dict] = None          # last good listing {name: etag}
        self.files: dict[str, tuple] = {}            # name -> (etag, MembersFile) read
        self.bad_logged: set = set()
        # join rounds
        self.round: Optional[dict] = None
        self.round_id = 0
        self.rounds = 0
        self.silent_since: dict[str, float] = {}     # file -> its coordinator silent since
        self.nonce = 0
        self.pending: dict[int, Callable] = {}
        # own file (coordinator)
        self.own_name: Optional[str] = None
        self.own_etag: Optional[str] = None
        self.own_exists: Optional[bool] = None       # None: unknown, read before writing
        self.written: dict = {}                      # uid -> Entry in the stored file
        self.retained: dict = {}                     # uid -> Entry of members never seen
        self.known: set = set()                      # uids seen in our views
        self.writing = False
        self.dirty = False
        self.delete_after_write: Optional[str] = None
        self.write_timer = None
        self.conflicts = 0
        # rendezvous and address fetches
        self.foreign: dict[str, _Foreign] = {}
        self.listing_busy = False
        self.fetching = False
        self.last_fetch = NEVER
        # store health
        self.store_down = False
        self.write_failing = False
        self.backoff = config.retry_s

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self.store = getattr(self.ctx.host, "store", None)
        if self.config.url and self.store is None:
            log.warning("[%s %s] discovery store %s configured but the host provides no store "
                        "client; using the bootstrap file only", self.ctx.cluster,
                        self.ctx.local, self.config.url)
        if self.config.bootstrap is not None and self.boot is None:
            log.warning("[%s %s] bootstrap file %r was not loaded by the host; ignored",
                        self.ctx.cluster, self.ctx.local, self.config.bootstrap)
        if self.boot is not None:
            self._learn(self.boot)
            if self.ctx.local.uid == self._boot_coord_uid():
                # the first coordinator of a bootstrap file: the file is ours (merge, not clobber)
                self.retained = {e.uid: replace(e, coord=False) for e in self.boot
                                 if e.uid != self.ctx.local.uid}
        cfg = self.config
        self.ctx.every(cfg.rendezvous_interval_s, self._rendezvous)
        self.ctx.every(cfg.probe_interval_s, self._probe_foreign)

    def stop(self) -> None:
        """A coordinator that left gracefully but never saw a view without itself (the last
        members left together) deletes its file now. A crash (no Leave) deletes nothing."""
        if self.leaving and self.own_name is not None and self.store is not None:
            name, self.own_name = self.own_name, None
            self._delete(name, "own")

    def _boot_coord_uid(self) -> Optional[bytes]:
        b = self.boot
        if b is None or not b.entries:
            return None
        t = b.coordinator
        return (t or b.entries[0]).uid

    # -- store calls --------------------------------------------------------------------
    def _call(self, kind: str, *args, then: Callable[[Any, Any], None], own_write: bool = False,
              **kw) -> None:
        """Call the store; ``then(result, error)`` runs on our loop, never after stop.
        ``own_write``: a step of our file's write; when it ends after stop, the delete of
        the file that waited for it (``delete_after_write``) still goes."""
        self.stats["store_" + kind] += 1

        def cb(result: Any, error: Optional[BaseException]) -> None:
            if not self.ctx.running:
                if own_write:
                    self._deferred_delete()
                return
            try:
                if error is None or isinstance(error, StoreConflict):
                    self._store_ok(kind)
                else:
                    self._store_failed(kind, error)
                then(result, error)
            except Exception:  # a bug here must not escape into the runtime's loop
                self.stats["callback_errors"] += 1
                log.exception("[%s %s] discovery store callback failed", self.ctx.cluster,
                              self.ctx.local)
        getattr(self.store, kind)(self.ctx.cluster, *args, cb, **kw)

    def _store_failed(self, kind: str, error: BaseException) -> None:
        self.stats["store_errors"] += 1
        if kind in ("put", "delete"):
            self.write_failing = True
        if not self.store_down:
            self.store_down = True
            log.warning("[%s %s] discovery store %s unavailable (%s: %s); using the cached "
                        "members file, the group runs on; retrying up to every %.1fs",
                        self.ctx.cluster, self.ctx.local, self.config.url or "", kind, error,
                        self.config.retry_max_s)

    def _store_ok(self, kind: str) -> None:
        if kind in ("list", "get") and self.write_failing:
            return  # a read may come from a cache in front of the store; writes still fail
        if kind in ("put", "delete"):
            self.write_failing = False
        if self.store_down:
            self.store_down = False
            log.warning("[%s %s] discovery store %s is reachable again", self.ctx.cluster,
                        self.ctx.local, self.config.url or "")
        self.backoff = self.config.retry_s

    def _next_backoff(self) -> float:
        d = self.backoff
        self.backoff = min(self.backoff * 2, self.config.retry_max_s)
        return d * self.ctx.rng.uniform(0.8, 1.2)

    def _read(self, name: str, etag: Optional[str],
              then: Callable[[Optional[MembersFile]], None]) -> None:
        """A members file (from our cache while its etag is unchanged); None when absent."""
        cached = self.files.get(name)
        if cached is not None and etag is not None and cached[0] == etag:
            then(cached[1])
            return

        def done(result, error) -> None:
            if error is not None:
                then(cached[1] if cached is not None else None)
                return
            if result is None:
                self.files.pop(name, None)
                then(None)
                return
            data, tag = result
            mf = self._parse(data, name, tag)
            self.files[name] = (tag, mf)
            self._learn(mf)
            then(mf)
        self._call("get", name, then=done)

    def _parse(self, data: bytes, name: str, etag: Any) -> MembersFile:
        mf = MembersFile.parse(data, source=f"{self.config.url or ''}/{self.ctx.cluster}/{name}")
        if mf.errors and (name, etag) not in self.bad_logged:
            if len(self.bad_logged) > 256:
                self.bad_logged.clear()
            self.bad_logged.add((name, etag))
            self.stats["malformed_lines"] += len(mf.errors)
            for err in mf.errors:
                log.warning("[%s %s] members file line skipped: %s", self.ctx.cluster,
                            self.ctx.local, err)
        return mf

    def _learn(self, mf: MembersFile) -> None:
        """Fill the transport's address cache (and names) from a file."""
        local, book = self.ctx.local, self.ctx.book
        for e in mf:
            if e.uid != local.uid:
                self.below.down_event(AddPhysical(book.get(e.uid, e.name), e.phys))

    # -- join rounds (FindMembers) --------------------------------------------------------
    def _find(self, callback) -> None:
        self.round_id += 1
        self.rounds += 1
        rid = self.round_id
        self.round = {"cb": callback, "start": self.ctx.now(), "found": {}}
        self._drop_probes()
        local = self.ctx.local
        if self.boot is not None and self.rounds <= self.config.bootstrap_rounds:
            t_uid = self._boot_coord_uid()
            if t_uid is None or t_uid == local.uid:
                self._finish(rid, [])  # the first coordinator: found the group
                return
            t = self.boot.get(t_uid)
            addr = self.ctx.book.get(t.uid, t.name)
            if self.boot.get(local.uid) is not None:
                self.stats["bootstrap_joins"] += 1  # listed: no discovery round
                self._finish(rid, [PingData(addr, t.phys, True, True)])
            else:
                self._probe_round(rid, [t])
            return
        if self.store is None:
            if self.boot is not None:
                self._probe_round(rid, [e for e in self.boot if e.uid != local.uid])
            else:
                self._finish(rid, [])
            return
        self._round_list(rid)

    def _round_list(self, rid: int) -> None:
        def done(listing, error) -> None:
            if rid != self.round_id or self.round is None:
                return
            if error is not None:
                if self.listing is None:
                    if self.ctx.now() - self.round["start"] < self.config.store_wait_s:
                        self.ctx.schedule(self._next_backoff(), lambda: self._round_list(rid))
                    else:
                        self._finish(rid, [])
                    return
                listing = self.listing  # degraded: the last listing we had
            else:
                self.listing = listing
            self._round_pick(rid, listing)
        self._call("list", then=done)

    def _round_pick(self, rid: int, listing: dict) -> None:
        names = sorted(n for n in listing if n.endswith(SUFFIX))
        if file_name(self.ctx.local.uid) in names:
            self._finish(rid, [])  # a file names us coordinator (bootstrap): found at once
            return
        fresh = [n for n in names if not self._given_up(n)] or names
        if not fresh:
            self._finish(rid, [])
            return
        name = self.ctx.rng.choice(fresh)
        self._read(name, listing.get(name), lambda mf: self._round_file(rid, name, mf))

    def _round_file(self, rid: int, name: str, mf: Optional[MembersFile]) -> None:
        if rid != self.round_id or self.round is None:
            return
        if mf is None or not mf.entries:
            self.silent_since[name] = NEVER  # nobody to probe: given up at once
            self._finish(rid, [])
            return
        t = mf.coordinator or mf.get(uid_from_file_name(name) or b"") or mf.entries[0]
        if t.uid == self.ctx.local.uid:
            self._finish(rid, [])
            return
        self._probe_round(rid, [t], name)

    def _probe_round(self, rid: int, targets: list, name: Optional[str] = None) -> None:
        """Probe ``targets`` (Entries); the first that names a coordinator ends the round."""
        def answer(*a) -> None:
            if name is not None:
                self.silent_since.pop(name, None)  # it answers: a later round waits afresh
            self._round_answer(rid, *a)
        nonce = self._new_nonce(answer)
        self.round["nonce"] = nonce
        cfg = self.config
        for i in range(cfg.num_probes):
            self.ctx.schedule(i * cfg.probe_timeout_s / cfg.num_probes,
                              lambda: self._probe_targets(rid, nonce, targets))
        if name is not None:
            self.silent_since.setdefault(name, self.ctx.now())

        def timeout() -> None:
            if rid == self.round_id and self.round is not None:
                if name is not None and not self.round["found"] and not self._given_up(name):
                    self._probe_round(rid, targets, name)  # silent: a burst of loss, maybe
                    return
                self._finish(rid, list(self.round["found"].values()))
        self.ctx.schedule(cfg.probe_timeout_s, timeout)

    def _given_up(self, name: str) -> bool:
        """Whether a join gave up on file ``name``: its coordinator stayed silent for all of
        ``coordinator_wait_s`` that whole probe timeouts fit in (or the file lists nobody)."""
        since = self.silent_since.get(name)
        return since is not None and \
            self.ctx.now() + self.config.probe_timeout_s > since + self.config.coordinator_wait_s

    def _probe_targets(self, rid: int, nonce: int, targets: list) -> None:
        if rid == self.round_id and self.round is not None:
            for e in targets:
                self._send_probe(e.phys, nonce)

    def _round_answer(self, rid: int, addr, phys, is_coord, joined, vid, coord, coord_phys) -> None:
        r = self.round
        if rid != self.round_id or r is None:
            return
        if joined and (is_coord or coord is not None):
            self._finish(rid, [PingData(addr, phys, bool(is_coord), True,
                                        None if is_coord else coord)])
        else:
            r["found"][addr] = PingData(addr, phys, False, bool(joined), coord)

    def _finish(self, rid: int, found: list) -> None:
        if rid != self.round_id or self.round is None:
            return
        cb = self.round["cb"]
        self.round = None
        self._drop_probes()
        self.ctx.schedule(0, lambda: cb(found))

    def _drop_probes(self) -> None:
        self.pending = {n: f for n, f in self.pending.items() if n == RENDEZVOUS}

    # -- probes -------------------------------------------------------------------------
    def _new_nonce(self, fn: Callable) -> int:
        self.nonce += 1
        self.pending[self.nonce] = fn
        return self.nonce

    def _send_probe(self, phys, nonce: int) -> None:
        me = self.below.down_event(GetPhysical())
        hdr = [PROBE, nonce, self.ctx.local.name, list(me) if me else None]
        self.below.down_event(EmitTo(tuple(phys), Message(None, b"", CONTROL, {1: hdr})))
        self.stats["probes_sent"] += 1

    def _on_probe(self, sender, nonce: int, name, phys) -> None:
        self.stats["probes_received"] += 1
        st = self.status
        if st is None:
            return  # not connecting: nobody to answer for
        self.ctx.book.get(sender.uid, str(name))
        if phys is not None:
            self.below.down_event(AddPhysical(sender, (str(phys[0]), int(phys[1]))))
        me = self.below.down_event(GetPhysical())
        vid = coord_uid = coord_phys = None
        v = st.view
        if v is not None:
            vid = [v.view_id.coord.uid, v.view_id.id]
            coord = v.coordinator
            coord_uid = coord.uid
            coord_phys = me if coord == self.ctx.local else self.below.down_event(GetPhysical(coord))
        hdr = [PROBE_RSP, nonce, self.ctx.local.name, list(me) if me else None, st.is_coord,
               st.joined, vid, coord_uid, list(coord_phys) if coord_phys else None]
        self.below.down(Message(sender, b"", CONTROL, {1: hdr}))

    def _on_probe_rsp(self, sender, h: list) -> None:
        _, nonce, name, phys, is_coord, joined, vid, coord_uid, coord_phys = h
        fn = self.pending.get(nonce)
        if fn is None:
            return
        book = self.ctx.book
        addr = book.get(sender.uid, str(name))
        if phys is not None:
            phys = (str(phys[0]), int(phys[1]))
            self.below.down_event(AddPhysical(addr, phys))
        coord = None
        if coord_uid is not None:
            coord = book.get(coord_uid)
            if coord_phys is not None:
                self.below.down_event(AddPhysical(coord, (str(coord_phys[0]), int(coord_phys[1]))))
        view_id = (book.get(vid[0]), int(vid[1])) if vid is not None else None
        fn(addr, phys, bool(is_coord), bool(joined), view_id, coord, coord_phys)

    # -- traffic ------------------------------------------------------------------------
    def up(self, batch: list) -> None:
        self.up_control(batch, self._handle)

    def _handle(self, m, h: list) -> None:
        typ = h[0]
        if typ == PROBE:
            self._on_probe(m.sender, int(h[1]), h[2], h[3])
        elif typ == PROBE_RSP:
            if len(h) != 9:
                raise ValueError("bad probe response")
            self._on_probe_rsp(m.sender, h)
        elif typ in (0, 1):
            self.stats["ping_ignored"] += 1  # a PING member of the same cluster name
        else:
            self.malformed()

    # -- views --------------------------------------------------------------------------
    def _is_coord(self) -> bool:
        v, local = self.view, self.ctx.local
        return (v is not None and not self.leaving and v.members and v.members[0] == local)

    def _on_view(self, view: View, prev: Optional[View]) -> None:
        local = self.ctx.local
        if local not in view:
            if self.leaving and self.own_name is not None:
                self._delete_own()
            return
        self.rounds = 0
        self.silent_since.clear()
        self.known.update(m.uid for m in view.members)
        for uid in list(self.retained):
            if uid in self.known:
                del self.retained[uid]
        if view.members[0] == local:
            if self.own_name is None:
                self._became_coord(prev)
            if isinstance(view, MergeView):
                self._merge_cleanup(view)
            if self._need_write():
                self._write()
        elif self.own_name is not None:
            # a participant of a MergeView led by another: the merge coordinator deletes our file
            self.own_name, self.own_etag, self.own_exists = None, None, None
            self.written, self.foreign = {}, {}
        self._fetch_missing(view)

    def _became_coord(self, prev: Optional[View]) -> None:
        local = self.ctx.local
        self.own_name = file_name(local.uid)
        self.own_etag, self.written = None, {}
        # a fresh uuid has no file; the first coordinator of a bootstrap file may have one
        self.own_exists = None if self._boot_coord_uid() == local.uid else False
        self.stats["became_coordinator"] += 1
        if prev is not None and prev.members and prev.members[0] != local \
                and prev.members[0] not in self.view:
            # the old coordinator left or crashed: its file goes when it is stale (or it
            # deleted it itself on a graceful leave)
            old = prev.members[0]
            rec = _Foreign(file_name(old.uid), self.ctx.now())
            rec.coord = old
            rec.phys = self.below.down_event(GetPhysical(old))
            rec.counter = prev.view_id.id
            self.foreign.setdefault(rec.name, rec)

    def _need_write(self) -> bool:
        if self.dirty:
            return True
        v = self.view
        for m in v.members:
            if m.uid not in self.written and self._phys_of(m) is not None:
                return True
        return False

    def _phys_of(self, addr) -> Optional[tuple]:
        if addr == self.ctx.local:
            return self.below.down_event(GetPhysical())
        p = self.below.down_event(GetPhysical(addr))
        if p is None:
            for _, mf in self.files.values():
                e = mf.get(addr.uid)
                if e is not None:
                    return e.phys
        return p

    def _fetch_missing(self, view: View) -> None:
        """An address missing from the cache is fetched from the coordinator's file."""
        local = self.ctx.local
        if self.store is None or self.fetching or view.members[0] == local:
            return
        if self.ctx.now() - self.last_fetch < self.config.fetch_interval_s:
            return
        if all(m == local or self.below.down_event(GetPhysical(m)) is not None
               for m in view.members):
            return
        self.fetching, self.last_fetch = True, self.ctx.now()
        self.stats["address_fetches"] += 1

        def done(mf) -> None:
            self.fetching = False
        self._read(file_name(view.members[0].uid), None, done)

    # -- the coordinator's own file -----------------------------------------------------
    def _render_own(self) -> MembersFile:
        v, local = self.view, self.ctx.local
        entries, seen = [], set()
        for m in v.members:
            p = self._phys_of(m)
            if p is None:
                continue
            seen.add(m.uid)
            entries.append(Entry(m.name, m.uid, str(p[0]), int(p[1]), m == local))
        for uid, e in self.retained.items():
            if uid not in seen:
                entries.append(e)
        return MembersFile(entries, view_id=(v.view_id.coord.uid, v.view_id.id))

    def _write(self) -> None:
        if self.store is None or self.own_name is None or not self._is_coord():
            return
        if self.writing or self.write_timer is not None:
            self.dirty = True
            return
        self.writing, self.dirty = True, False
        name = self.own_name
        if self.own_exists is None:  # unknown: read first, then write what is missing
            self._call("get", name, then=lambda r, e: self._on_own_read(name, r, e),
                       own_write=True)
            return
        mf = self._render_own()
        kw = {"if_match": self.own_etag} if self.own_etag else {"if_absent": True}
        self._call("put", name, mf.encode(), then=lambda r, e: self._on_put(name, mf, r, e),
                   own_write=True, **kw)

    def _on_own_read(self, name: str, result, error) -> None:
        self.writing = False
        if self._deferred_delete():
            return
        if error is not None:
            self._retry_write()
            return
        if name != self.own_name:
            return
        self._adopt_own(result)
        # what was asked for while reading is judged against the file as it is now (the
        # first coordinator of a bootstrap file finds every joiner listed: no write)
        self.dirty = False
        if self._need_write():
            self._write()

    def _adopt_own(self, result) -> None:
        """What the store holds as our file: keep the lines of members we never saw."""
        if result is None:
            self.own_exists, self.own_etag, self.written = False, None, {}
            return
        data, etag = result
        mf = self._parse(data, self.own_name, etag)
        self.own_exists, self.own_etag = True, etag
        self.written = mf.by_uid()
        for e in mf:
            if e.uid not in self.known and e.uid != self.ctx.local.uid:
                self.retained[e.uid] = replace(e, coord=False)
        # a line that gives another member as T, or misses us, needs a rewrite
        me = self.written.get(self.ctx.local.uid)
        if me is None or not me.coord or any(e.coord and e.uid != self.ctx.local.uid for e in mf):
            self.written.pop(self.ctx.local.uid, None)

    def _on_put(self, name: str, mf: MembersFile, result, error) -> None:
        self.writing = False
        if self._deferred_delete():
            return
        if name != self.own_name:
            return
        if error is None:
            self.own_etag, self.own_exists = result, True
            self.written = mf.by_uid()
            self.conflicts = 0
            self.stats["files_written"] += 1
            if self.dirty or self._need_write():
                self._write()
        elif isinstance(error, StoreConflict):
            # someone else changed our file: re-read, merge, write again
            self.stats["write_conflicts"] += 1
            self.conflicts += 1
            self.own_exists = None
            self.dirty = True
            if self.conflicts > 5:
                self._retry_write()
            else:
                self._write()
        else:
            self._retry_write()

    def _retry_write(self) -> None:
        self.dirty = True
        if self.write_timer is None:
            def fire() -> None:
                self.write_timer = None
                if self._is_coord():
                    self._write()
            self.write_timer = self.ctx.schedule(self._next_backoff(), fire)

    def _delete_own(self) -> None:
        name = self.own_name
        self.own_name = None
        if self.store is None or name is None:
            return
        if self.writing:
            self.delete_after_write = name
            return
        self._delete(name, "own")

    def _deferred_delete(self) -> bool:
        name, self.delete_after_write = self.delete_after_write, None
        if name is not None:
            self._delete(name, "own")
        return name is not None

    def _delete(self, name: str, why: str, done: Optional[Callable[[], None]] = None) -> None:
        self.stats[f"files_deleted_{why}"] += 1
        self.files.pop(name, None)
        self._call("delete", name, then=lambda r, e: done is not None and done())

    # -- merges and rendezvous ----------------------------------------------------------
    def _merge_cleanup(self, view: MergeView) -> None:
        """The merge coordinator reads the other subgroups' files (addresses into the cache)
        and deletes them; its own file is written next."""
        local = self.ctx.local
        for sg in view.subgroups:
            c = sg.members[0] if sg.members else None
            if c is None or c == local:
                continue
            name = file_name(c.uid)
            self.foreign.pop(name, None)
            self._read(name, None, lambda mf, name=name: mf is not None and self._delete(name, "merged"))

    def _rendezvous(self) -> None:
        if self.store is None or self.listing_busy or not self._is_coord():
            return
        self.listing_busy = True
        self._call("list", then=self._on_rendezvous_list)

    def _on_rendezvous_list(self, listing, error) -> None:
        self.listing_busy = False
        if error is not None or not self._is_coord():
            return
        self.listing = listing
        own = self.own_name
        if own is not None and not self.writing and self.write_timer is None:
            if own not in listing and self.own_exists is not False:
                if self.own_exists:
                    log.warning("[%s %s] own members file %s is gone; writing it again",
                                self.ctx.cluster, self.ctx.local, own)
                    self.stats["own_file_rewritten"] += 1
                self.own_exists, self.own_etag, self.written = False, None, {}
                self._write()
            elif own in listing and listing[own] != self.own_etag:
                self.own_exists = None  # changed by someone else: read and merge
                self._write()
            elif self._need_write():
                self._write()
        names = [n for n in listing if n != own and n.endswith(SUFFIX)]
        for gone in [n for n in self.foreign if n not in listing]:
            del self.foreign[gone]
        for n in names:
            rec = self.foreign.get(n)
            if rec is not None and rec.etag == listing[n]:
                self._judge(rec)
            else:
                etag = listing[n]
                self._read(n, etag, lambda mf, n=n, etag=etag: self._on_foreign_file(n, etag, mf))

    def _on_foreign_file(self, name: str, etag, mf: Optional[MembersFile]) -> None:
        if not self._is_coord():
            return
        if mf is None:
            self.foreign.pop(name, None)
            return
        t = mf.coordinator or mf.get(uid_from_file_name(name) or b"")
        if t is None:
            return  # no coordinator line: nothing to probe (a file nobody maintains)
        now = self.ctx.now()
        rec = self.foreign.get(name)
        if rec is None:
            rec = self.foreign[name] = _Foreign(name, now)
        elif rec.etag != etag:
            rec.deleting = False  # written again after we deleted it, or changed
            if rec.etag is not None:
                rec.since = now  # rewritten: its coordinator was alive recently
        rec.etag = etag
        rec.coord = self.ctx.book.get(t.uid, t.name)
        rec.phys = t.phys
        rec.counter = mf.view_id[1] if mf.view_id else 0
        self._judge(rec)

    def _judge(self, rec: _Foreign) -> None:
        v = self.view
        if rec.deleting or rec.coord is None or v is None:
            return
        if rec.coord == self.ctx.local:
            return
        if rec.coord in v and rec.counter < v.view_id.id:
            # its coordinator joined our view after writing it: the file is obsolete. (A
            # file of a view newer than ours is not: our view is the stale one, its
            # coordinator left it and leads a partition of its own.)
            rec.deleting = True
            self._delete(rec.name, "merged", lambda: self._forget(rec))
            return
        quiet = self.ctx.now() - max(rec.since, rec.alive_at)
        stale = self.config.stale_after_s
        if quiet >= stale and (rec.counter < v.view_id.id or quiet >= 3 * stale):
            rec.deleting = True
            log.warning("[%s %s] removing stale members file %s: coordinator %s silent for "
                        "%.1fs, its view %d older than ours (%d)", self.ctx.cluster,
                        self.ctx.local, rec.name, rec.coord, quiet, rec.counter, v.view_id.id)
            self._delete(rec.name, "stale", lambda: self._forget(rec))

    def _forget(self, rec: _Foreign) -> None:
        """Our delete of its file is done (or failed): forget the record. A file listed
        from now on is new (its coordinator wrote it again) and judged afresh. Kept, the
        record would stay marked deleting, and never be probed again, whenever the file was
        written again with the same content, hence the same etag (a gossip-mode coordinator
        cut off longer than ``stale_after_s`` does so: its list did not change)."""
        if self.foreign.get(rec.name) is rec:
            del self.foreign[rec.name]

    def _probe_foreign(self) -> None:
        if not self._is_coord() or not self.foreign:
            return
        if RENDEZVOUS not in self.pending:
            self.pending[RENDEZVOUS] = self._foreign_answer
        v = self.view
        for rec in self.foreign.values():
            if rec.phys is not None and rec.coord not in v and not rec.deleting:
                self._send_probe(rec.phys, RENDEZVOUS)

    def _foreign_answer(self, addr, phys, is_coord, joined, view_id, coord, coord_phys) -> None:
        v = self.view
        if v is None or not self._is_coord():
            return
        for rec in self.foreign.values():
            if rec.coord == addr and is_coord and joined:
                rec.alive_at = self.ctx.now()
                if phys is not None:
                    rec.phys = phys
        if is_coord and joined and view_id is not None and addr not in v \
                and (view_id[0], view_id[1]) != (v.view_id.coord, v.view_id.id):
            self.stats["merge_infos"] += 1
            self.above.up_event(MergeInfo(addr, view_id[0], view_id[1], True))

    def _targets(self) -> list:
        now, stale = self.ctx.now(), self.config.stale_after_s
        return [rec.phys for rec in self.foreign.values()
                if rec.phys is not None and now - rec.alive_at < stale]

    # -- events -------------------------------------------------------------------------
    def down_event(self, ev: Any) -> Any:
        t = type(ev)
        if t is FindMembers:
            self._find(ev.callback)
            return None
        if t is MembershipStatus:
            self.status = ev
            return None
        if t is DiscoveryTargets:
            return self._targets()
        if t is ViewInstalled:
            prev, self.view = self.view, ev.view
            local = self.ctx.local
            self.status = MembershipStatus(local in ev.view, ev.view.members[0] == local, ev.view)
            res = self.below.down_event(ev)
            self._on_view(ev.view, prev)
            return res
        if t is Leave:
            self.leaving = True
            v = self.view
            if self.own_name is not None and v is not None and tuple(v.members) == (self.ctx.local,):
                self._delete_own()  # the last member: nobody takes over
            return self.below.down_event(ev)
        return self.below.down_event(ev)
