"""The Ray-free parts of the batch paths on the Ray API: ``MessageBatch`` (actors/batch.py),
what a member hands a reader, and the work queue's batch settle (``QueueHost.settle``), with
stand-ins for the member's inbox and the queue service. No Ray, no sockets."""
import asyncio
import collections
import random
from types import SimpleNamespace

import pytest

from raygroups.actors.batch import MAX_BATCH, MessageBatch, check_batch, take
from raygroups.actors.queue import QueueHost
from raygroups.stack import Address, Message
from raygroups.stack.workqueue import (NoSuchQueue, NotAcquired, QueueNotPrimary,
                                       QueueOutcomeUnknown, StaleEpoch)

SEED = 1907
A, B = Address(b"a" * 16, "m-a"), Address(b"b" * 16, "m-b")


def inbox_of(rng: random.Random, n: int) -> tuple:
    """An inbox of ``n`` messages from two senders over two views, interleaved at random
    (seeded), and what each message is."""
    v1, v2 = ["c" * 24, 1], ["c" * 24, 2]
    inbox, want = collections.deque(), []
    for k in range(n):
        sender = rng.choice((A, B))
        view = v1 if k < n // 2 else v2
        inbox.append((Message(None, b"%d" % k, sender=sender), view))
        want.append({"sender": sender.name, "sender_uuid": sender.uuid_hex,
                     "payload": b"%d" % k, "view": view})
    return inbox, want


def test_batches_give_every_message_once_in_order_with_its_sender_and_view():
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    inbox, want = inbox_of(rng, 1000)
    got, first = [], 0
    while inbox:
        b = take(inbox, rng.randint(1, 97), "m-a", first, dropped=3)
        assert b.first == first and len(b) <= 97 and b.dropped == 3
        assert sum(count for count, _s, _v in b.runs) == len(b)
        first = b.next
        got += b.as_dicts()
    assert got == want
    assert first == 1000


def test_runs_keep_a_batch_smaller_than_a_dict_per_message():
    inbox = collections.deque((Message(None, b"x", sender=A), ["c" * 24, 1])
                              for _ in range(500))
    b = take(inbox, 1000, "m-a", 0, 0)
    assert b.runs == [(500, 0, 0)] and b.senders == [("m-a", A.uuid_hex)]
    assert [d.sender for d in b] == ["m-a"] * 500


def test_an_empty_inbox_gives_an_empty_batch():
    b = take(collections.deque(), 10, "m-a", 7, 0)
    assert len(b) == 0 and not b and b.next == 7 and list(b) == []


@pytest.mark.parametrize("args, error", [
    ((0,), ValueError), ((MAX_BATCH + 1,), ValueError), ((10, 11), ValueError),
    ((10, 0), ValueError), ((10, 1, -1.0), ValueError), ((10, 1, 1.0, -0.5), ValueError),
    (("10",), TypeError),
    ((10.0,), TypeError), ((True,), TypeError), ((10, 1, "1"), ValueError)])
def test_batch_arguments_out_of_range_are_typed_errors(args, error):
    with pytest.raises(error):
        check_batch(*args)


def test_a_batch_is_a_plain_picklable_value():
    import pickle
    b = MessageBatch("m-a", 5, [b"p"], [(1, 0, 0)], [("m-a", "u")], [["c", 1]], 0)
    assert pickle.loads(pickle.dumps(b)) == b


# -- the work queue's batch settle --------------------------------------------------------
class Queue:
    """A stand-in for the member's runtime queue: ``settle_many`` fails as a whole when any
    of its deliveries fails (the replica tells the first error only), ``settle`` answers
    for one delivery; ``outcome`` says what settling each does."""

    def __init__(self, outcome: dict):
        self.outcome, self.settled, self.calls = outcome, [], []

    def _one(self, d) -> None:
        if d.token in self.settled:
            raise NotAcquired("settled already")
        err = self.outcome.get(d.token)
        if err is not None:
            raise err
        self.settled.append(d.token)

    async def settle_many(self, op, ds) -> None:
        self.calls.append(("many", op, [d.token for d in ds]))
        errors = []
        for d in ds:
            try:
                self._one(d)
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        if errors:
            raise errors[0]

    async def settle(self, op, d) -> None:
        self.calls.append(("one", op, d.token))
        self._one(d)


