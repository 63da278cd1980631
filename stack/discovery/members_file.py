"""The members file of JGroups' cloud-store discovery design (JGRP-1841), as text.

One file per coordinator, ``<location>/<cluster>/<coordinator uuid>.list``, one line per member::

    # view 1 7
    A                                      1  192.168.1.5:7800                T
    B   0a6c59fc-7ee0-acd2-2d4b-cf7dd59adb97  192.168.1.5:4569                F
    C                                      2  fe80::21b:21ff:fe07:a3b0:4500   F

``<logical name> <uuid> <ip>:<port> <T|F>``, fields separated by any white space. The uuid is
either a short decimal number (the seeded UUIDs of a bootstrap file: ``1`` is the 16-byte
big-endian integer 1), a full UUID string (with or without dashes, any case), or a compact
form ``render()`` writes: a random UUID (96 random bits, ``Address.random``) in 16 base64url
characters (``CmxZ_H7grNItS899``; case matters), and any other 128-bit UUID in 22
(``CmxZ_H7grNItS8991Zrblw``); a written UUID never starts with ``-`` (``uid_to_text``). The *last* colon separates the port, so IPv6 addresses need no
brackets (``[::1]:7800`` is accepted too). ``T`` marks the coordinator. Lines starting with
``#`` are comments; ``# view <uuid> <counter>`` records the view id the file was written for
(stale-file detection uses it).

The file is for people too: a hand-written or generated file loads, and a malformed line
yields a ``ParseError`` naming the file and the line while every other line still loads.
``render()`` writes one single-spaced line per member (no padding): about 25 bytes per member
with short names and seeded UUIDs, about 35-38 with random UUIDs, short names and IPv4 (the
seed measured ~35; the dashed form would take 57). Coordinator files are named the same way
(``<uuid>.list``: ``1.list``, ``CmxZ_H7grNItS899.list``); names and lines in the dashed or
22-character form, written by hand or by an older version, load as before.
"""
from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

from ..address import RANDOM_BITS, UUID_LEN

SHORT_UUID_LIMIT = 1 << 32
"""UUIDs below this render as decimal numbers (seeded bootstrap UUIDs); others compact."""
RANDOM_LIMIT = 1 << RANDOM_BITS
"""UUIDs below this (random ones) render their low bytes in 16 characters, others in 22."""
RANDOM_BYTES = RANDOM_BITS // 8
COMPACT_LEN = 22
"""Characters of a 16-byte UUID in unpadded base64url (the compact form)."""
SHORT_COMPACT_LEN = RANDOM_BYTES * 4 // 3
"""Characters of a UUID's low ``RANDOM_BYTES`` in base64url (16; no padding needed)."""
_B64URL = re.compile(r"^[A-Za-z0-9_-]+$")
SUFFIX = ".list"
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.\-_]*[A-Za-z0-9])?$")
_WS = re.compile(r"\s+")


def uid_from_text(text: str) -> bytes:
    """``"1"`` -> 16-byte big-endian 1; ``"0a6c59fc-7ee0-..."`` (dashes optional), the compact
    ``"CmxZ_H7grNItS8991Zrblw"`` and, for UUIDs below 2^96, ``"CmxZ_H7grNItS899"`` -> that
    UUID's 16 bytes. Decimal wins over the compact forms, which ``uid_to_text`` never writes
    all in digits; a hex UUID has 32 digits, so the forms cannot be confused."""
    if text.isdigit():
        n = int(text)
        if n >= 1 << 128:
            raise ValueError(f"numeric uuid {text} does not fit 128 bits")
        return n.to_bytes(UUID_LEN, "big")
    if len(text) in (SHORT_COMPACT_LEN, COMPACT_LEN) and _B64URL.match(text):
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        uid = raw.rjust(UUID_LEN, b"\0")
        # 22 characters carry 2 spare bits; only the canonical form is accepted, so one
        # spelling per length (the 22-character spelling of a small uuid loads too)
        if len(raw) in (RANDOM_BYTES, UUID_LEN) and _compact(raw) == text:
            return uid
        raise ValueError(f"not a uuid: {text!r} ({len(text)} characters but not canonical "
                         f"base64url)")
    try:
        return _uuid.UUID(text).bytes
    except ValueError:
        raise ValueError(f"not a uuid: {text!r}") from None


