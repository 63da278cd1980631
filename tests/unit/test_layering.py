"""The dependency direction of DESIGN.md: integration -> actors -> stack. stack imports neither
ray nor pyspark (nor actors, nor integration); actors imports ray but never pyspark nor
integration. Checked on the source (every import statement, module level or not)."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FORBIDDEN = {
    "stack": ("ray", "pyspark", "raydp", "raygroups.actors", "raygroups.integration"),
    "actors": ("pyspark", "raydp", "raygroups.integration"),
}


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    pkg = os.path.relpath(os.path.dirname(path), ROOT).split(os.sep)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve within the package tree
                base = pkg[:len(pkg) - node.level + 1]
                top = {"stack": "raygroups.stack", "actors": "raygroups.actors",
                       "integration": "raygroups.integration"}[base[0]]
                yield ".".join([top, *base[1:], *([node.module] if node.module else [])])
            else:
                yield node.module


def _sources(top):
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(d, f)


@pytest.mark.parametrize("top", sorted(FORBIDDEN))
def test_imports_go_one_way(top):
    bad = []
    for path in _sources(top):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[top]):
                bad.append(f"{os.path.relpath(path, ROOT)}: {name}")
    assert not bad, bad
