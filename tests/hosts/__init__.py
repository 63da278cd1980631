"""Faults across Ray hosts, Jepsen style: Ray on hosts in network namespaces (tests/raybed.py),
a group with a member on every node, clients on every host recording every operation, faults
from a printed seed, and checkers on the histories (tests/hosts/campaign.py)."""
