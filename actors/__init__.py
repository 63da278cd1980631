"""Ray actors for raygroups: member actors, the Group handle, HTTP API, CLI."""

from .kv_store import register as _register_kv_store

_register_kv_store()  # "ray-kv://" discovery stores (Ray's internal KV), see kv_store.py

from .errors import (GroupClosed, JoinRejected, JoinTimeout, NoSuchGroup, NotMember,  # noqa: E402
                     RotationIncomplete)

__all__ = ["Group", "GroupClosed", "JoinRejected", "JoinTimeout", "MemberActor", "NoSuchGroup",
           "NotMember", "RotationIncomplete"]


def __getattr__(name: str):
    """``Group`` and ``MemberActor`` import ray; loaded on first use, so that the CLI can set
    Ray's environment (loopback clusters) before ray is imported."""
    if name == "Group":
        from .group import Group
        return Group
    if name == "MemberActor":
        from .member import MemberActor
        return MemberActor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
