"""The methods through the real recipe path (compose -> run_recipe -> report) on the bundled demo,
with the offline components on the test plugin's toy encoder: stages, snapshots, cost
accounting (gallery captioning as its own stage, nothing counted twice) and resume."""

from __future__ import annotations

import json

import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe


def recipe(tmp_path, *extra):
    return compose(
        [
            "encoder=toy",
            "dataset=demo",
            "dataset.limit=4",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


@pytest.mark.parametrize(
    "method,stages",
    [
        (["method=octopus", "method.gate=0", "method.alpha=3"], ["perceive", "create", "retrieve", "verify"]),
        (["method=xr", "method.k_prime=5", "method.stage3=true", "method.alpha=3"], ["coarse", "fine", "verify"]),
        (["method=cirevl"], ["retrieve"]),
        (["method=ldre"], ["ensemble"]),
    ],
)
def test_offline_run_and_its_cost_report(plugin_path, tmp_path, method, stages):
    r = recipe(tmp_path, *method)
    res = run_recipe(r)
    assert list(res.metrics["stages"]) == stages and set(res.metrics["final"]) >= {"mAP@10", "R@10"}
    cost = json.loads((res.dir / "metrics.json").read_text())["cost"]
    report = (res.dir / "report.md").read_text()
    if r["method"]["name"] in ("octopus", "xr"):  # the methods that need gallery captions
        gc = cost["gallery_captions"]
        # every gallery image captioned once (a call or a hit), plus one encoder call for the caption embeddings
        assert gc["calls"] + gc["cache_hits"] == res.metrics["gallery_size"] + 1
        assert gc["by_component"]["encoder:toy"] == 1 and gc["by_component"]["captioner:tagger"] == gc["calls"] - 1
        assert f"| gallery_captions | {gc['calls']} |" in report
    for name, c in cost.items():
        assert c["calls"] == sum(c["by_component"].values()), name  # every counted call is one component call
        assert c["wall_s"] >= 0
    if r["method"]["name"] == "octopus":
        # per query: target_caption, refine, generate, detect x2, filter_objects (when objects), textual_proxies
        assert cost["perceive"]["calls"] + cost["perceive"]["cache_hits"] == 2 * 4 + 1  # + 1 encoder call
        assert cost["verify"]["by_component"].get("verifier:contrast", 0) == cost["verify"]["calls"]
    # the same recipe again: every stage is loaded, nothing is called
    again = run_recipe(r)
    assert again.metrics["final"] == res.metrics["final"]
    assert all(s.resumed_queries == 4 for s in again.stats.values())
