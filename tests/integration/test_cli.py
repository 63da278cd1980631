"""The ``raygroups`` command end to end: each command is a subprocess
(``python -m raygroups.actors``) on the test run's Ray session: up (the HTTP token in a 0600
file, never printed), members (table and JSON), views (history, and --follow while a member
leaves), probe, list, bootstrap generate, down; simulate needs no Ray. Bad input and an
unreachable cluster give one line on stderr and exit codes 2 and 1, never a traceback."""
import json
import os
import subprocess
import sys
import time

import pytest

pytest_plugins = ["tests.ray_fixtures"]


from raygroups.actors import Group  # noqa: E402
from raygroups.stack.discovery.members_file import uid_to_text  # noqa: E402

CLUSTER = f"t-cli-{os.getpid()}"


def cli(session, *args: str, timeout: float = 120.0, check: bool = True):
    out = subprocess.run([sys.executable, "-m", "raygroups.actors", *args],
                         env=session.env() if session else None, capture_output=True,
                         text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"raygroups {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def up(ray_session, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("secrets") / "group.token"
    out = cli(ray_session, "up", CLUSTER, "--members", "3", "--json", "--token-file",
              str(token_file))
    yield json.loads(out.stdout.strip().splitlines()[-1]), out.stderr + out.stdout
    try:
        Group.attach(CLUSTER).shutdown()
    except Exception:
        pass


def test_up_reports_progress_and_the_view_and_keeps_the_token_in_a_0600_file(up):
    result, printed = up
    assert len(result["members"]) == 3 and len(result["status_pages"]) == 3
    assert "joined as" in printed and "agreed: view" in printed
    path = result["token_file"]
    token = open(path).read().strip()
    assert token == Group.attach(CLUSTER).http_token()
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert token not in printed  # never printed (ray up's output is a log)


def test_members_table_and_json(ray_session, up):
    table = cli(ray_session, "members", CLUSTER).stdout
    assert table.splitlines()[0].split()[:3] == ["NAME", "UUID", "ADDRESS"]
    assert "coordinator" in table
    assert "RECOVERY" in table.splitlines()[0] and table.count("ONLINE") == 3
    ms = json.loads(cli(ray_session, "members", CLUSTER, "--json").stdout)
    assert sorted(m["name"] for m in ms) == sorted(up[0]["members"])
    assert all(m["state"] == "alive" and m["node_id"] == ray_session.node_id for m in ms)
    # the table's uuid column spells each uuid as the members file does
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:] if line.strip()}
    assert all(rows[m["name"]] == m["uuid_text"] == uid_to_text(bytes.fromhex(
        m["uuid"].replace("-", ""))) for m in ms), (rows, ms)


def test_probe_and_list(ray_session, up):
    infos = json.loads(cli(ray_session, "probe", CLUSTER, "--json").stdout)
    assert len(infos) == 3
    for i in infos:
        assert i["state"] == "member" and i["stats"]["transport"]["sent_msgs"] > 0
        assert i["view"]["members"] == infos[0]["view"]["members"]
    text = cli(ray_session, "probe", CLUSTER).stdout
    assert text.count("## ") == 3 and "figures" in text
    groups = json.loads(cli(ray_session, "list", "--json").stdout)
    assert sorted(groups[CLUSTER]) == sorted(up[0]["members"])