def host_holding(tokens: list, queue: Queue) -> QueueHost:
    h = QueueHost("m-a")
    h.service = SimpleNamespace(channel=SimpleNamespace(stack=object()), disk_error=None)
    for t in tokens:
        h.held[("jobs", t)] = SimpleNamespace(token=t, queue=queue)
        h.holder[("jobs", t)] = "client-1"
    return h


def test_settle_many_is_one_batch_when_every_delivery_is_held():
    tokens = [(1, k) for k in range(50)]
    q = Queue({})
    h = host_holding(tokens, q)
    errs = asyncio.run(h.settle("jobs", "accept", [list(t) for t in tokens]))
    assert errs == [None] * 50
    assert q.calls == [("many", "accept", tokens)]
    assert q.settled == tokens and h.held == {} and h.holder == {}


def test_a_token_not_held_or_twice_is_not_acquired_and_the_rest_settle():
    q = Queue({})
    h = host_holding([(1, 1), (1, 2)], q)
    errs = asyncio.run(h.settle("jobs", "accept", [(1, 1), (9, 9), (1, 1), (1, 2)]))
    assert [type(e) for e in errs] == [type(None), NotAcquired, NotAcquired, type(None)]
    assert q.settled == [(1, 1), (1, 2)]


def test_a_failed_batch_answers_each_delivery_for_itself_and_settles_none_twice():
    """(1, 1) and (1, 4) settle in the batch; (1, 2) is stale (requeued: forgotten here);
    (1, 3)'s outcome is unknown (kept: the client may settle it again)."""
    q = Queue({(1, 2): StaleEpoch("requeued"), (1, 3): QueueOutcomeUnknown("view change")})
    tokens = [(1, 1), (1, 2), (1, 3), (1, 4)]
    h = host_holding(tokens, q)
    errs = asyncio.run(h.settle("jobs", "release", tokens))
    assert [type(e) for e in errs] == [type(None), StaleEpoch, QueueOutcomeUnknown,
                                      type(None)]
    assert q.settled == [(1, 1), (1, 4)]  # once each: the second try found them settled
    assert set(h.held) == {("jobs", (1, 3))} and set(h.holder) == {("jobs", (1, 3))}


def test_deliveries_of_a_deleted_queue_answer_no_such_queue_and_are_forgotten():
    """The queue was deleted (``q.delete()``): nothing of it can be settled any more, so the
    member forgets what it held of it (and its lease stops counting them)."""
    tokens = [(1, 1), (1, 2)]
    q = Queue({t: NoSuchQueue("jobs") for t in tokens})
    h = host_holding(tokens, q)
    errs = asyncio.run(h.settle("jobs", "accept", [list(t) for t in tokens]))
    assert [type(e) for e in errs] == [NoSuchQueue, NoSuchQueue]
    assert h.held == {} and h.holder == {}


class LeftThePrimary(Queue):
    """The member sent the batch, then left the primary component before a majority
    confirmed it (the primary side may have applied it): the batch's outcome is unknown,
    and a retry is refused at once, with no effect."""

    async def settle_many(self, op, ds) -> None:
        self.calls.append(("many", op, [d.token for d in ds]))
        raise QueueOutcomeUnknown("left the primary component before a majority confirmed")

    async def settle(self, op, d) -> None:
        self.calls.append(("one", op, d.token))
        raise QueueNotPrimary("not in a primary component")


def test_a_batch_of_unknown_outcome_is_never_answered_as_not_settled():
    """A retry's QueueNotPrimary says only that the retry took no effect: the answer stays
    the batch's unknown outcome (an accept the primary side applied must not reach its
    client as "not accepted"), and the deliveries stay held, to be settled again."""
    tokens = [(1, 1), (1, 2)]
    q = LeftThePrimary({})
    h = host_holding(tokens, q)
    errs = asyncio.run(h.settle("jobs", "accept", [list(t) for t in tokens]))
    assert [type(e) for e in errs] == [QueueOutcomeUnknown, QueueOutcomeUnknown]
    assert set(h.held) == {("jobs", t) for t in tokens}