def _compact(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uid_to_text(uid: bytes) -> str:
    """Decimal below ``SHORT_UUID_LIMIT`` (seeded UUIDs); below ``RANDOM_LIMIT`` (random
    UUIDs) the low 12 bytes in 16 base64url characters, unless those are all digits (about
    one UUID in 10^13: it would read as a decimal) or start with ``-`` (one in 64: awkward as
    a file name in a shell); else the 16 bytes in 22 characters, whose last character holds
    the last 2 bits and 4 zero bits (one of ``A``, ``Q``, ``g``, ``w``), so that form never
    reads as a decimal either, and which starts with ``A`` below ``RANDOM_LIMIT``; a 128-bit
    UUID whose 22 characters would start with ``-`` is written dashed."""
    n = int.from_bytes(uid, "big")
    if n < SHORT_UUID_LIMIT:
        return str(n)
    if n < RANDOM_LIMIT:
        text = _compact(uid[UUID_LEN - RANDOM_BYTES:])
        if not text.isdigit() and text[0] != "-":
            return text
    text = _compact(uid)
    return text if text[0] != "-" else str(_uuid.UUID(bytes=uid))


def file_name(uid: bytes) -> str:
    """The members file of the coordinator ``uid``: ``"1.list"``, ``"CmxZ_H7grNItS899.list"``
    (``-`` and ``_`` are safe in file names, S3 keys and Ray KV keys)."""
    return uid_to_text(uid) + SUFFIX


def uid_from_file_name(name: str) -> Optional[bytes]:
    """The coordinator uuid a file is named after, or None for other names."""
    if not name.endswith(SUFFIX):
        return None
    try:
        return uid_from_text(name[:-len(SUFFIX)])
    except ValueError:
        return None


def parse_endpoint(text: str) -> tuple[str, int]:
    """``"192.168.1.5:7800"``, ``"fe80::1:4500"`` (last colon), ``"[::1]:7800"``, ``"host:7800"``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"no port in {text!r} (expected <ip>:<port>)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port {port!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if ":" in host or not _HOSTNAME.match(host):
            raise ValueError(f"bad address {host!r}") from None
    return host, int(port)


@dataclass(frozen=True)
class Entry:
    """One member line."""
    name: str
    uid: bytes
    host: str
    port: int
    coord: bool = False

    @property
    def phys(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def uuid_text(self) -> str:
        return uid_to_text(self.uid)

    def render(self) -> str:
        name = _WS.sub("_", self.name) or "-"
        if name.startswith("#"):
            name = "_" + name[1:]
        return f"{name} {uid_to_text(self.uid)} {self.host}:{self.port} {'T' if self.coord else 'F'}"


@dataclass(frozen=True)
class ParseError:
    """A line that did not load; ``str()`` reads ``source:line: reason: 'text'``."""
    source: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}: {self.text!r}"


@dataclass
class MembersFile:
    entries: list = field(default_factory=list)
    view_id: Optional[tuple] = None
    """(coordinator uid, counter) of the view the file was written for, if recorded."""
    errors: list = field(default_factory=list)
    """ParseErrors of the lines that did not load (``parse`` only)."""
    source: str = ""

    # -- reading --------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: Union[str, bytes], source: str = "<members file>") -> "MembersFile":
        """Every well-formed line becomes an Entry; every malformed one a ParseError (file and
        line named) and is skipped. A duplicate uuid keeps its first line; a second ``T`` line
        loads as ``F``."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        out = cls(source=source)
        seen: dict[bytes, int] = {}
        coord_line = 0
        for no, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                out._comment(line, no, raw)
                continue
            fields = line.split()
            if len(fields) != 4:
                out._error(no, raw, f"expected 4 fields '<name> <uuid> <ip>:<port> <T|F>', "
                                    f"got {len(fields)}")
                continue
            name, uid_text, endpoint, flag = fields
            try:
                uid = uid_from_text(uid_text)
                host, port = parse_endpoint(endpoint)
            except ValueError as e:
                out._error(no, raw, str(e))
                continue
            if flag.upper() not in ("T", "F"):
                out._error(no, raw, f"coordinator flag is T or F, not {flag!r}")
                continue
            coord = flag.upper() == "T"
            if uid in seen:
                out._error(no, raw, f"duplicate uuid {uid_text} (line {seen[uid]} kept)")
                continue
            if coord and coord_line:
                out._error(no, raw, f"second coordinator (line {coord_line} kept as T); "
                                    f"loaded as F")
                coord = False
            elif coord:
                coord_line = no
            seen[uid] = no
            out.entries.append(Entry("" if name == "-" else name, uid, host, port, coord))
        return out

    def _comment(self, line: str, no: int, raw: str) -> None:
        words = line[1:].split()
        if words[:1] == ["view"]:
            try:
                if len(words) != 3:
                    raise ValueError("expected '# view <uuid> <counter>'")
                self.view_id = (uid_from_text(words[1]), int(words[2]))
            except ValueError as e:
                self._error(no, raw, str(e))

    def _error(self, no: int, raw: str, reason: str) -> None:
        self.errors.append(ParseError(self.source, no, raw, reason))

    # -- writing --------------------------------------------------------------------------
    def render(self) -> str:
        lines = []
        if self.view_id is not None:
            lines.append(f"# view {uid_to_text(self.view_id[0])} {int(self.view_id[1])}")
        lines.extend(e.render() for e in self.entries)
        return "\n".join(lines) + "\n" if lines else ""

    def encode(self) -> bytes:
        return self.render().encode()

    # -- queries --------------------------------------------------------------------------
    @property
    def coordinator(self) -> Optional[Entry]:
        for e in self.entries:
            if e.coord:
                return e
        return None

    def get(self, uid: bytes) -> Optional[Entry]:
        for e in self.entries:
            if e.uid == uid:
                return e
        return None

    def by_uid(self) -> dict:
        return {e.uid: e for e in self.entries}

    def by_name(self, name: str) -> Optional[Entry]:
        for e in self.entries:
            if e.name == name:
                return e
        return None

    def line_bytes(self) -> float:
        """Average bytes per member line (newline included)."""
        if not self.entries:
            return 0.0
        return sum(len(e.render().encode()) + 1 for e in self.entries) / len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)
