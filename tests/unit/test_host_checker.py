"""The host campaign's checkers (tests/hosts/checker.py) on synthetic histories: a clean one
passes, and each property broken makes its checker, and only it, report."""
from tests.hosts.checker import ALT, MAIN, check


def rec(op, at, body=None, **kw):
    return {"t": 0.0, "c": "c1", "op": op, "at": at, "body": body, **kw}


def clean_records():
    return [rec("publish", "invoke", "a"), rec("publish", "ok", "a"),
            rec("publish", "invoke", "b"), rec("publish", "ok", "b"),
            rec("publish", "invoke", "c"), rec("publish", "fail", "c", err="QueueNotPrimary"),
            rec("accept", "invoke", "a", queue=MAIN), rec("accept", "ok", "a", queue=MAIN),
            rec("reject", "ok", "b", queue=MAIN), rec("accept", "ok", "b", queue=ALT),
            rec("received", "ok", member="m1", bodies=["x:1", "x:2"],
                views=[["u1", 1], ["u1", 1]]),
            rec("received", "ok", member="m2", bodies=["x:2", "x:1"],
                views=[["u1", 1], ["u1", 1]])]


def view(vid, members, uuids, t, primary=True, pid=None):
    return {"view_id": [members[0], vid], "coord_uuid": uuids[0], "members": members,
            "uuids": uuids, "primary": primary, "primary_id": pid if pid is not None else vid,
            "installed_at": t}


def clean_views():
    return {"m1": [view(1, ["m1", "m2"], ["u1", "u2"], 1.0),
                   view(2, ["m1"], ["u1"], 5.0, primary=False, pid=0),  # u2 excluded once
                   view(3, ["m1", "m2"], ["u1", "u2"], 9.0)],
            "m2": [view(1, ["m1", "m2"], ["u1", "u2"], 1.0),
                   view(3, ["m1", "m2"], ["u1", "u2"], 9.0)]}


def found(records, views, windows=(4.0,)):
    r = check(records, views, list(windows))
    return {v.split(":")[0] for v in r["violations"]}


def test_a_clean_history_passes():
    assert found(clean_records(), clean_views()) == set()


def test_each_broken_property_is_reported_by_its_checker():
    lost = [x for x in clean_records() if not (x["op"] == "accept" and x["body"] == "a")]
    assert found(lost, clean_views()) == {"queue_lost"}
    twice = clean_records() + [rec("accept", "ok", "a", queue=MAIN)]
    assert found(twice, clean_views()) == {"queue_twice"}
    failed = clean_records() + [rec("accept", "ok", "c", queue=MAIN)]
    assert found(failed, clean_views()) == {"queue_twice"}  # a failed publish delivered
    no_alt = [x for x in clean_records() if not (x["op"] == "accept" and x["body"] == "b")]
    assert found(no_alt, clean_views()) == {"queue_reject", "queue_lost"}  # lost as well
    dup = clean_records() + [rec("received", "ok", member="m1", bodies=["x:2"],
                                 views=[["u1", 3]])]
    assert found(dup, clean_views()) == {"duplicates"}
    together = {m: [view(1, ["m1", "m2"], ["u1", "u2"], 1.0),
                    view(3, ["m1", "m2"], ["u1", "u2"], 9.0)] for m in ("m1", "m2")}
    assert found(clean_records(), together) == set()
    vs = clean_records() + [rec("received", "ok", member="m2", bodies=["x:3"],
                                views=[["u1", 1]])]  # m2 alone delivered x:3 in view 1
    assert found(vs, together) == {"virtual_synchrony"}
    views = clean_views()
    views["m2"][1] = dict(view(3, ["m1", "m2"], ["u1", "u2"], 9.0), uuids=["u1", "u3"])
    assert "view_agreement" in found(clean_records(), views)  # view 3: another member list
    views = clean_views()
    views["m2"].append(view(4, ["m2"], ["u2"], 12.0, pid=3))  # primary id 3 given twice
    assert found(clean_records(), views) == {"one_primary"}
    three = ["m1", "m2", "m3"], ["u1", "u2", "u3"]
    flap = {"m1": [view(1, *three, 1.0), view(2, ["m1", "m3"], ["u1", "u3"], 5.0),
                   view(3, *three, 6.0), view(4, ["m1", "m3"], ["u1", "u3"], 7.0)]}
    assert found(clean_records(), flap, windows=(4.0,)) == {"flapping"}  # twice in one window
    assert found(clean_records(), flap, windows=(4.0, 6.5)) == set()  # two faults, once each
    # cut off alone in non-primary views twice: the others "left" its views, nobody excluded
    views = clean_views()
    views["m1"] += [view(4, ["m1"], ["u1"], 10.0, False, 0), view(5, ["m1", "m2"], ["u1", "u2"],
                                                                11.0)]
    assert found(clean_records(), views, windows=(4.0,)) == set()


