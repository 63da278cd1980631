"""Typed errors raised to applications."""


class RaygroupsError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(RaygroupsError, ValueError):
    """A stack setting no member can run with; the message names the setting and the rule."""


class MessageTooLarge(RaygroupsError):
    """The payload does not fit a datagram and no fragmentation layer is configured."""


class NotConnected(RaygroupsError):
    """The channel has not joined a group (or has left it)."""


class JoinTimeout(RaygroupsError):
    """Joining the group did not finish in time."""


class JoinRejected(RaygroupsError):
    """The group's coordinator refused this member: a setting every member must share
    (``GmsConfig.agreed``) differs, or its wire versions (``transport.wire_versions``) have
    none in common with the group's; the message names each one, the group's value first."""


class GroupClosed(RaygroupsError):
    """The channel was closed."""


class NotPrimary(RaygroupsError):
    """This member is not in a primary component, so the send cannot go out (raised at once
    with ``primary__block_sends=False``, or after ``primary__send_timeout_s``)."""
