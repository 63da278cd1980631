"""PRIMARY's recovery status in a sandwich: each member's status in its STATE; a change
between views goes to the view's first member (ANNOUNCE), which multicasts it (STATUS) once
its round is done; every member applies the STATUSes of its last exchange's view in that
order, after the view; OFFLINE (leaving) and ERROR are final."""
import pytest

from raygroups.stack.events import (CollectExchange, ExchangeResult, Leave, MemberStatuses,
                                    StatusAnnounced, Writable)
from raygroups.stack.message import INTERNAL, Message
from raygroups.stack.primary import (ANNOUNCE, DONOR, ERROR, OFFLINE, ONLINE, RECOVERING,
                                     STATE, STATUS, MemberAttributes, SetStatus)
from raygroups.stack.view import ViewChange

from .test_primary import change, delivered_views, exchange, make, state, vid


def status_msg(sender, view, member, status):
    return Message(None, b"", INTERNAL, {9: [STATUS, vid(view), member.uid, status]}, sender)


def statuses(s):
    return {a: x["status"] for a, x in s.down_event(MemberAttributes()).items()}


def sent_headers(s):
    return [(m.dest, m.headers[9]) for m in s.below.take()]


def test_a_change_goes_to_the_first_member_and_counts_once_it_comes_back_ordered():
    s = make()
    v = change(s, s.b, s.local, s.c)
    exchange(s, v)
    s.below.take()
    s.down_event(SetStatus(DONOR))
    assert sent_headers(s) == [(s.b, [ANNOUNCE, vid(v), DONOR])]
    assert statuses(s)[s.local] == ONLINE  # not before the order says so
    s.down_event(SetStatus(DONOR))  # no change: nothing sent
    assert s.below.sent == []
    s.up(status_msg(s.c, v, s.local, DONOR))  # only the first member orders
    assert s.layer.stats["stale_announcements"] == 1 and statuses(s)[s.local] == ONLINE
    s.up(status_msg(s.b, v, s.local, DONOR), status_msg(s.b, v, s.c, OFFLINE))
    assert statuses(s) == {s.b: ONLINE, s.local: DONOR, s.c: OFFLINE}
    assert s.above.events_of(StatusAnnounced) == [StatusAnnounced(vid(v), 1, s.local, DONOR),
                                                  StatusAnnounced(vid(v), 2, s.c, OFFLINE)]


def test_the_first_member_orders_announcements_once_its_round_is_done():
    s = make()
    v = change(s, s.local, s.b, s.c)
    s.below.take()
    s.up(Message(s.local, b"", INTERNAL, {9: [ANNOUNCE, vid(v), ONLINE]}, s.b))
    assert s.below.sent == []  # our round still runs: held
    exchange(s, v)
    assert sent_headers(s) == [(None, [STATUS, vid(v), s.b.uid, ONLINE])]
    assert s.layer.stats["statuses_ordered"] == 1
    s.down_event(SetStatus(DONOR))  # our own change: ordered at once, like the others'
    assert sent_headers(s) == [(None, [STATUS, vid(v), s.local.uid, DONOR])]
    s.up(Message(s.local, b"", INTERNAL, {9: [ANNOUNCE, [s.b.uid, 99], ONLINE]}, s.c))
    x = s.addr("X")
    s.up(Message(s.local, b"", INTERNAL, {9: [ANNOUNCE, vid(v), ONLINE]}, x))  # not a member
    assert s.below.sent == [] and s.layer.stats["stale_announcements"] == 2
    change(s, s.local, s.b)  # in the next round, an announcement of the last view is stale
    s.below.take()
    s.up(Message(s.local, b"", INTERNAL, {9: [ANNOUNCE, vid(v), ERROR]}, s.b))
    assert s.below.sent == [] and s.layer.stats["stale_announcements"] == 3


def test_a_status_that_arrives_during_the_round_applies_after_the_view_in_its_place():
    s = make()
    v = change(s, s.b, s.local, s.c)
    s.up(state(s.b, v), state(s.local, v))
    early = Message(None, b"early", 0, {}, s.b)
    late = Message(None, b"late", 0, {}, s.b)
    s.up(early, status_msg(s.b, v, s.c, RECOVERING), late)  # B finished its round first
    assert s.above.events_of(StatusAnnounced) == [] and s.above.messages == []
    s.up(state(s.c, v))
    kinds = [type(e) for e in s.above.events if type(e) is not Writable]
    assert kinds[-4:] == [ExchangeResult, MemberStatuses, ViewChange, StatusAnnounced]
    assert s.above.batches == [[early], [late]]  # the STATUS stood between them
    assert statuses(s)[s.c] == RECOVERING


