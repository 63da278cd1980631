"""The members file format (seed 000): the seed's example verbatim, IPv4 and IPv6 (the last
colon separates the port), short seeded and full UUIDs, a malformed hand-edited line reported
with file and line while the rest loads, render/parse round trips, bytes per member."""
import base64
import random
import uuid

from hypothesis import given, strategies as st

from raygroups.stack.address import Address
from raygroups.stack.discovery import Entry, MembersFile
from raygroups.stack.discovery.bootstrap import column_name, generate_bootstrap
from raygroups.stack.discovery.members_file import (file_name, parse_endpoint, uid_from_file_name,
                                                    uid_from_text, uid_to_text)

SEED_EXAMPLE = """\
       A                                      1  192.168.1.5:7800                T
       B   0a6c59fc-7ee0-acd2-2d4b-cf7dd59adb97  192.168.1.5:4569                F
       C                                      2  fe80::21b:21ff:fe07:a3b0:4500   F
"""


def u(n: int) -> bytes:
    return n.to_bytes(16, "big")


def test_the_seeds_example_verbatim():
    mf = MembersFile.parse(SEED_EXAMPLE, source="1.list")
    assert mf.errors == []
    a, b, c = mf.entries
    assert a == Entry("A", u(1), "192.168.1.5", 7800, True)
    assert b == Entry("B", uuid.UUID("0a6c59fc-7ee0-acd2-2d4b-cf7dd59adb97").bytes,
                      "192.168.1.5", 4569, False)
    # "The last semicolon separates the IP address from the port, so the port is 4500"
    assert c == Entry("C", u(2), "fe80::21b:21ff:fe07:a3b0", 4500, False)
    assert mf.coordinator == a
    # and it renders back to the same members, one single-spaced line each
    again = MembersFile.parse(mf.render())
    assert again.entries == mf.entries
    assert mf.render().splitlines()[2] == "C 2 fe80::21b:21ff:fe07:a3b0:4500 F"


