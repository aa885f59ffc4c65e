"""WISER (methods/wiser.py): the released pure functions (reply reading with and without
``upstream_compat``, the refinement instruction, the two-path fusion and its tie order), and the
method through the real recipe path with the offline components: the demo and
``dataset=fashion_cir`` end to end, a rerun that calls no model (LLM nor editor), resume from every
stage boundary, a 3-shard gallery, real SIGKILLs, ``--plan`` counting the edits per query,
``method.prompts=DIR`` and ``agentcir search`` showing the loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.methods.wiser import (
    PROMPT_FILES,
    STOP_PHRASE,
    best_candidate,
    combined_instruction,
    extract_suggestions,
    fuse_two_paths,
    says_stop,
    vqa_confidence,
)
from agentcir.framework.runner import run_recipe
from agentcir.framework.shards import ShardedGallery
from tests.framework.methods.runs_kit import SHARED, fashion_cir_recipe, fault_sweep, search_json
from tests.framework.methods.test_autocir_imagescope_runs import no_call, recipe
from tests.framework.test_resume_points import cut_after

ROOT = Path(__file__).resolve().parents[3]
WISER = ["method=wiser", "method.top_n=5", "method.max_check_num=2", "editor=recolour"]
STAGES = ["round0", "round1", "round2"]


def test_extract_suggestions_released_and_correct():
    reply = "Step 2: unmet.\nSuggestion: make the shirt blue\nand add a collar"
    assert extract_suggestions(reply, upstream_compat=True) == "make the shirt blueand add a collar"
    assert extract_suggestions(reply) == "make the shirt blue\nand add a collar"
    plural = "**Suggestions:** make it red"
    assert extract_suggestions(plural, upstream_compat=True) == ""  # released: 'suggestion:' only
    assert extract_suggestions(plural) == "make it red"
    assert extract_suggestions("no advice here") == ""
    assert says_stop("good retrieval, no more loops needed.") and not says_stop(
        "good retrieval, no more loops needed.", upstream_compat=True
    )
    assert says_stop(f'"{STOP_PHRASE}."', upstream_compat=True)


def test_combined_instruction_and_confidence():
    assert combined_instruction("is red.", '"make the collar round."') == "is red and make the collar round."
    assert combined_instruction(" ?has long sleeves, ", "  ") == "has long sleeves and ."
    assert [vqa_confidence(r) for r in ("yes", "Y", "no", "N", "0.83", "**yes**", "", "maybe", "1.5")] == [
        1.0,
        1.0,
        0.0,
        0.0,
        0.83,
        1.0,
        0.0,
        0.0,
        0.0,
    ]
    assert best_candidate([0.2, 0.9, 0.9, 0.1]) == 1
    with pytest.raises(InputError):
        best_candidate([])


def test_fusion_sums_then_breaks_ties_as_released():
    fused = fuse_two_paths(["a", "b", "c", "d"], [1.0, 0.0, 0.5, 0.5], ["c", "e", "b", "f"], [0.5, 1.0, 1.0, 0.0])
    # sums: a 1, b 1, c 1, d .5, e 1, f 0; ties on the sum by the max (all 1 but c .5), then the
    # path-1 confidence (a 1 > b 0 = e 0), then the name (b < e)
    assert [n for n, _ in fused] == ["a", "b", "e", "c", "d", "f"]
    assert dict(fused)["c"] == 1.0 and len(fused) == 6


@pytest.mark.parametrize("compat", [False, True])
def test_demo_run_rerun_and_resume_from_every_stage(plugin_path, tmp_path, monkeypatch, compat):
    r = recipe(
        tmp_path, *WISER, f"method.upstream_compat={str(compat).lower()}", f"editor.output_dir={tmp_path / 'edited'}"
    )
    ref = run_recipe(r)
    assert list(ref.metrics["stages"]) == STAGES and set(ref.metrics["final"]) >= {"mAP@10", "R@10"}
    cost = json.loads((ref.dir / "metrics.json").read_text())["cost"]
    assert sum(c["by_component"].get("llm:rules", 0) for c in cost.values()) > 0
    assert sum(c["by_component"].get("editor:recolour", 0) for c in cost.values()) > 0
    rec = ref.state.record(ref.state.queries[0], "round1")
    assert {"suggestions", "verdict", "stopped", "description", "edited_image", "t2i", "i2i", "fused"} <= set(rec)
    assert len(ref.candidates.ids[0][ref.candidates.ids[0] >= 0]) <= 10
    if compat:
        return
    from agentcir.components.editors.standins import RecolourEditor

    with monkeypatch.context() as m:  # the same recipe: every stage loaded, no model call, no edit
        no_call(m)
        m.setattr(RecolourEditor, "edit", lambda *a, **k: (_ for _ in ()).throw(AssertionError("an edit was made")))
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
        assert (resumed.dir / "rankings.jsonl").read_text() == (ref.dir / "rankings.jsonl").read_text()


def test_fusion_is_the_ranking_and_edits_feed_the_image_path(plugin_path, tmp_path):
    res = run_recipe(recipe(tmp_path, *WISER, "method.max_check_num=0"))
    g = res.state.gallery
    for i, q in enumerate(res.state.queries):
        rec = res.state.record(q, "round0")
        ranked = [g.ids[x] for x in res.candidates.ids[i] if x >= 0]
        assert (
            ranked
            == rec["fused"]
            == [
                n
                for n, _ in fuse_two_paths(
                    rec["t2i"]["ids"], rec["t2i"]["confidence"], rec["i2i"]["ids"], rec["i2i"]["confidence"]
                )
            ]
        )
        assert q.reference_id not in ranked and len(rec["t2i"]["ids"]) == 5
    plain = run_recipe(recipe(tmp_path, *WISER, "method.max_check_num=0", "editor=none"))
    images = [plain.state.record(q, "round0")["edited_image"] for q in plain.state.queries]
    assert images == [str(q.reference[0]) for q in plain.state.queries]  # no editor: the reference itself


@pytest.fixture
def open_paths():
    """Scripted offline replies that keep both paths open and change the description in round1:
    the verifier is unsure (0.5), the refiner always suggests, the caption editor writes its instruction."""
    from agentcir.framework.tasks import find_task, register_replier

    scripted = {
        "wiser_verify": lambda v: "0.5",
        "wiser_check_t2i": lambda v: "Suggestion: make it blue",
        "wiser_check_i2i": lambda v: "Suggestion: make it blue",
        "wiser_redescribe": lambda v: f"Edited Description: {v['instruction']}",
    }
    old = {t: find_task(t).replier for t in scripted}
    for t, fn in scripted.items():
        register_replier(t, fn)
    yield
    for t, fn in old.items():
        register_replier(t, fn)


def test_upstream_compat_final_ranking_is_the_previous_rounds_fusion(plugin_path, tmp_path, open_paths):
    """Released: after the loop the lists verified at the start of the last round are fused (the last
    re-retrieval's verification does not reach them); by default the last round ranks by its own."""
    for compat in (True, False):
        res = run_recipe(
            recipe(
                tmp_path,
                *WISER,
                "method.max_check_num=1",
                f"method.upstream_compat={str(compat).lower()}",
                f"run.cache={tmp_path / f'c{compat}.sqlite'}",
            )
        )
        g, recs = res.state.gallery, [res.state.record(q, "round1") for q in res.state.queries]
        assert all(r["description"].endswith("and make it blue.") for r in recs)
        assert any(res.state.record(q, "round0")["fused"] != r["fused"] for q, r in zip(res.state.queries, recs))
        for i, q in enumerate(res.state.queries):
            ranked = [g.ids[x] for x in res.candidates.ids[i] if x >= 0]
            assert ranked == res.state.record(q, "round0" if compat else "round1")["fused"]


def test_three_local_shards_rank_as_one_process(plugin_path, tmp_path):
    single = run_recipe(recipe(tmp_path, *WISER))
    sharded = run_recipe(recipe(tmp_path, *WISER, "+scale=local", "scale.shards=3"))
    assert isinstance(sharded.gallery, ShardedGallery) and len(sharded.gallery.shards) == 3
    np.testing.assert_array_equal(single.candidates.ids, sharded.candidates.ids)
    assert sharded.metrics["final"] == single.metrics["final"]


@pytest.mark.skipif(not (SHARED / "products.csv").is_file(), reason=f"the fashion-products data is not at {SHARED}")
def test_fashion_cir_end_to_end(plugin_path, tmp_path):
    r = fashion_cir_recipe(tmp_path, *WISER)
    res = run_recipe(r)
    assert list(res.metrics["stages"]) == STAGES and len(res.state.queries) == 6
    with pytest.MonkeyPatch.context() as m:
        no_call(m)
        again = run_recipe(r)
    assert again.metrics["final"] == res.metrics["final"]


def test_plan_counts_edits_and_verifications_per_query(plugin_path, tmp_path):
    from agentcir.framework.plan import plan_recipe

    plan = plan_recipe(recipe(tmp_path, *WISER, "method.max_check_num=1"))
    rows = {(s, c, o): r for (s, c, o), r in plan.rows.items()}
    assert rows[("round0", "editor:recolour", "edit")].calls == 4  # one edit of each query's reference
    verify = rows[("round0", "llm:rules", "run_task")]
    assert verify.calls >= 4 * (1 + 5)  # the description and at least one path's 5 verifications per query
    assert ("round1", "editor:recolour", "edit") in rows or ("round1", "llm:rules", "run_task") in rows


def test_prompts_folder_and_bad_config(plugin_path, tmp_path):
    d = tmp_path / "authors"
    d.mkdir()
    for f in PROMPT_FILES.values():
        (d / f).write_text(
            "{{modification}} {{instruction}} {{reference_caption}}" if "verify" not in f else "{{modification}}"
        )
    from agentcir.registry import METHODS

    m = METHODS.build("wiser", {"prompts": str(d)}, encoder=object(), llm=object(), captioner=object())
    assert m.cfg.verify_prompt == str((d / "verify.txt").resolve())
    (d / "check_i2i.txt").unlink()
    with pytest.raises(InputError, match="lacks check_i2i.txt"):
        METHODS.build("wiser", {"prompts": str(d)}, encoder=object(), llm=object(), captioner=object())
    with pytest.raises(InputError, match="'threshold' must be within 0..1"):
        METHODS.build("wiser", {"threshold": 1.5}, encoder=object(), llm=object(), captioner=object())


def test_agentcir_search_shows_the_loop(plugin_env, image_folder, tmp_path):
    out, _ = search_json(plugin_env, image_folder, tmp_path, *WISER, f"editor.output_dir={tmp_path / 'ed'}")
    trace = out["trace"]
    assert len(out["hits"]) == 3 and trace["search"]["method"] == "wiser"
    assert {"round0", "round1"} <= set(trace) and "suggestions" in trace["round1"] and "fused" in trace["round0"]


@pytest.fixture(scope="module")
def sweep(plugin_path, tmp_path_factory):
    """The fault sweep of ``benchmarks/fault_sweep.py`` (as the AutoCIR / ImageScope runs use it)."""
    with fault_sweep(tmp_path_factory.mktemp("sweep"), plugin_path, delay=0.05) as sw:
        yield sw


@pytest.mark.slow
def test_sigkill_inside_a_model_stage_and_after_a_boundary(sweep):
    """Real SIGKILLs of ``agentcir run`` (WISER with the recolour editor) talking to the scripted
    server as a slow OpenAI-compatible endpoint: after the first stage boundary and inside a
    stage; each rerun finishes with the metrics of an uninterrupted run and repeats at most
    ``run.concurrency`` model calls (a negative count: the uninterrupted reference run retried a
    request that timed out on a loaded machine, so it made more requests than the killed runs)."""
    sweep.kills("wiser", inside=1, boundaries=1)
    rows = [r for r in sweep.done.values() if r["scenario"].split()[1] == "wiser"]
    assert len(rows) == 2
    for r in rows:
        assert r["tried"] == 1 and r["identical"] == 1, r
        assert r["tracebacks"] == 0 and r["failed_queries"] == 0, r
        assert r["repeated_calls"] <= sweep.concurrency, r
