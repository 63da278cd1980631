"""``ViewFeed``: a driver-side subscription to a group's views, for Spark pipelines.

```python
feed = ViewFeed(spark, "orders")             # follows the group's views from the driver
view = feed.current()                        # a ViewSnapshot: the agreed view
bc = feed.broadcast()                        # the same, as a Spark broadcast (per view id)
feed.wait_for(lambda v: len(v.members) >= 3)
feed.on_change(lambda old, new: replan(new)) # on a dispatcher thread, in view order
view = feed.wait_stable(quiet_s=2.0)         # no view change for 2 s: start the stage
```

A thread long-polls a member actor (``Group.view_events``, i.e. ``MemberActor.wait_for_view``):
the member answers as soon as it installs a newer view. When that member dies or leaves, the
poll continues at another member from the last view seen, so no view is repeated or skipped
(views are ordered by id). When the whole group is gone for a while the thread keeps trying
to attach again (``FeedConfig.retry_s``) until ``close()``.

Buffers are bounded: the history of snapshots (``FeedConfig.history``) and the callbacks'
queue (``FeedConfig.max_pending``; when callbacks fall that far behind, the two oldest
changes are merged into one, old view of the first to new view of the second, and counted).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .snapshot import ViewSnapshot

log = logging.getLogger("raygroups.integration")


@dataclass
class FeedConfig:
    poll_s: float = 10.0
    """Seconds one long poll waits at a member before asking again (a new view answers at
    once; this only bounds how long a silently hung member holds the feed)."""
    retry_s: float = 0.5
    """Pause before attaching again when no member of the group answers."""
    history: int = 1000
    """Snapshots kept in ``history()``."""
    max_pending: int = 1000
    """View changes queued for ``on_change`` callbacks; beyond, the oldest are merged."""
    first_view_timeout_s: float = 60.0
    """How long ``current()`` waits for the first view by default."""
    http_urls: bool = True
    """Collect the members' HTTP API addresses into each snapshot (one Ray call per member
    after each change, off the feed's path), for ``ViewSnapshot.latest(via="http")``."""


