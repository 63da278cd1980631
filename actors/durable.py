"""Where a durable group's members journal (the Qpid new-cluster design's persistent
cluster): ``Group.launch(..., durable=True, journal_dir=None)``.

Every data member of a durable group journals all its queues in one directory,

    <journal_dir or the node's Ray temp dir>/raygroups/journal/<group>/<member name>

(the node's Ray temp dir, ``/tmp/ray`` by default, outlives a Ray session on that node and
an actor Ray restarts there; ``ray_compat.node_temp_dir``). Member names come from the
node (``placement``: ``<host name>-<k>``), so a group launched again under its name on the
same nodes finds its journals again. Arbitrators hold no queue and never journal.

``MemberSpec.extra["durable"]`` carries the setting: ``{"journal_dir": base or None}``.
"""
from __future__ import annotations

import os
import re
from typing import Optional

SUBDIR = ("raygroups", "journal")


def _component(text: str) -> str:
    """``text`` as one safe path component (never a separator, never "." or "..")."""
    out = re.sub(r"[^A-Za-z0-9_.@+=-]", "_", text)
    return "_" + out if out in ("", ".", "..") else out


def journal_path(base: str, cluster: str, member: str) -> str:
    """The journal directory of ``member`` of ``cluster`` under ``base``."""
    return os.path.join(base, *SUBDIR, _component(cluster), _component(member))


def spec_extra(journal_dir: Optional[str]) -> dict:
    """The member spec's ``extra`` entry of a durable data member."""
    if journal_dir is not None and not isinstance(journal_dir, (str, os.PathLike)):
        raise ValueError(f"journal_dir must be a path, not {journal_dir!r}")
    base = os.path.abspath(os.fspath(journal_dir)) if journal_dir is not None else None
    return {"durable": {"journal_dir": base}}


def member_journal_dir(extra: dict, cluster: str, member: str) -> Optional[str]:
    """This member's journal directory (created), or None when it does not journal. On the
    member's own node: the default base is that node's Ray temp dir."""
    durable = extra.get("durable")
    if not durable or (extra.get("workqueue") or {}).get("arbitrator"):
        return None
    base = durable.get("journal_dir")
    if base is None:
        from .ray_compat import node_temp_dir
        base = node_temp_dir()
    path = journal_path(base, cluster, member)
    os.makedirs(path, exist_ok=True)
    return path