def test_a_change_during_a_round_waits_for_it_and_an_interrupting_view_carries_it_instead():
    s = make()
    v1 = change(s, s.b, s.local)
    s.below.take()
    s.down_event(SetStatus(ONLINE))
    s.down_event(SetStatus(DONOR))
    assert s.below.sent == []
    exchange(s, v1)
    assert sent_headers(s) == [(s.b, [ANNOUNCE, vid(v1), DONOR])]  # the latest, once
    v2 = change(s, s.b, s.local)
    s.below.take()
    s.down_event(SetStatus(ONLINE))
    v3 = change(s, s.b, s.local, s.c)  # interrupts v2's round
    [st] = s.below.take()
    assert st.headers[9][4]["status"] == ONLINE  # the STATE of v3 carries it
    exchange(s, v3)
    assert s.below.sent == []  # nothing more to announce
    assert [v.view_id for v in delivered_views(s)][-2:] == [v2.view_id, v3.view_id]


def test_the_exchange_carries_the_status_state_transfer_answers_but_not_over_a_final_one():
    s = make()
    answer = {"status": RECOVERING}

    def collect(ev):
        assert ev.change.view.members[0] == s.b  # the ViewChange being agreed on
        ev.status = answer["status"]
    s.above.answers[CollectExchange] = collect
    v = change(s, s.b, s.local)
    [st] = s.below.take()
    assert st.headers[9][4]["status"] == RECOVERING
    exchange(s, v)
    s.down_event(SetStatus(ERROR))
    s.below.take()
    answer["status"] = ONLINE
    change(s, s.b, s.local)
    [st] = s.below.take()
    assert st.headers[9][4]["status"] == ERROR  # final


def test_leaving_announces_offline_and_offline_and_error_are_final():
    s = make()
    v = change(s, s.b, s.local)
    exchange(s, v)
    s.below.take()
    s.down_event(Leave("left"))
    assert [(m.dest, m.headers.get(9)) for m in s.below.sent] == [
        (s.b, [ANNOUNCE, vid(v), OFFLINE])]
    assert s.below.events_of(Leave) == [Leave("left")]  # GMS below leaves
    s.below.take()
    s.down_event(SetStatus(ONLINE))
    s.down_event(SetStatus(ERROR))
    assert s.below.sent == [] and s.layer.status == OFFLINE
    t = make()
    t.down_event(SetStatus(ERROR))
    t.down_event(Leave("recovery failed"))
    assert t.layer.status == ERROR  # a failed member stays ERROR while it leaves


def test_member_statuses_go_up_with_the_view_the_same_as_the_attributes():
    s = make()
    v = change(s, s.local, s.b)
    s.up(state(s.local, v), Message(None, b"", INTERNAL,
                                    {9: [STATE, vid(v), 0, [], {"status": DONOR}, {}]}, s.b))
    [ev] = s.above.events_of(MemberStatuses)
    assert ev == MemberStatuses({s.local: ONLINE, s.b: DONOR}, vid(v))
    assert statuses(s) == ev.statuses


@pytest.mark.parametrize("header", [
    [STATUS, "VID"], [STATUS, "VID", b"x" * 16, ONLINE], [STATUS, "VID", "B", "BUSY"],
    [STATUS, "VID", "B", 5], [ANNOUNCE, "VID"], [ANNOUNCE, "VID", "online"],
], ids=repr)
def test_malformed_announcements_are_counted_never_raised(header):
    s = make()
    v = change(s, s.b, s.local)
    exchange(s, v)
    h = [vid(v) if x == "VID" else s.b.uid if x == "B" else x for x in header]
    s.up(Message(None, b"", INTERNAL, {9: h}, s.b))
    assert s.layer.stats["malformed_header"] == 1
    assert statuses(s) == {s.b: ONLINE, s.local: ONLINE}
    with pytest.raises(ValueError):
        s.down_event(SetStatus("BUSY"))
