"""Rolling upgrades: members of adjacent versions coexist while the group is upgraded one
member at a time (MySQL Group Replication's design: every member advertises the wire versions
it speaks, and the group speaks the highest one they all have; see docs/architecture.md,
"Versions and rolling upgrades").

``rolling_upgrade(group, stack_options=..., runtime_env=...)`` takes the members in turn, the
view's coordinator last. Each leaves gracefully (its last multicasts are flushed to the
others), its actor is killed, and a new member actor under the same name starts on the same
node and port with the new stack options (``{"transport__wire_versions": (1, 2)}``) and/or a
new Ray runtime environment (``{"py_modules": ["gcs://raygroups-<new>.whl"]}``: the new build;
Ray uploads a local wheel only for a job, so ``raygroups upgrade --wheel`` gives it to its own
``ray.init`` and passes the package's URI on),
with a fresh UUID. The next member goes only once every member is in one view again, so the
group keeps a primary component throughout: one member of N is out at a time. A node follower
(``follow_nodes``) is told first, so that a member it launches meanwhile is the new build
(and the upgrade then attaches to it).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Optional

import ray

from .errors import JoinRejected
from .placement import actor_name


def _say(progress: Optional[Callable[[str], None]], text: str) -> None:
    if progress is not None:
        progress(text)


def upgrade_order(view_members: list, names: list) -> list:
    """The members to replace, the view's coordinator (its first member) last, so that the
    group changes coordinator once; members not in the view first (they hold nothing)."""
    rank = {n: i for i, n in enumerate(view_members)}
    coord = view_members[0] if view_members else None
    return sorted(names, key=lambda n: (n == coord, n in rank, rank.get(n, -1)))


def rolling_upgrade(group: Any, stack_options: Optional[dict] = None,
                    runtime_env: Optional[dict] = None, timeout: float = 60.0,
                    progress: Optional[Callable[[str], None]] = None) -> list:
    """Replace every member of ``group`` in turn (see the module doc); the names in the order
    replaced. ``stack_options``: ``StackConfig.with_options`` keys applied to each member's
    config; ``runtime_env``: the new actors' Ray runtime environment. Raises what a launch
    raises (``JoinRejected`` when the group refuses the new build: no wire version in common;
    ``JoinTimeout``), leaving the members replaced so far in place."""
    from .group import _member_class
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    if not stack_options and not runtime_env:
        raise ValueError("an upgrade needs stack_options or a runtime_env")
    if runtime_env:  # checked before any member leaves
        try:
            _member_class().options(runtime_env=runtime_env)
        except ValueError as e:
            raise ValueError(f"runtime_env: {e} Ray uploads a local file (a wheel) only for a "
                             "job: give it to ray.init(runtime_env=...) and pass the job's "
                             "ray.get_runtime_context().runtime_env here, or use `raygroups "
                             "upgrade --wheel`") from None
    from .follower import update_follower
    # a follower relaunching a member meanwhile (its sweep) launches the new build too
    update_follower(group.cluster, group.namespace, stack_options, runtime_env)
    names = group.member_names()
    if not names:
        raise ValueError(f"group {group.cluster!r} has no member to upgrade")
    view = group.view()
    order = upgrade_order([m.name for m in view.members] if view is not None else [], names)
    for name in order:
        h = group._handle(name)
        spec = ray.get(h.spec_of.remote(), timeout=timeout)
        node_id = ray.get(h.info.remote(), timeout=timeout)["node_id"]
        cfg = spec.config.with_options(**{**(stack_options or {}), "primary__bootstrap": False})
        # the replacement joins a running group: it never takes part in a first start
        if cfg.store is not None and cfg.store.bootstrap is not None:
            # a replaced member never takes its bootstrap line's seeded UUID again
            cfg = cfg.with_options(store__use_bootstrap_identity=False)
        new = replace(spec, config=cfg, wait_for=None)
        _say(progress, f"{name}: leaving")
        group.leave(name)
        ray.kill(h, no_restart=True)
        group._wait_gone({name}, timeout)
        opts: dict = dict(name=actor_name(group.cluster, name), namespace=group.namespace,
                          get_if_exists=True, num_cpus=0, max_restarts=spec.extra.get("max_restarts", -1),
                          scheduling_strategy=NodeAffinitySchedulingStrategy(node_id,
                                                                             soft=False))
        if spec.extra.get("detached"):
            opts["lifetime"] = "detached"
        if runtime_env:
            opts["runtime_env"] = runtime_env
        start = time.monotonic()
        group._handles[name] = _member_class().options(**opts).remote(new)
        try:
            group._await_joined([name], timeout, progress)
        except JoinRejected:
            group._remove_rejected([name])  # the group goes on without it
            raise
        group._await_agreement(set(names), max(timeout - (time.monotonic() - start), 1.0),
                               progress)
        _say(progress, f"{name}: upgraded")
    return order