def test_uuid_forms():
    assert uid_from_text("1") == u(1)
    assert uid_to_text(u(1)) == "1"
    full = "0a6c59fc-7ee0-acd2-2d4b-cf7dd59adb97"
    # a full 128-bit UUID renders in 22 base64url characters, and reads back
    assert uid_to_text(uid_from_text(full)) == "CmxZ_H7grNItS8991Zrblw"
    assert uid_from_text("CmxZ_H7grNItS8991Zrblw") == uuid.UUID(full).bytes
    # what people write by hand loads exactly as before: dashed, undashed, upper case
    assert uid_from_text(full.replace("-", "")) == uid_from_text(full)
    assert uid_from_text(full.upper()) == uid_from_text(full)
    assert file_name(u(1)) == "1.list"
    assert uid_from_file_name(full + ".list") == uid_from_text(full)
    assert file_name(uid_from_text(full)) == "CmxZ_H7grNItS8991Zrblw.list"
    assert uid_from_file_name("notes.txt") is None and uid_from_file_name("x.list") is None


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_compact_uuids_round_trip_and_stay_unambiguous():
    seed = 5
    print(f"seed {seed}")
    rng = random.Random(seed)
    longer = {22: 0, 16: 0}   # how many of each kind took the longer form
    for _ in range(2000):
        full = rng.getrandbits(128).to_bytes(16, "big")  # a 128-bit uuid, written by hand
        rnd = Address.random("x", rng).uid                # what a member takes: 96 bits
        for uid, length in ((full, 22), (rnd, 16)):
            text = uid_to_text(uid)
            # never all digits, never a leading "-" (then the next longer form)
            assert not text.isdigit() and not text.startswith("-"), text
            if len(text) != length:
                long = b64(uid) if length == 16 else str(uuid.UUID(bytes=uid))
                assert b64(uid[-length * 3 // 4:]).startswith("-") and text == long, text
                longer[length] += 1
            assert uid_from_text(text) == uid
            assert uid_from_file_name(file_name(uid)) == uid
            # the other spellings of the same uuid still load
            dashed = str(uuid.UUID(bytes=uid))
            assert uid_from_text(dashed) == uid == uid_from_text(dashed.replace("-", ""))
        assert b64(full)[-1] in "AQgw"
        # a random uuid written by a version that used 22 characters still loads
        assert uid_from_text(b64(rnd)) == rnd
    # about one in 64 of either kind takes the longer form (2,000 / 64 = 31)
    assert all(10 < k < 60 for k in longer.values()), longer
    # decimal short ids (seeded bootstrap UUIDs) stay decimal, also at the 2^32 boundary
    assert uid_to_text(u((1 << 32) - 1)) == str((1 << 32) - 1)
    assert len(uid_to_text(u(1 << 32))) == 16
    assert len(uid_to_text(u((1 << 96) - 1))) == 16 and len(uid_to_text(u(1 << 96))) == 22
    assert uid_from_text(str(1 << 40)) == u(1 << 40)  # a long decimal by hand: still decimal
    # the 22-character form is never all digits (its last character is one of A, Q, g, w);
    # a uuid below 2^96 whose 16 characters would all be digits is written in 22 instead
    assert uid_to_text(base64.urlsafe_b64decode("123456789012345678901w==")) == \
        "123456789012345678901w"
    digits = base64.urlsafe_b64decode("1234567890123456").rjust(16, b"\0")
    assert uid_to_text(digits) == "AAAAANdt-Oeu_PdNdt-Oeg"
    assert uid_from_text(uid_to_text(digits)) == digits
    assert uid_from_text("1234567890123456") == u(1234567890123456)  # digits stay decimal
    # a 22-character word that is not the canonical encoding of 16 bytes is an error (its
    # spare bits must be zero), and so is a compact word of another length
    for bad in ("CmxZ_H7grNItS8991Zrblx", "CmxZ_H7grNItS8991Zrbl!", "CmxZ_H7grNItS8991Zrbl",
                "CmxZ_H7grNItS89!", "CmxZ_H7grNItS89"):
        try:
            uid_from_text(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(bad)
    mf = MembersFile.parse("A CmxZ_H7grNItS8991Zrblw 10.0.0.1:7800 T\n"
                           "B 0a6c59fc7ee0acd22d4bcf7dd59adb98 10.0.0.2:7800 F\n")
    assert mf.errors == [] and mf.entries[0].uid == uuid.UUID("0a6c59fc-7ee0-acd2-2d4b-cf7dd59adb97").bytes
    assert mf.render().splitlines()[1].split()[1] == "CmxZ_H7grNItS8991ZrbmA"


def test_endpoints_ipv4_ipv6_hostnames():
    assert parse_endpoint("10.0.0.1:7800") == ("10.0.0.1", 7800)
    assert parse_endpoint("::1:7800") == ("::1", 7800)
    assert parse_endpoint("[::1]:7800") == ("::1", 7800)
    assert parse_endpoint("2001:db8::7:45588") == ("2001:db8::7", 45588)
    assert parse_endpoint("node-3.example.com:7800") == ("node-3.example.com", 7800)
    for bad in ("10.0.0.1", "10.0.0.1:", "10.0.0.1:99999", ":7800", "a b:1", "10.0.0.1:x"):
        try:
            parse_endpoint(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")


def test_malformed_lines_are_reported_with_file_and_line_and_the_rest_loads():
    text = """# written by hand
A 1 10.0.0.1:7800 T
B two 10.0.0.2:7800 F
C 3 10.0.0.3 F
D 4 10.0.0.4:7800 X
E 5 10.0.0.5:7800 F extra
F 6 10.0.0.6:7800 F

G 7 10.0.0.7:7800 T
H 6 10.0.0.8:7800 F
# view 1 notanumber
I 9 fe80::1:7809 F
"""
    mf = MembersFile.parse(text, source="/shared/dir/c1/1.list")
    assert [e.name for e in mf] == ["A", "F", "G", "I"]
    assert [e.coord for e in mf] == [True, False, False, False]  # a second T loads as F
    lines = {e.line: str(e) for e in mf.errors}
    assert sorted(lines) == [3, 4, 5, 6, 9, 10, 11]
    for no, msg in lines.items():
        assert msg.startswith(f"/shared/dir/c1/1.list:{no}: "), msg
    assert "not a uuid" in lines[3]
    assert "no port" in lines[4]
    assert "T or F" in lines[5]
    assert "4 fields" in lines[6]
    assert "second coordinator" in lines[9]
    assert "duplicate uuid 6 (line 7 kept)" in lines[10]
    assert mf.view_id is None


def test_view_comment_and_bytes():
    mf = MembersFile([Entry("A", u(1), "10.0.0.1", 7800, True)], view_id=(u(1), 12))
    text = mf.render()
    assert text == "# view 1 12\nA 1 10.0.0.1:7800 T\n"
    assert MembersFile.parse(text).view_id == (u(1), 12)
    assert MembersFile.parse(b"A 1 10.0.0.1:7800 T\n").entries == mf.entries  # bytes too
    assert MembersFile.parse("").entries == [] and MembersFile().render() == ""


def test_bytes_per_member_with_short_names():
    # a bootstrap file for 1,000 nodes: the seed's ~35 B/member, our budget 40
    nodes = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(1000)]
    mf = generate_bootstrap(nodes, "c1")
    assert len(mf) == 1000 and mf.entries[0].coord and mf.entries[999].name == "ALL"
    assert mf.line_bytes() <= 40, mf.line_bytes()
    assert len(mf.render().encode()) / len(mf) <= 40
    # the members' random UUIDs take 16 characters (96 bits in base64url): about 37 B with
    # these addresses, within the 40 B budget (the dashed form took 56)
    seed = 7
    print(f"seed {seed}")
    rng = random.Random(seed)
    rnd = MembersFile([Entry(column_name(i), Address.random("", rng).uid, ip, 7800)
                       for i, ip in enumerate(nodes)])
    assert rnd.line_bytes() <= 40, rnd.line_bytes()
    assert len(rnd.render().encode()) / len(rnd) <= 40
    assert MembersFile.parse(rnd.render()).entries == rnd.entries


def test_names_are_sanitised_on_render():
    mf = MembersFile([Entry("node one", u(1), "10.0.0.1", 1, True), Entry("#x", u(2), "::1", 2),
                      Entry("", u(3), "10.0.0.3", 3)])
    back = MembersFile.parse(mf.render())
    assert back.errors == []
    assert [e.name for e in back] == ["node_one", "_x", ""]


def test_generate_bootstrap_from_ray_nodes():
    nodes = [
        {"NodeID": "b", "Alive": True, "NodeManagerAddress": "10.0.0.2", "Resources": {}},
        {"NodeID": "c", "Alive": False, "NodeManagerAddress": "10.0.0.3", "Resources": {}},
        {"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.9",
         "Resources": {"node:__internal_head__": 1.0}},
    ]
    mf = generate_bootstrap(nodes, "c1", port=7900, per_node=2)
    assert mf.render() == ("A 1 10.0.0.9:7900 T\nB 2 10.0.0.9:7901 F\n"
                           "C 3 10.0.0.2:7900 F\nD 4 10.0.0.2:7901 F\n")
    assert mf.source == "c1/1.list"


names = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126,
                                       blacklist_characters="#"), min_size=1, max_size=8
                ).filter(lambda s: s != "-")  # "-" stands for an empty name
uids = st.one_of(st.integers(0, (1 << 32) - 1).map(lambda n: n.to_bytes(16, "big")),
                 st.integers(1 << 32, (1 << 96) - 1).map(lambda n: n.to_bytes(16, "big")),
                 st.binary(min_size=16, max_size=16))
hosts = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))
entries = st.builds(Entry, names, uids, hosts, st.integers(1, 65535), st.booleans())


@given(st.lists(entries, max_size=20, unique_by=lambda e: e.uid),
       st.one_of(st.none(), st.tuples(uids, st.integers(0, 1 << 40))))
def test_render_parse_round_trip(es, view_id):
    seen_t = False
    fixed = []
    for e in es:  # one coordinator at most, as the writer guarantees
        fixed.append(Entry(e.name, e.uid, e.host, e.port, e.coord and not seen_t))
        seen_t = seen_t or e.coord
    mf = MembersFile(fixed, view_id=view_id)
    back = MembersFile.parse(mf.render(), source="x")
    assert back.errors == []
    assert back.entries == mf.entries
    assert back.view_id == view_id
    assert back.render() == mf.render()


@given(st.text(max_size=400))
def test_parse_never_raises(text):
    mf = MembersFile.parse(text)
    assert all(isinstance(e, Entry) for e in mf)
    MembersFile.parse(mf.render())
