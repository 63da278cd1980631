"""The pure helpers of bench/compare.py: figures, ratios, targets, parsing of the peers'
output, and the JGroups configuration it derives from the jar's stock XML."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402

UDP_XML = """<config xmlns="urn:org:jgroups">
    <UDP
         mcast_port="${jgroups.udp.mcast_port:45588}"
         tos="8"
         ucast_recv_buf_size="20M"
         ip_ttl="${jgroups.udp.ip_ttl:2}"/>
    <PING timeout="2000"
            num_initial_members="3"/>
    <pbcast.GMS print_local_addr="true" join_timeout="3000"/>
</config>"""

TCP_XML = """<config xmlns="urn:org:jgroups">
    <TCP bind_port="7800"
         loopback="true"
         max_bundle_timeout="30"/>
    <TCPPING timeout="3000"
             initial_hosts="${jgroups.tcpping.initial_hosts:localhost[7800],localhost[7801]}"
             port_range="1"
             num_initial_members="3"/>
    <FD timeout="3000" max_tries="3" />
</config>"""


def test_summary_median_min_max():
    s = compare.summary([3.0, 1.0, 2.0, float("nan"), None])
    assert (s["median"], s["min"], s["max"], s["n"]) == (2.0, 1.0, 3.0, 3)
    assert compare.summary([])["median"] is None


def test_ratio_and_targets():
    assert compare.ratio(50.0, 25.0) == 2.0
    assert compare.ratio(None, 1.0) is None and compare.ratio(1.0, 0) is None
    assert compare.target_met(1.0, 1.0, True) is True       # throughput: at least
    assert compare.target_met(0.79, 0.8, True) is False
    assert compare.target_met(0.25, 0.25, False) is True    # times: at most
    assert compare.target_met(0.31, 0.3, False) is False
    assert compare.target_met(None, 0.3, False) is None
    assert compare.verdict(True) == "met" and compare.verdict(False) == "NOT met"
    assert compare.verdict(None).startswith("n/a")


def test_pct_nearest_rank():
    xs = list(range(1, 101))
    assert compare.pct(xs, 0.5) == 50 and compare.pct(xs, 0.99) == 99
    assert compare.pct([], 0.5) is None


def test_json_lines_skip_banners():
    text = ("\n-------\nGMS: address=vm-1, cluster=c\n{\"joined\": 3}\n"
            "{\"last_recv\": 5, \"received\": 10}\n{not json\n")
    assert compare.json_lines(text) == [{"joined": 3}, {"last_recv": 5, "received": 10}]


def test_throughput_is_count_over_first_send_to_slowest_receipt():
    res = [{"first_send": 1_000_000_000}, {"last_recv": 2_000_000_000},
           {"last_recv": 3_000_000_000}, {"last_recv": 2_500_000_000}]
    assert compare.throughput(res, 10_000) == pytest.approx(5_000.0)
    with pytest.raises(ValueError):
        compare.throughput([{"last_recv": 1}], 10)


def test_jgroups_udp_config_keeps_the_stock_settings():
    xml = compare.jgroups_config(UDP_XML, "udp", mcast_port=47001)
    assert 'bind_addr="127.0.0.1"' in xml and 'mcast_port="47001"' in xml
    assert "45588" not in xml
    for kept in ('tos="8"', 'ucast_recv_buf_size="20M"', 'PING timeout="2000"',
                 'join_timeout="3000"', 'ip_ttl="${jgroups.udp.ip_ttl:2}"'):
        assert kept in xml


def test_jgroups_tcp_config_sets_port_range_and_hosts():
    xml = compare.jgroups_config(TCP_XML, "tcp", tcp_port=24000, tcp_range=10)
    assert 'bind_addr="127.0.0.1"' in xml and 'bind_port="24000"' in xml
    assert 'port_range="10"' in xml
    assert 'initial_hosts="127.0.0.1[24000]"' in xml
    assert 'FD timeout="3000" max_tries="3"' in xml and 'loopback="true"' in xml
    with pytest.raises(ValueError):
        compare.jgroups_config("<config/>", "udp")


def test_serf_event_lines():
    line = "    2024/01/01 12:00:00 [INFO] serf: EventMemberFailed: s3 127.0.0.1"
    assert compare.serf_event(line) == ("failed", "s3")
    assert compare.serf_event("[INFO] serf: EventMemberJoin: s1r2 127.0.0.1") == ("join", "s1r2")
    assert compare.serf_event("[INFO] serf: EventMemberLeave: s4 127.0.0.1") == ("leave", "s4")
    assert compare.serf_event("[INFO] agent: Received event: member-failed") is None


def test_exclusions_count_each_removed_member_once_per_view():
    v = lambda vid, members, t: {"view_id": ["m0", vid], "members": members, "t": t}  # noqa
    views = {"m0": [v(1, ["m0", "m1", "m2"], 1.0), v(2, ["m0", "m2"], 5.0)],
             "m2": [v(1, ["m0", "m1", "m2"], 1.0), v(2, ["m0", "m2"], 5.1)],
             "m1": [v(1, ["m0", "m1", "m2"], 1.0), v(3, ["m1"], 5.2)]}  # its own singleton
    assert compare.exclusions(views, since=2.0) == {(("m0", 2), "m1")}
    assert compare.exclusions(views, since=6.0) == set()


def test_first_time():
    evs = [{"t": 1.0, "x": 1}, {"t": 2.0, "x": 2}, {"t": 3.0, "x": 2}]
    assert compare.first_time(evs, lambda e: e["x"] == 2, 0.0) == 2.0
    assert compare.first_time(evs, lambda e: e["x"] == 2, 2.5) == 3.0
    assert compare.first_time(evs, lambda e: e["x"] == 3, 0.0) is None
    assert math.isclose(compare.tput_timeout(20_000), 40.0)
