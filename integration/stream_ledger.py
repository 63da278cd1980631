"""The binding ledger of a queue stream: which member each micro-batch partition reads from.

A task of micro-batch ``b`` reading partition ``p`` acquires under the key
``"<stream>/<b>/<p>"`` at one member, which holds the deliveries under that key until the
batch settles; any re-run of the task (a retry, a lost shuffle output, the batch re-run after
a restart from the checkpoint) must read the same member to get the same deliveries back.
The ledger makes that binding once and for all: ``bind`` keeps the first member asked for,
and moves the key to another member only when the bound one failed (died: what it held is
requeued by the group). A batch with a key moved is marked ``rebound``: its output may mix
two readings of one partition, so the sink does not commit it (it releases its jobs).

One detached Ray actor per stream (``raygroups-stream:<group>:<stream>`` in the group's
namespace, no CPU), so that a driver restarted from its checkpoint finds the bindings of the
batch it re-runs. Bounded: a batch's bindings are dropped when it settles (``forget``).
"""
from __future__ import annotations

from typing import Any, Optional


class StreamLedger:
    """The Ray actor (see the module doc)."""

    def __init__(self) -> None:
        self.bound: dict = {}      # batch -> {key: member}
        self.rebound: set = set()  # batches with a key moved to another member

    def bind(self, batch: int, key: str, member: str, failed: Optional[str] = None) -> str:
        """The member ``key`` reads from: the bound one, else ``member`` (bound now). With
        ``failed`` (the bound member failed the caller): ``member`` replaces it."""
        keys = self.bound.setdefault(batch, {})
        cur = keys.get(key)
        if cur is None or (failed is not None and cur == failed):
            if cur is not None:
                self.rebound.add(batch)
            keys[key] = cur = member
        return cur

    def batch(self, batch: int) -> tuple:
        """({key: member}, rebound?) of ``batch``."""
        return dict(self.bound.get(batch, {})), batch in self.rebound

    def forget(self, batch: int) -> None:
        self.bound.pop(batch, None)
        self.rebound.discard(batch)

    def batches(self) -> list:
        return sorted(self.bound)


def ledger_name(cluster: str, stream: str) -> str:
    return f"raygroups-stream:{cluster}:{stream}"


def ledger(cluster: str, stream: str, namespace: str, create: bool = False) -> Any:
    """The stream's ledger actor (created, detached, when ``create`` and missing)."""
    import ray
    name = ledger_name(cluster, stream)
    if not create:
        return ray.get_actor(name, namespace=namespace)
    return ray.remote(StreamLedger).options(
        name=name, namespace=namespace, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=0).remote()