# -- a publisher's batches, put back in order by the member -------------------------------
def test_batches_that_arrive_out_of_order_are_sent_in_order_and_once():
    from raygroups.actors.send_streams import SendStreams

    async def main():
        streams, sent = SendStreams(), []

        async def call(pub, k):
            async with streams.turn(pub, k) as now:
                if now:
                    await asyncio.sleep(0)
                    sent.append((pub, k))
                return now
        order = [("p", 3), ("q", 1), ("p", 1), ("q", 0), ("p", 0), ("p", 2), ("p", 1)]
        got = await asyncio.gather(*[call(p, k) for p, k in order])
        return sent, got
    sent, got = asyncio.run(main())
    assert [k for p, k in sent if p == "p"] == [0, 1, 2, 3]
    assert [k for p, k in sent if p == "q"] == [0, 1]
    assert got.count(False) == 1  # the repeated ("p", 1): not sent twice


def test_a_batch_whose_predecessor_never_comes_fails_typed_and_bounded_state():
    from raygroups.actors.send_streams import SendStreams, SendStreamsConfig, StreamBroken

    async def main():
        streams = SendStreams(SendStreamsConfig(wait_s=0.05, max_streams=2))
        with pytest.raises(StreamBroken):
            async with streams.turn("p", 1):
                pass
        for pub in ("a", "b", "c"):
            async with streams.turn(pub, 0):
                pass
        with pytest.raises(ValueError):
            async with streams.turn("a", -1):
                pass
        return list(streams.state)
    assert asyncio.run(main()) == ["b", "c"]


def test_a_subscription_counts_other_readers_and_ends_when_its_member_restarts():
    from raygroups.actors.errors import GroupClosed
    from raygroups.actors.subscription import Subscription
    answers = [MessageBatch("m-a", 0, [b"1", b"2"], [(2, 0, 0)], [("m-a", "u")], [["c", 1]]),
               MessageBatch("m-a", 2, [], [], [], []),
               MessageBatch("m-a", 5, [b"6"], [(1, 0, 0)], [("m-a", "u")], [["c", 1]]),
               MessageBatch("m-a", 0, [b"1"], [(1, 0, 0)], [("m-a", "u")], [["c", 1]])]
    group = SimpleNamespace(cluster="g", receive_many=lambda *a: answers.pop(0))
    sub = Subscription(group, "m-a", 10, 1, 0.0, 1.0)
    got = []
    with pytest.raises(GroupClosed):
        for b in sub:
            got.append([d.payload for d in b])
    assert got == [[b"1", b"2"], [b"6"]]  # the empty poll is not yielded
    assert sub.received == 3 and sub.taken_by_others == 3 and not answers


def test_settle_keys_tells_what_it_still_holds_under_the_keys():
    """A key's deliveries a member refused for now stay held under it, and the answer says
    how many (the stream settles them again); stale ones are forgotten."""
    tokens = [(1, 1), (1, 2), (1, 3)]
    q = Queue({(1, 2): StaleEpoch("requeued"), (1, 3): QueueNotPrimary("view change")})
    h = host_holding(tokens, q)
    h.keyed[("jobs", "st/1/0")] = dict.fromkeys(tokens)
    for t in tokens:
        h.key_of[("jobs", t)] = "st/1/0"
    got = asyncio.run(h.settle_keys("jobs", "accept", ["st/1/0", "st/9/9"]))
    assert got == {"settled": 1, "failed": 2, "held": 1}
    assert h.keyed == {("jobs", "st/1/0"): {(1, 3): None}}
    q.outcome.clear()
    assert asyncio.run(h.settle_keys("jobs", "accept", ["st/1/0"])) == \
        {"settled": 1, "failed": 0, "held": 0}
    assert h.keyed == {} and q.settled == [(1, 1), (1, 3)]
