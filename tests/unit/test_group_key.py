"""``actors/group_key.member_ring``: which key ring a starting member uses, given the one it
was created with and the group's ring in Ray's KV (no Ray needed: a pure function)."""
import pytest

from raygroups.actors.group_key import member_ring, ring_ids
from raygroups.stack.auth import key_id

OLD, NEW = b"o" * 32, b"n" * 32


def test_nothing_stored_keeps_the_given_key():
    assert member_ring(OLD, None, restarted=False) is OLD
    assert member_ring(None, None, restarted=True) is None


def test_a_key_the_group_still_accepts_takes_the_whole_ring():
    assert member_ring(OLD, [OLD, NEW], restarted=False) == [OLD, NEW]
    assert member_ring([OLD], [NEW, OLD], restarted=False) == [NEW, OLD]


def test_a_restarted_member_takes_the_ring_it_missed():
    assert member_ring(OLD, [NEW], restarted=True) == [NEW]


def test_a_fresh_member_with_a_retired_key_is_refused_without_the_key_in_the_message():
    with pytest.raises(ValueError, match="stale cluster key") as e:
        member_ring(OLD, [NEW], restarted=False)
    text = str(e.value)
    assert key_id(OLD).hex() in text and key_id(NEW).hex() in text
    assert OLD.hex() not in text and NEW.hex() not in text and "ooo" not in text
    with pytest.raises(ValueError, match="insecure member"):
        member_ring(None, [NEW], restarted=False)


def test_ring_ids_name_keys_by_id():
    assert ring_ids([OLD, NEW]) == f"{key_id(OLD).hex()},{key_id(NEW).hex()}"
