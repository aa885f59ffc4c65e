"""Paracosm through the real recipe path with the offline components (editor ``recolour``, describer
``tagger``, generator ``retrieval``): the demo and ``dataset=fashion_cir`` end to end, a rerun that
makes no model call, resume from every stage boundary and after real SIGKILLs with identical metrics,
the gallery-side pass counted once per gallery by ``--plan`` and shared by every run, and a 3-shard
gallery by the recipe switch ranking as one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe
from agentcir.framework.shards import ShardedGallery
from tests.framework.methods.runs_kit import SHARED, fashion_cir_recipe, fault_sweep, search_json
from tests.framework.test_resume_points import cut_after

PARACOSM = ["method=paracosm", "editor=recolour"]


def recipe(tmp_path, *extra, limit=4, dataset: Path | None = None):
    """The tiny composed benchmark (24 items, "make it <colour>" queries) by default, else the demo."""
    data = ["dataset=demo"] if dataset is None else ["dataset=composed", f"dataset.root={dataset}"]
    return compose(
        [
            "encoder=toy",
            *data,
            f"dataset.limit={limit}",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            f"editor.output_dir={tmp_path / 'edited'}",
            *PARACOSM,
            *extra,
        ]
    )


def no_call(m) -> None:
    """Make every model call of the offline editor, describer and generator fail."""
    from agentcir.components.captioners.tagger import TaggerCaptioner
    from agentcir.components.editors.standins import RecolourEditor
    from agentcir.components.generators.retrieval import RetrievalGenerator

    def boom(*a, **k):
        raise AssertionError("a model was called")

    for cls, op in ((TaggerCaptioner, "caption"), (RecolourEditor, "edit"), (RetrievalGenerator, "generate")):
        m.setattr(cls, op, boom)


def calls(res, stage: str) -> int:
    cost = json.loads((res.dir / "metrics.json").read_text())["cost"]
    return sum(cost.get(stage, {}).get("by_component", {}).values())


def test_run_rerun_and_resume_from_every_stage(plugin_path, tiny_dataset, tmp_path, monkeypatch):
    r = recipe(tmp_path, dataset=tiny_dataset)
    ref = run_recipe(r)
    assert list(ref.metrics["stages"]) == ["retrieve"] and set(ref.metrics["final"]) >= {"mAP@10", "R@10"}
    g = ref.gallery
    cost = json.loads((ref.dir / "metrics.json").read_text())["cost"]
    made = cost["synthetic_gallery"]["by_component"]
    descriptions = next(g.captions(p.stem) for p in (g.root / "captions").glob("paracosm-*.jsonl"))
    assert made["captioner:tagger"] == len(g) and made["generator:retrieval"] == len(set(descriptions))
    assert cost["imagine"]["by_component"]["editor:recolour"] == 4
    rec = ref.state.record(ref.state.queries[0], "imagine")
    assert Path(rec["mental_image"]).parent == tmp_path / "edited" and rec["description"]
    with monkeypatch.context() as m:  # the same recipe: every stage loaded, no model call
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == ref.metrics["final"]
    order = [
        p.name.split(".")[0] for p in sorted((ref.dir / "stages").glob("*.done"), key=lambda p: p.stat().st_mtime_ns)
    ]
    assert order == ["synthetic_gallery", "imagine", "retrieve"]
    for stage in order[:-1]:
        cut_after(ref.dir, stage, order)
        resumed = run_recipe(r)
        assert resumed.metrics["final"] == ref.metrics["final"], stage
        assert (resumed.dir / "rankings.jsonl").read_text() == (ref.dir / "rankings.jsonl").read_text()
    # another run over the same gallery (other queries, another run directory and call cache) reads
    # the gallery-side pass from the gallery: no description or drawing
    other = run_recipe(
        recipe(tmp_path, "run.name=other", f"run.cache={tmp_path / 'other.sqlite'}", limit=6, dataset=tiny_dataset)
    )
    assert calls(other, "synthetic_gallery") == 0 and calls(other, "imagine") >= 6


@pytest.mark.slow
def test_demo_end_to_end_and_a_rerun_without_model_calls(plugin_path, tmp_path, monkeypatch):
    r = recipe(tmp_path)
    ref = run_recipe(r)
    assert list(ref.metrics["stages"]) == ["retrieve"] and ref.metrics["gallery_size"] == 320
    with monkeypatch.context() as m:
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == ref.metrics["final"]


def test_plan_counts_the_gallery_pass_once_per_gallery(plugin_path, tiny_dataset, tmp_path):
    from agentcir.framework.plan import plan_recipe

    r = recipe(tmp_path, "method.encode_batch=10", dataset=tiny_dataset)
    rows = {(s, c): row for (s, c, _), row in plan_recipe(r).rows.items()}
    n = len(run_gallery_items(r))
    assert n == 24
    assert rows[("synthetic_gallery", "captioner:tagger")].calls == n
    assert rows[("synthetic_gallery", "generator:retrieval")].calls >= 1  # one per distinct description
    assert rows[("synthetic_gallery", "encoder:toy")].calls == 3  # 24 images, 10 per call
    assert rows[("imagine", "editor:recolour")].calls == 4
    run_recipe(r)
    # another run of the same gallery plans no gallery-side call: it is stored with the gallery
    later = plan_recipe(
        recipe(
            tmp_path,
            "method.encode_batch=10",
            "run.name=other",
            f"run.cache={tmp_path / 'other.sqlite'}",
            limit=6,
            dataset=tiny_dataset,
        )
    )
    assert not any(row.calls for (s, _, _), row in later.rows.items() if s == "synthetic_gallery")
    assert sum(row.calls for (s, c, _), row in later.rows.items() if s == "imagine" and c == "editor:recolour") == 6


def run_gallery_items(r):
    from agentcir.framework.recipe import ComponentPool

    return ComponentPool(r).get("dataset").gallery_items()


def test_three_local_shards_rank_as_one_process(plugin_path, tiny_dataset, tmp_path):
    single = run_recipe(recipe(tmp_path, dataset=tiny_dataset))
    sharded = run_recipe(recipe(tmp_path, "+scale=local", "scale.shards=3", dataset=tiny_dataset))
    assert isinstance(sharded.gallery, ShardedGallery) and len(sharded.gallery.shards) == 3
    assert (sharded.gallery.root / "derived" / "paracosm").is_dir()
    np.testing.assert_array_equal(single.candidates.ids, sharded.candidates.ids)
    np.testing.assert_allclose(single.candidates.scores, sharded.candidates.scores, atol=1e-5)
    assert sharded.metrics["final"] == single.metrics["final"]


@pytest.mark.skipif(not (SHARED / "products.csv").is_file(), reason=f"the fashion-products data is not at {SHARED}")
def test_fashion_cir_end_to_end(plugin_path, tmp_path):
    r = fashion_cir_recipe(tmp_path, f"editor.output_dir={tmp_path / 'edited'}", *PARACOSM)
    res = run_recipe(r)
    assert list(res.metrics["stages"]) == ["retrieve"] and len(res.state.queries) == 6
    with pytest.MonkeyPatch.context() as m:
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == res.metrics["final"]


@pytest.fixture(scope="module")
def sweep(plugin_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    with fault_sweep(out, plugin_path, delay=0.01, extra=(f"editor.output_dir={out / 'edited'}",)) as sw:
        yield sw


@pytest.mark.slow
def test_sigkill_inside_the_gallery_pass_and_after_a_boundary(sweep):
    """Real SIGKILLs of ``agentcir run`` describing the gallery through the scripted server as a slow
    OpenAI-compatible endpoint: after the first stage boundary and inside a stage; each rerun finishes
    with the metrics of an uninterrupted run and repeats at most ``run.concurrency`` model calls."""
    sweep.kills("paracosm", inside=1, boundaries=1)
    rows = [r for r in sweep.done.values() if r["scenario"].split()[1] == "paracosm"]
    assert len(rows) == 2
    for r in rows:
        assert r["tried"] == 1 and r["identical"] == 1, r
        assert r["tracebacks"] == 0 and r["failed_queries"] == 0, r
        assert 0 <= r["repeated_calls"] <= sweep.concurrency, r


def test_agentcir_search_shows_the_mental_image(plugin_env, image_folder, tmp_path):
    """``agentcir search --json`` with Paracosm: the gallery-side pass over the indexed folder, then
    the trace's ``imagine`` record (instruction, mental image, its description, the text)."""
    out, gal = search_json(plugin_env, image_folder, tmp_path, *PARACOSM, f"editor.output_dir={tmp_path / 'edited'}")
    trace = out["trace"]
    assert len(out["hits"]) == 3 and trace["search"]["method"] == "paracosm"
    assert trace["imagine"]["instruction"].endswith("make it red.") and Path(trace["imagine"]["mental_image"]).is_file()
    assert (gal / "derived" / "paracosm").is_dir()
