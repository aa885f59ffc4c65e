"""AutoCIR and ImageScope through the real recipe path with the offline components: the demo and
``dataset=fashion_cir`` end to end, a rerun that makes no model call, resume from every stage
boundary and after real SIGKILLs with identical metrics, and a 3-shard gallery by the recipe switch
ranking as one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe
from agentcir.framework.shards import ShardedGallery
from tests.framework.methods.runs_kit import SHARED, fashion_cir_recipe, fault_sweep, search_json
from tests.framework.test_resume_points import cut_after

METHODS = {
    "autocir": ["method=autocir", "method.max_check_num=2"],
    "imagescope": ["method=imagescope", "method.k=5", "method.alpha=3"],
}
STAGES = {"autocir": ["plan", "round1", "round2"], "imagescope": ["retrieve", "rerank", "verify"]}


def recipe(tmp_path, *extra, limit=4):
    return compose(
        [
            "encoder=toy",
            "dataset=demo",
            f"dataset.limit={limit}",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


def no_call(m) -> None:
    """Make every model call of the offline LLM and verifier fail."""
    from agentcir.components.llms.rules import RulesLLM
    from agentcir.components.verifiers.contrast import ContrastVerifier

    def boom(*a, **k):
        raise AssertionError("a model was called")

    for cls, ops in ((RulesLLM, ("run_task",)), (ContrastVerifier, ("check", "verify"))):
        for op in ops:
            m.setattr(cls, op, boom)


@pytest.mark.parametrize("name", list(METHODS))
def test_demo_run_rerun_and_resume_from_every_stage(plugin_path, tmp_path, monkeypatch, name):
    r = recipe(tmp_path, *METHODS[name])
    ref = run_recipe(r)
    assert list(ref.metrics["stages"]) == STAGES[name] and set(ref.metrics["final"]) >= {"mAP@10", "R@10"}
    cost = json.loads((ref.dir / "metrics.json").read_text())["cost"]
    llm_calls = sum(c["by_component"].get("llm:rules", 0) for c in cost.values())
    assert llm_calls > 0
    with monkeypatch.context() as m:  # the same recipe: every stage loaded, no model call
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == ref.metrics["final"]
    assert all(s.resumed_queries == 4 for s in again.stats.values())
    order = [
        p.name.split(".")[0] for p in sorted((ref.dir / "stages").glob("*.done"), key=lambda p: p.stat().st_mtime_ns)
    ]
    for stage in order[:-1]:
        cut_after(ref.dir, stage, order)
        resumed = run_recipe(r)
        assert resumed.metrics["final"] == ref.metrics["final"], stage
        assert resumed.metrics["stages"] == ref.metrics["stages"], stage
        assert (resumed.dir / "rankings.jsonl").read_text() == (ref.dir / "rankings.jsonl").read_text()


@pytest.mark.parametrize("name", list(METHODS))
def test_three_local_shards_rank_as_one_process(plugin_path, tmp_path, name):
    single = run_recipe(recipe(tmp_path, *METHODS[name]))
    sharded = run_recipe(recipe(tmp_path, *METHODS[name], "+scale=local", "scale.shards=3"))
    assert isinstance(sharded.gallery, ShardedGallery) and len(sharded.gallery.shards) == 3
    np.testing.assert_array_equal(single.candidates.ids, sharded.candidates.ids)
    np.testing.assert_allclose(single.candidates.scores, sharded.candidates.scores, atol=1e-5)
    assert sharded.metrics["final"] == single.metrics["final"]
    for stage, c in single.state.stage_candidates.items():
        np.testing.assert_array_equal(c.ids, sharded.state.stage_candidates[stage].ids)


@pytest.mark.skipif(not (SHARED / "products.csv").is_file(), reason=f"the fashion-products data is not at {SHARED}")
@pytest.mark.parametrize("name", list(METHODS))
def test_fashion_cir_end_to_end(plugin_path, tmp_path, name):
    r = fashion_cir_recipe(tmp_path, *METHODS[name])
    res = run_recipe(r)
    assert list(res.metrics["stages"]) == STAGES[name] and len(res.state.queries) == 6
    with pytest.MonkeyPatch.context() as m:
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == res.metrics["final"]


@pytest.fixture(scope="module")
def sweep(plugin_path, tmp_path_factory):
    with fault_sweep(tmp_path_factory.mktemp("sweep"), plugin_path, delay=0.05) as sw:
        yield sw


@pytest.mark.slow
@pytest.mark.parametrize("name", list(METHODS))
def test_sigkill_inside_a_model_stage_and_after_a_boundary(sweep, name):
    """Real SIGKILLs of ``agentcir run`` talking to the scripted server as a slow OpenAI-compatible
    endpoint: after the first stage boundary and inside a stage; each rerun finishes with the
    metrics of an uninterrupted run and repeats at most ``run.concurrency`` model calls."""
    sweep.kills(name, inside=1, boundaries=1)
    rows = [r for r in sweep.done.values() if r["scenario"].split()[1] == name]
    assert len(rows) == 2
    for r in rows:
        assert r["tried"] == 1 and r["identical"] == 1, r
        assert r["tracebacks"] == 0 and r["failed_queries"] == 0, r
        assert 0 <= r["repeated_calls"] <= sweep.concurrency, r


@pytest.mark.parametrize("name", list(METHODS))
def test_agentcir_search_shows_the_loop(plugin_env, image_folder, tmp_path, name):
    """``agentcir search --json`` with the new methods: the trace holds their rounds, suggestions
    and verdicts (what the web app's trace view renders, stage by stage)."""
    out, _ = search_json(plugin_env, image_folder, tmp_path, *METHODS[name])
    trace = out["trace"]
    assert len(out["hits"]) == 3 and trace["search"]["method"] == name and trace["search"]["mode"] == "composed"
    if name == "autocir":
        assert {"plan", "round1"} <= set(trace) and "verdict" in trace["round1"] and "description" in trace["plan"]
    else:
        assert trace["reason"]["step2"] and "values" in trace["rerank"]
        assert [v["rank"] for v in trace["search"]["verification"]] == list(
            range(1, len(trace["verify"]["verdicts"]) + 1)
        )
