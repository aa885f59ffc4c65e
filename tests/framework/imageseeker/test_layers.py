"""ImageSeeker lives in the framework layer: it imports nothing from agentcir/components/ (its memories
are injected by the recipe pool)."""

import ast
from pathlib import Path

import agentcir.framework.methods.imageseeker as pkg


def test_imageseeker_imports_no_component():
    bad = []
    for f in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                name = ("." * node.level) + (node.module or "")
                if "components" in name.split("."):
                    bad.append(f"{f.name}: from {name} import ...")
            elif isinstance(node, ast.Import):
                bad += [f"{f.name}: import {a.name}" for a in node.names if "components" in a.name.split(".")]
    assert not bad, bad
