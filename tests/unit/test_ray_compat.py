"""Ray's private APIs: used only in actors/ray_compat.py, and present in the installed Ray.

A Ray upgrade that moves or removes one of them fails here, loudly and by name, instead of in
a member at run time; so does a Ray outside the release lines the tests ran on."""
import os
import re

from raygroups.actors import ray_compat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRIVATE = re.compile(r"ray\._private|_internal_kv|ray_constants")


def test_the_installed_ray_has_every_private_api_raygroups_uses():
    gone = ray_compat.missing()
    assert gone == [], ("Ray changed under raygroups: " + "; ".join(gone) +
                        " - adapt actors/ray_compat.py (and its TESTED) to this Ray")


def test_private_ray_apis_are_used_in_ray_compat_only():
    users = []
    for top in ("stack", "actors", "integration"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                path = os.path.join(d, f)
                if f.endswith(".py") and path != ray_compat.__file__ and \
                        PRIVATE.search(open(path, encoding="utf-8").read()):
                    users.append(os.path.relpath(path, ROOT))
    assert users == []


def test_loopback_addresses():
    assert ray_compat.loopback_address("127.0.0.1:6379")
    assert ray_compat.loopback_address("ray://localhost:10001")
    assert not ray_compat.loopback_address("10.1.2.3:6379")
    assert not ray_compat.loopback_address("ray://head.example:10001")


def test_the_check_names_what_an_upgrade_moved(monkeypatch):
    import ray
    from ray._private import state
    monkeypatch.setattr(ray, "__version__", "2.61.0")
    monkeypatch.delattr(state, "actors")
    gone = ray_compat.missing()
    assert any("2.61.0 is not a tested version" in g for g in gone)
    assert "ray._private.state.actors" in gone


def test_the_check_names_the_node_temp_dir_durable_members_journal_under(monkeypatch):
    from ray._private.node import Node
    monkeypatch.delattr(Node, "get_temp_dir_path")
    assert "ray._private.worker.global_worker.node.get_temp_dir_path" in ray_compat.missing()
