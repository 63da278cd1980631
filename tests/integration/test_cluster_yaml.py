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


def test_setup_installs_the_package(config):
    setup = " ; ".join(config["setup_commands"])
    assert "pip install" in setup and "~/raygroups" in setup
    assert "~/raygroups" in config["file_mounts"]


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_start_commands_bring_up_one_member_per_node(config, key):
    cmds = config[key]
    ray_start = next(i for i, c in enumerate(cmds) if "ray start" in c)
    up = [i for i, c in enumerate(cmds) if c.startswith("raygroups ")]
    assert up and all(i > ray_start for i in up)
    for i in up:
        argv = shlex.split(cmds[i].replace("$RAY_HEAD_IP", "10.0.0.1"))[1:]
        args = parser().parse_args(argv)
        assert args.command == "up" and args.this_node and args.members_per_node == 1
