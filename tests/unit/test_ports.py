"""Ports handed out before members bind them: below the kernel's ephemeral range (where no
outgoing connection can take them meanwhile), distinct, and free for TCP and UDP."""
import socket

import pytest

from raygroups.stack.runtime.ports import (IANA_EPHEMERAL_LOW, LOW, PortPicker, ephemeral_low,
                                           free_ports, free_run)


def test_ephemeral_low_reads_the_kernel_range_and_falls_back_to_iana(tmp_path):
    f = tmp_path / "range"
    f.write_text("32768\t60999\n")
    assert ephemeral_low(str(f)) == 32768
    assert ephemeral_low(str(tmp_path / "missing")) == IANA_EPHEMERAL_LOW
    f.write_text("garbage")
    assert ephemeral_low(str(f)) == IANA_EPHEMERAL_LOW


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = free_ports(50)
    assert len(set(ports)) == 50
    assert all(LOW <= p < ephemeral_low() for p in ports), ports
    for p in ports:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", p))


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM])
def test_a_port_bound_for_either_protocol_is_skipped(kind):
    start = PortPicker().pick()
    with socket.socket(socket.AF_INET, kind) as held:
        held.bind(("127.0.0.1", start))
        assert PortPicker(start=start - LOW).pick() > start


def test_the_walk_wraps_to_the_bottom_and_an_exhausted_range_raises():
    base = free_run(3)
    p = PortPicker(low=base, high=base + 3, start=2)
    assert [p.pick(), p.pick(), p.pick()] == [base + 2, base, base + 1]
    with pytest.raises(ValueError):
        PortPicker(low=base, high=base)
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", base + 1))
        b.bind(("127.0.0.1", base + 2))
        with pytest.raises(OSError, match="no free port"):
            PortPicker(low=base + 1, high=base + 3).pick()


def test_a_run_is_consecutive_and_skips_a_bound_port_inside_it():
    first = free_run(4)
    assert all(LOW <= p < ephemeral_low() for p in range(first, first + 4))
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 2))
        again = PortPicker(start=first - LOW).pick_run(4)
    assert again >= first + 3
    assert not set(range(again, again + 4)) & {first + 2}