def test_views_history_and_follow(ray_session, up):
    hist = [json.loads(x) for x in
            cli(ray_session, "views", CLUSTER, "--json").stdout.splitlines()]
    assert hist and hist[-1]["members"] == up[0]["members"]
    proc = subprocess.Popen([sys.executable, "-m", "raygroups.actors", "views", CLUSTER,
                             "--follow", "--json", "--timeout", "20"],
                            env=ray_session.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in hist:  # it prints the history first
            json.loads(proc.stdout.readline())
        g = Group.attach(CLUSTER)
        leaver = up[0]["members"][-1]
        # the follower subscribes right after printing; a view installed before it did is
        # still delivered (it asks for the views after the last one it printed)
        g.leave(leaver)
        line = json.loads(proc.stdout.readline())
        assert leaver not in line["members"] and line["left"] == [leaver]
        g.rejoin(leaver)
        line = json.loads(proc.stdout.readline())
        assert leaver in line["members"] and line["joined"] == [leaver]
    finally:
        proc.kill()
        proc.wait()


def test_bootstrap_generate(ray_session, up, tmp_path):
    text = cli(None, "bootstrap", "generate", "orders", "--nodes", "10.0.0.1,10.0.0.2",
               "--per-node", "2").stdout.split("\n")
    assert text[:4] == ["A 1 10.0.0.1:7800 T", "B 2 10.0.0.1:7801 F", "C 3 10.0.0.2:7800 F",
                        "D 4 10.0.0.2:7801 F"]
    entries = json.loads(cli(None, "bootstrap", "generate", "orders", "--nodes", "10.0.0.1",
                             "--json").stdout)
    assert [(e["name"], e["host"], e["port"], e["coordinator"]) for e in entries] == \
        [("A", "10.0.0.1", 7800, True)]
    out = tmp_path / "1.list"
    out.write_text("an older, world-readable copy")
    out.chmod(0o644)
    cli(ray_session, "bootstrap", "generate", "orders", "--out", str(out))
    assert out.read_text().strip() == "A 1 127.0.0.1:7800 T"
    assert out.stat().st_mode & 0o777 == 0o600


def test_simulate_prints_figures():
    out = cli(None, "simulate", "--members", "6", "--json", timeout=300)
    fig = json.loads(out.stdout)
    assert fig["members"] == 6 and fig["crashed"] == 1 and fig["errors"] == 0
    assert 0 < fig["detection_first_s"] <= fig["detection_last_s"]
    assert "members started" in out.stderr  # progress
    text = cli(None, "simulate", "--members", "6", "--membership", "gossip", timeout=300).stdout
    assert "detected first" in text and "membership=gossip" in text


def test_down(ray_session, up):
    out = cli(ray_session, "down", CLUSTER, "--json")
    assert json.loads(out.stdout)["cluster"] == CLUSTER
    deadline = time.monotonic() + 30
    while CLUSTER in Group.list_groups() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert CLUSTER not in Group.list_groups()
    gone = cli(ray_session, "members", CLUSTER, check=False)
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1
    assert "NoSuchGroup" in gone.stderr and "Traceback" not in gone.stderr


@pytest.mark.parametrize("args", [["members"], ["up", "x", "--members", "many"],
                                  ["bootstrap", "generate", "x", "--per-node", "0"],
                                  ["nosuchcommand"]])
def test_usage_errors_are_one_line_and_exit_2(args):
    out = cli(None, *args, check=False, timeout=60)
    assert out.returncode == 2, out
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_1_within_the_timeout():
    """A port nothing listens on (loopback, picked free): ray.init would wait for it."""
    from raygroups.stack.runtime.ports import free_port
    t0 = time.monotonic()
    out = cli(None, "--address", f"127.0.0.1:{free_port()}", "--timeout", "3", "list",
              check=False, timeout=120)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out
    assert "Traceback" not in out.stderr
    print(f"gave up after {time.monotonic() - t0:.1f}s: {out.stderr.strip()}")


def test_version():
    import raygroups
    out = cli(None, "--version")
    assert out.stdout.strip() == f"raygroups {raygroups.__version__}"


def test_up_follow_nodes_no_wait_starts_the_group_in_the_background(ray_session, tmp_path):
    """cluster.yaml's head start command: it returns at once; the supervisor brings a member
    up on every node (this run's Ray has one) with the token written to the file."""
    from raygroups.actors.errors import NoSuchGroup, NotMember
    name = f"{CLUSTER}-bg"
    token_file = tmp_path / "bg.token"
    out = json.loads(cli(ray_session, "up", name, "--follow-nodes", "--no-wait", "--json",
                         "--token-file", str(token_file)).stdout)
    assert out["following"] and out["token_file"] == str(token_file)
    deadline = time.monotonic() + 60
    g = None
    while time.monotonic() < deadline:
        try:
            g = Group.attach(name)
            if len(g.view().members) == 1:
                break
        except (NoSuchGroup, NotMember):  # not created yet, or still joining
            pass
        time.sleep(0.2)
    assert g is not None and len(g.view().members) == 1
    assert token_file.read_text().strip() == g.http_token()
    cli(ray_session, "down", name)
    assert name not in Group.list_groups()
    from raygroups.actors.follower import follower_name
    with pytest.raises(ValueError):
        import ray
        ray.get_actor(follower_name(name), namespace="raygroups")


def test_up_arbitrator_and_what_it_refuses(ray_session, tmp_path):
    """``up --arbitrator``: two data members and the arbitrator (on this run's one node it
    shares the node, and ``up`` says so); ``members`` marks its role. Combined with what it
    does not go with: one line and exit 2, no traceback."""
    name = f"{CLUSTER}-arb"
    out = cli(ray_session, "up", name, "--members", "2", "--arbitrator", "--json",
              "--token-file", str(tmp_path / "arb.token"))
    result = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        [arb] = result["arbitrators"]
        assert arb.endswith("-arbitrator") and len(result["members"]) == 3, result
        assert arb in result["members"] and "shares node" in out.stderr
        rows = {line.split()[0]: line for line in cli(ray_session, "members", name).stdout
                .splitlines()[1:] if line.strip()}
        assert [n for n, line in rows.items() if "arbitrator" in line.split()[1:]] == [arb]
        ms = json.loads(cli(ray_session, "members", name, "--json").stdout)
        assert sorted(m["role"] for m in ms) == ["arbitrator", "data", "data"]
    finally:
        cli(ray_session, "down", name)
    for bad in (["--membership", "gossip"], ["--this-node"]):
        refused = cli(ray_session, "up", f"{name}-x", "--arbitrator", *bad, check=False)
        assert refused.returncode == 2, refused
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "arbitrator" in refused.stderr and "Traceback" not in refused.stderr
    assert f"{name}-x" not in Group.list_groups()


def test_up_durable_journals_each_member_under_the_journal_dir(ray_session, tmp_path):
    """``up --durable --journal-dir DIR``: every member journals its queues in
    DIR/raygroups/journal/<group>/<member>; ``--journal-dir`` without ``--durable`` is one
    line and exit 2."""
    name = f"{CLUSTER}-durable"
    out = cli(ray_session, "up", name, "--members", "2", "--durable", "--journal-dir",
              str(tmp_path), "--json", "--token-file", str(tmp_path / "d.token"))
    result = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        assert result["durable"] is True and len(result["members"]) == 2, result
        g = Group.attach(name)
        for m in result["members"]:
            info = g.info(m)
            where = str(tmp_path / "raygroups" / "journal" / name / m)
            assert info["durable"] and info["journal_dir"] == where, info
            assert result["journal_dirs"][m] == where, result
        g.queue("orders", durable=True).publish(b"kept")
        assert sorted(os.listdir(tmp_path / "raygroups" / "journal" / name)) == \
            sorted(result["members"])
    finally:
        cli(ray_session, "down", name)
    refused = cli(ray_session, "up", f"{name}-x", "--journal-dir", str(tmp_path), check=False)
    assert refused.returncode == 2, refused
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "--durable" in refused.stderr and "Traceback" not in refused.stderr