def test_an_unknown_outcome_excuses_nothing_but_a_loss():
    recs = [rec("publish", "invoke", "a"), rec("publish", "info", "a", err="RayActorError"),
            rec("accept", "ok", "a", queue=MAIN), rec("publish", "invoke", "p")]
    assert found(recs, clean_views()) == set()  # published or not: accepted once is fine
    recs.append(rec("accept", "ok", "a", queue=MAIN))
    assert found(recs, clean_views()) == {"queue_twice"}


def test_an_accept_whose_client_died_mid_call_is_an_unknown_outcome():
    """The hour-long campaign's seeds 5015-5019: a client on the head's host invoked an
    accept and the head's restart killed it before the answer; the message was gone (never
    redelivered, the queues drained empty). Not a loss: the accept may have taken effect."""
    base = [rec("publish", "invoke", "a"), rec("publish", "ok", "a"),
            rec("accept", "invoke", "a", queue=MAIN)]
    assert found(base, clean_views()) == set()
    done = base + [rec("accept", "fail", "a", queue=MAIN, err="NotAcquired")]
    assert found(done, clean_views()) == {"queue_lost"}  # completed, and it failed: lost


def pipeline_records(done="ok"):
    return [rec("pipe_publish", "invoke", "p:1"), rec("pipe_publish", "ok", "p:1"),
            rec("pipe_publish", "invoke", "p:2"), rec("pipe_publish", "info", "p:2"),
            rec("pipe_publish", "invoke", "p:3"), rec("pipe_publish", "fail", "p:3"),
            rec("pipe_done", done)]


def pipeline_found(records, output):
    r = check(records, {}, [], output)
    return {v.split(":")[0] for v in r["violations"]}


def test_the_pipeline_checker_wants_every_acknowledged_job_exactly_once():
    assert pipeline_found(pipeline_records(), ["p:1"]) == set()
    assert pipeline_found(pipeline_records(), ["p:1", "p:2"]) == set()  # unknown: may be there
    assert pipeline_found(pipeline_records(), []) == {"pipeline_once"}            # lost
    assert pipeline_found(pipeline_records(), ["p:1", "p:1"]) == {"pipeline_once"}  # twice
    assert pipeline_found(pipeline_records(), ["p:1", "p:3"]) == {"pipeline_once"}  # failed
    assert pipeline_found(pipeline_records("fail"), ["p:1"]) == {"pipeline_once"}   # no drain
    assert check(pipeline_records(), {}, [], None)["violations"] == []  # no pipeline ran


def test_the_pipeline_output_is_read_from_the_sinks_parquet_batches(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tests.hosts.checker import sink_bodies
    for n, bodies in ((1, [b"p:1", b"p:2"]), (2, [b"p:1"])):
        (tmp_path / f"batch={n}").mkdir()
        pq.write_table(pa.table({"id": ["x"] * len(bodies), "body": bodies}),
                       tmp_path / f"batch={n}" / "part-0.parquet")
    (tmp_path / "_tmp-3-abc").mkdir()  # a commit cut short: not in the output
    pq.write_table(pa.table({"id": ["y"], "body": [b"p:9"]}),
                   tmp_path / "_tmp-3-abc" / "part-0.parquet")
    assert sorted(sink_bodies(str(tmp_path))) == ["p:1", "p:1", "p:2"]
    assert sink_bodies(str(tmp_path / "none")) == []