class ViewFeed:
    """Follows ``group`` (a name or a ``Group``) from this driver. ``spark``: the
    SparkSession that ``broadcast()`` uses (None: no broadcasts)."""

    def __init__(self, spark: Any, group: Any, namespace: Optional[str] = None,
                 config: Optional[FeedConfig] = None):
        import ray

        from raygroups.actors import Group
        from raygroups.actors.placement import NAMESPACE
        self.spark = spark
        self.cluster = group if isinstance(group, str) else group.cluster
        self.namespace = namespace or (NAMESPACE if isinstance(group, str) else group.namespace)
        self.config = config or FeedConfig()
        if not ray.is_initialized():
            ray.init()
        self.gcs_address = ray.get_runtime_context().gcs_address
        self._group_cls = Group
        self._cond = threading.Condition()
        self._current: Optional[ViewSnapshot] = None
        self._changed_at = time.monotonic()
        self._history: collections.deque = collections.deque(maxlen=self.config.history)
        self._urls: tuple = ()
        self._callbacks: list = []
        self._pending: collections.deque = collections.deque()
        self._broadcast: Optional[tuple] = None   # (view key, Broadcast)
        self._closed = False
        self.stats = {"views": 0, "resubscribed": 0, "merged_changes": 0,
                      "callback_errors": 0, "attach_failures": 0}
        self._thread = threading.Thread(target=self._follow, daemon=True,
                                        name=f"ViewFeed-{self.cluster}")
        self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                            name=f"ViewFeed-{self.cluster}-callbacks")
        self._thread.start()
        self._dispatcher.start()

    def __repr__(self) -> str:
        v = self._current
        return f"ViewFeed({self.cluster!r}, view={v.label if v else None})"

    def __enter__(self) -> "ViewFeed":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the subscription thread ----------------------------------------------------------
    def _follow(self) -> None:
        last = None      # ViewId of the last view seen
        source = None
        import ray
        while not self._closed:
            if not ray.is_initialized():
                return  # Ray was shut down here: attach would start it again
            try:
                g = self._group_cls.attach(self.cluster, self.namespace)
                self._refresh_urls(g)
                for e in g.view_events(after=last, poll_s=self.config.poll_s):
                    if self._closed:
                        return
                    last = e["view"].view_id
                    if source is not None and e["member"] != source:
                        self.stats["resubscribed"] += 1
                    source = e["member"]
                    self._publish(ViewSnapshot.of(
                        e["view"], self.cluster, installed_at=e["installed_at"],
                        seen_at=time.time(), source=e["member"], namespace=self.namespace,
                        gcs_address=self.gcs_address, http_urls=self._urls))
                    if self.config.http_urls:
                        self._refresh_urls(g)
            except Exception as e:  # no member answers (NoSuchGroup, ...): attach again
                self.stats["attach_failures"] += 1
                log.debug("view feed of %s: %s; attaching again", self.cluster, e)
            if not self._closed:
                time.sleep(self.config.retry_s)

    def _refresh_urls(self, g: Any) -> None:
        if not self.config.http_urls:
            return
        try:
            self._urls = tuple(sorted(g.status_urls().items()))
        except Exception as e:
            log.debug("no HTTP URLs of %s: %s", self.cluster, e)

    def _publish(self, snap: ViewSnapshot) -> None:
        with self._cond:
            old = self._current
            self._current = snap
            self._changed_at = time.monotonic()
            self._history.append(snap)
            self.stats["views"] += 1
            if old is not None and self._callbacks:
                if len(self._pending) >= self.config.max_pending:
                    a_old, _ = self._pending.popleft()
                    _, b_new = self._pending.popleft()
                    self._pending.appendleft((a_old, b_new))
                    self.stats["merged_changes"] += 1
                self._pending.append((old, snap))
            self._cond.notify_all()

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                old, new = self._pending.popleft()
                callbacks = list(self._callbacks)
            for cb in callbacks:
                try:
                    cb(old, new)
                except Exception:
                    self.stats["callback_errors"] += 1
                    log.exception("view feed callback failed")

    # -- reading --------------------------------------------------------------------------
    def current(self, timeout: Optional[float] = None) -> ViewSnapshot:
        """The latest view seen (waits for the first one, up to ``timeout`` s, default
        ``FeedConfig.first_view_timeout_s``; TimeoutError)."""
        snap = self._current
        if snap is not None:
            return snap
        return self.wait_for(lambda v: True, timeout)

    def wait_for(self, predicate: Callable[[ViewSnapshot], bool],
                 timeout: Optional[float] = None) -> ViewSnapshot:
        """The first view, from the current one on, for which ``predicate(view)`` holds.
        Raises TimeoutError after ``timeout`` s (default ``first_view_timeout_s``)."""
        timeout = self.config.first_view_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                snap = self._current
                if snap is not None and predicate(snap):
                    return snap
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise TimeoutError(f"no view of {self.cluster!r} matched in {timeout}s "
                                       f"(last: {snap.label if snap else None})")
                self._cond.wait(left)

    def wait_stable(self, quiet_s: float = 2.0, timeout: Optional[float] = None,
                    primary: bool = True) -> ViewSnapshot:
        """The stable-view barrier: the current view once no view change came for
        ``quiet_s`` s (and, with ``primary``, it is the primary component), so that a stage
        does not start on a view about to change. TimeoutError after ``timeout`` s (default
        ``first_view_timeout_s`` + ``quiet_s``)."""
        timeout = (self.config.first_view_timeout_s + quiet_s) if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                snap = self._current
                now = time.monotonic()
                quiet = now - self._changed_at
                if snap is not None and quiet >= quiet_s and (snap.primary or not primary):
                    return snap
                left = deadline - now
                if left <= 0 or self._closed:
                    raise TimeoutError(f"the view of {self.cluster!r} was not stable for "
                                       f"{quiet_s}s within {timeout}s")
                # quiet but not primary: wait for the next view; else for the quiet time
                self._cond.wait(left if quiet >= quiet_s else min(left, quiet_s - quiet))

    def on_change(self, callback: Callable[[ViewSnapshot, ViewSnapshot], Any]) -> Callable:
        """Call ``callback(old, new)`` on every view change after now (on the feed's
        dispatcher thread, in order). Returns a function that unsubscribes it."""
        with self._cond:
            self._callbacks.append(callback)

        def cancel() -> None:
            with self._cond:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
        return cancel

    def history(self) -> list:
        """The snapshots seen, oldest first (at most ``FeedConfig.history``)."""
        with self._cond:
            return list(self._history)

    def quiet_for(self) -> float:
        """Seconds since the last view change."""
        return time.monotonic() - self._changed_at

    def broadcast(self) -> Any:
        """The current view as a Spark broadcast variable (one per view id; the previous
        one is unpersisted). Tasks read ``bc.value`` and can ``bc.value.check()``."""
        if self.spark is None:
            raise RuntimeError("this ViewFeed has no SparkSession")
        snap = self.current()
        with self._cond:
            held = self._broadcast
            if held is not None and held[0] == snap.key:
                return held[1]
            bc = self.spark.sparkContext.broadcast(snap)
            self._broadcast = (snap.key, bc)
        if held is not None:
            try:
                held[1].unpersist(blocking=False)
            except Exception:
                pass
        return bc

    def close(self) -> None:
        """Stop following. No callback starts after this returns (a callback running now
        finishes first, unless close() is called from it); the subscription thread ends
        when its current long-poll does (at most ``FeedConfig.poll_s``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join()
