"""The pipeline runner: run directories, traces, failures, resume after SIGKILL."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from agentcir.framework.cache import CallCache
from agentcir.framework.errors import InputError
from agentcir.framework.method import Method, RunState, Stage
from agentcir.framework.recipe import compose
from agentcir.framework.runner import RunContext, Runner, StageError, _read_jsonl_tolerant, run_recipe
from agentcir.framework.types import Candidates, Query


def toy_recipe(tmp_path, *extra):
    """The test plugin's components, selected through the recipes the plugin ships (entry point
    group ``agentcir.recipes``)."""
    return compose(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


def test_run_writes_its_directory(plugin_path, tmp_path):
    counter = tmp_path / "calls.txt"
    r = toy_recipe(tmp_path, f"llm.counter={counter}")
    res = run_recipe(r)
    d = res.dir
    assert d.parent == tmp_path / "runs" and d.name.startswith("llm_then_rank-demo-")
    for f in (
        "recipe.yaml",
        "metrics.json",
        "report.md",
        "rankings.jsonl",
        "stages/rewrite.jsonl",
        "stages/rewrite.done",
        "stages/rank.candidates.npz",
    ):
        assert (d / f).is_file(), f
    traces = [json.loads(x) for x in (d / "stages" / "rewrite.jsonl").read_text().splitlines()]
    assert len(traces) == 40 and traces[0]["record"]["rewritten"].endswith("edited")
    m = json.loads((d / "metrics.json").read_text())
    assert set(m["final"]) >= {"mAP@10", "R@10"} and m["num_queries"] == 40 and m["gallery_size"] == 320
    unique = len({q.text for q in res.queries})  # identical calls run once (in flight or cached)
    assert unique < 40
    cost = m["cost"]["rewrite"]
    assert (cost["calls"], cost["cache_hits"], cost["by_component"]) == (unique, 40 - unique, {"llm:counting": unique})
    report = (d / "report.md").read_text()
    assert f"| rewrite | {unique} | {40 - unique} |" in report and "mAP@10" in report
    assert len(counter.read_text().splitlines()) == unique
    # the same recipe again: everything is loaded, no model call
    res2 = run_recipe(r)
    assert len(counter.read_text().splitlines()) == unique
    np.testing.assert_array_equal(res2.candidates.ids, res.candidates.ids)
    # a different recipe in the same directory is refused
    r3 = toy_recipe(tmp_path, f"llm.counter={counter}", "llm.suffix=other", f"run.name={d.name}")
    with pytest.raises(InputError, match="holds a run of a different recipe \\(differs in: llm\\)"):
        run_recipe(r3)


class Flaky(Method):
    """Fails for queries whose id is in `bad` (module-level so the test can change it)."""

    bad: set = set()
    calls: list = []

    def __init__(self):
        super().__init__(None)

    def stages(self):
        async def per_query(ctx, state):
            async def one(q):
                Flaky.calls.append(q.id)
                if q.id in Flaky.bad:
                    raise ValueError("scripted failure")
                return {"ok": q.id}

            await ctx.map(state, one)
            state.candidates = Candidates(np.zeros((len(state.queries), 1), np.int32), np.ones((len(state.queries), 1)))

        return [Stage("work", per_query)]


def test_same_recipe_with_changed_inputs_recomputes_its_stages(plugin_path, tmp_path, monkeypatch, caplog):
    """New encoder weights at the same path (or an edited prompt file) leave the recipe, hence
    the run directory, unchanged: the finished stages must not be reused, the call cache must."""
    import agentcir_testplugin.components as tp

    counter = tmp_path / "calls.txt"
    r = toy_recipe(tmp_path, f"llm.counter={counter}")
    res = run_recipe(r)
    calls = len(counter.read_text().splitlines())
    assert set(json.loads((res.dir / "inputs.json").read_text())) == {"method", "gallery", "queries", "code"}
    res_again = run_recipe(r)  # same inputs: loaded, not recomputed
    assert res_again.stats["rank"].resumed_queries == 40
    monkeypatch.setattr(tp.ToyEncoder, "model_identity", lambda self: "other weights")
    from agentcir.framework.runner import check_run_inputs

    seen = []
    monkeypatch.setattr(
        "agentcir.framework.runner.check_run_inputs",
        lambda d, i, *a: (check_run_inputs(d, i, *a), seen.append(sorted(p.name for p in d.iterdir()))),
    )
    with caplog.at_level("WARNING", logger="agentcir"):
        res2 = run_recipe(r)
    # no stale stages, metrics or report left behind (the .b2 files: the checksums of the two)
    assert seen == [["inputs.json", "inputs.json.b2", "recipe.yaml", "recipe.yaml.b2"]]
    assert res2.dir == res.dir
    assert f"run '{res.dir}' was computed from other inputs (gallery, method changed)" in caplog.text
    assert res2.stats["rank"].resumed_queries == 0 and res2.stats["rewrite"].resumed_queries == 0
    # the LLM's calls did not change, so they all come from the call cache
    assert len(counter.read_text().splitlines()) == calls and res2.stats["rewrite"].cache_hits == 40
    caplog.clear()
    with caplog.at_level("WARNING", logger="agentcir"):
        res3 = run_recipe(r)  # and now that run resumes again
    assert "other inputs" not in caplog.text and res3.stats["rank"].resumed_queries == 40


def test_failed_queries_are_retried_alone(tmp_path):
    queries = [Query(id=f"q{i}", text="t") for i in range(6)]
    Flaky.bad, Flaky.calls = {"q1", "q4"}, []
    run_dir = tmp_path / "run"

    def go():
        ctx = RunContext(cache=CallCache(), run_dir=run_dir, concurrency=3, progress=False)
        state = RunState(queries=queries, gallery=None)
        asyncio.run(Runner(Flaky(), ctx, state).execute())
        return state

    with pytest.raises(StageError) as e:
        go()
    assert "stage 'work': 2 of 6 queries failed (first: query q" in str(e.value) and "scripted failure" in str(e.value)
    assert not (run_dir / "stages" / "work.done").exists()
    Flaky.bad, Flaky.calls = set(), []
    state = go()
    assert sorted(Flaky.calls) == ["q1", "q4"]
    assert {q: state.traces[q]["work"]["ok"] for q in state.traces} == {f"q{i}": f"q{i}" for i in range(6)}


def test_torn_last_trace_line_is_dropped(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text('{"query": "a", "record": {}}\n{"query": "b", "rec')
    assert [r["query"] for r in _read_jsonl_tolerant(f)] == ["a"]
    assert f.read_text() == '{"query": "a", "record": {}}\n'
    # a damaged line in the middle is dropped (its query is recomputed) and the file rewritten without it
    f.write_text('{"query": "a", "record": {}}\nbroken\n{"query": "c", "record": {}}\n')
    assert [r["query"] for r in _read_jsonl_tolerant(f)] == ["a", "c"]
    assert f.read_text() == '{"query": "a", "record": {}}\n{"query": "c", "record": {}}\n'


@pytest.mark.slow
def test_resume_after_sigkill_repeats_no_completed_call(plugin_env, tmp_path):
    """Kill a run with SIGKILL in the middle of its LLM stage, restart it: no completed model call is
    repeated, and rankings and metrics equal those of an uninterrupted run."""

    def cmd(root, counter, cache):
        return [
            sys.executable,
            "-m",
            "agentcir.cli",
            "run",
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            f"llm.counter={counter}",
            "llm.delay=0.05",
            f"run.root={root}",
            f"run.cache={cache}",
            "run.concurrency=2",
            "run.progress=false",
        ]

    # uninterrupted reference run
    a = subprocess.run(
        cmd(tmp_path / "a", tmp_path / "a.txt", tmp_path / "a.sqlite"), env=plugin_env, capture_output=True, text=True
    )
    assert a.returncode == 0, a.stderr
    unique = len((tmp_path / "a.txt").read_text().splitlines())  # one call per distinct query text
    assert 30 < unique <= 40

    counter, cache = tmp_path / "b.txt", tmp_path / "b.sqlite"
    proc = subprocess.Popen(
        cmd(tmp_path / "b", counter, cache), env=plugin_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if counter.exists() and len(counter.read_text().splitlines()) >= 12:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(cache) as db:
        completed = db.execute("SELECT COUNT(*) FROM calls WHERE component='llm:counting'").fetchone()[0]
    calls_before = len(counter.read_text().splitlines())
    assert 0 < completed < unique, "the kill must land in the middle of the stage"

    b = subprocess.run(cmd(tmp_path / "b", counter, cache), env=plugin_env, capture_output=True, text=True)
    assert b.returncode == 0, b.stderr
    calls_after = len(counter.read_text().splitlines()) - calls_before
    assert calls_after == unique - completed  # every completed call came from the cache

    run_a = next((tmp_path / "a").glob("llm_then_rank-*"))
    run_b = next((tmp_path / "b").glob("llm_then_rank-*"))
    assert (run_a / "rankings.jsonl").read_text() == (run_b / "rankings.jsonl").read_text()
    ma, mb = (json.loads((r / "metrics.json").read_text()) for r in (run_a, run_b))
    assert ma["final"] == mb["final"] and ma["stages"] == mb["stages"]
