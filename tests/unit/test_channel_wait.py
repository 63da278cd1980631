"""Channel._wait_writable once its primary deadline has passed while flow control still
blocks: it looks again every 50 ms at most, never in a loop of zero-timeout waits (which
spun a core for as long as a slow receiver held the sender up)."""
import asyncio

from raygroups.stack import Channel, StackConfig


class _Blocked:
    """A stack blocked by flow control for its first ``n`` looks."""

    view = "a view"

    def __init__(self, n):
        self.n, self.blocked = n, {"flow_control"}

    def writable_to(self, dest):
        self.n -= 1
        return self.n < 0


def test_a_send_blocked_past_its_deadline_waits_instead_of_spinning(monkeypatch):
    ch = Channel("c", config=StackConfig.local(primary__send_timeout_s=0.0))
    ch.stack = _Blocked(5)
    timeouts = []

    async def wait_for(aw, timeout):
        timeouts.append(timeout)
        aw.close()
        raise asyncio.TimeoutError

    async def main():
        ch._writable = asyncio.Event()
        monkeypatch.setattr(asyncio, "wait_for", wait_for)
        await ch._wait_writable("m1")
    asyncio.run(main())
    assert len(timeouts) == 5 and min(timeouts) >= 0.05
