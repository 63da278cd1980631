"""cluster.yaml (issue 6): Ray's own launcher validation accepts it (Ray 2.60's
``prepare_config`` + ``validate_config``), rejects broken copies, and its commands do what
the issue asks: the package is installed in the setup commands, and on every node the start
commands bring up that node's member after ``ray start`` with arguments our CLI accepts."""
import copy
import os
import shlex

import pytest

import yaml
import jsonschema
import ray  # noqa: F401

from ray.autoscaler._private.util import prepare_config, validate_config  # noqa: E402

from raygroups.actors.cli import parser  # noqa: E402

PATH = os.path.join(os.path.dirname(__file__), "..", "..", "cluster.yaml")


@pytest.fixture()
def config():
    with open(PATH) as f:
        return yaml.safe_load(f)


def check(cfg):
    validate_config(prepare_config(copy.deepcopy(cfg)))


def test_ray_validates_cluster_yaml(config):
    assert config["provider"]["type"] == "local"
    assert config["provider"]["head_ip"] and config["provider"]["worker_ips"]
    check(config)
    prepared = prepare_config(copy.deepcopy(config))
    # the local provider: one node type, every worker ip kept
    assert prepared["head_node_type"] in prepared["available_node_types"]


BREAKAGES = {
    "a misspelt key": lambda c: c.__setitem__("head_start_ray_command",
                                              c.pop("head_start_ray_commands")),
    "start commands not a list": lambda c: c.__setitem__("worker_start_ray_commands",
                                                         "ray start --address=head:6379"),
    "ssh user not a string": lambda c: c["auth"].__setitem__("ssh_user", 5),
    "negative idle timeout": lambda c: c.__setitem__("idle_timeout_minutes", -1),
    "worker ips not a list": lambda c: c["provider"].__setitem__("worker_ips",
                                                                 "192.168.0.11"),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_ray_rejects_a_broken_copy(config, breakage):
    bad = copy.deepcopy(config)
    BREAKAGES[breakage](bad)
    with pytest.raises(jsonschema.ValidationError):
        check(bad)


def test_setup_installs_the_package_into_a_venv_and_copies_nothing_relative(config):
    setup = " ; ".join(config["setup_commands"])
    assert "python3 -m venv ~/raygroups-venv" in setup
    assert "~/raygroups-venv/bin/pip install" in setup and "--user" not in setup
    assert "raygroups[spark,s3]" in setup and "openjdk-17" in setup
    assert all(os.path.isabs(os.path.expanduser(src))
               for src in config["file_mounts"].values())  # nothing relative to the caller
    excluded = config["rsync_exclude"]
    assert ".venv" in excluded and ".git" in excluded


def test_ray_and_the_group_start_from_the_venv_once_in_the_background(config):
    head, workers = config["head_start_ray_commands"], config["worker_start_ray_commands"]
    for cmds in (head, workers):
        assert any("~/raygroups-venv/bin/ray start" in c for c in cmds)
    up = [c for c in head if "raygroups-venv/bin/raygroups " in c]
    assert len(up) == 1 and head.index(up[0]) > next(i for i, c in enumerate(head)
                                                     if "ray start" in c)
    args = parser().parse_args(shlex.split(up[0])[1:])
    # every node's member comes from the supervisor, started once, without waiting: the
    # group never fails a node's start command, and the workers start nothing of raygroups
    assert args.command == "up" and args.follow_nodes and args.no_wait
    assert args.members_per_node == 1 and not args.this_node
    # status pages reachable across the cluster, but every read needs the token
    assert args.http_host == "node" and args.http_auth == "all"
    assert not any("raygroups " in c.replace("raygroups-venv", "") for c in workers)
