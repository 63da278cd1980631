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


class JournalError(RaygroupsError):
    """The journal (stack/runtime/journal.py) cannot go on; the message says why and what
    is durable."""


class JournalMismatch(JournalError):
    """The journal's directory holds files written for another group name."""


class JournalCorrupt(JournalError):
    """Damage that is not a torn tail: a bad snapshot, a gap between files, a bad record
    with later segments after it. Nothing is dropped; a person must look."""


class JournalFull(JournalError):
    """The disk (or quota) is full (ENOSPC/EDQUOT). Nothing past ``durable`` was reported
    durable; after a failed segment write or fsync the journal refuses appends until reopened."""


class JournalFailed(JournalError):
    """Another I/O error on a segment write or fsync; the journal refuses appends until
    reopened (a failed fsync is not retried: the page cache may have dropped the data)."""


class JournalBacklog(JournalError):
    """``append`` would hold more than ``JournalConfig.max_unsynced_bytes`` not yet synced:
    call ``sync()`` and append again."""


class NotPrimary(RaygroupsError):
    """This member is not in a primary component, so the send cannot go out (raised at once
    with ``primary__block_sends=False``, or after ``primary__send_timeout_s``)."""
