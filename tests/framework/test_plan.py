"""`agentcir run --plan`: model calls, tokens and cost per stage and component, calling no model."""

from __future__ import annotations

import json

import pytest

from agentcir.cli import main
from agentcir.framework.plan import plan_recipe
from agentcir.framework.recipe import compose
from agentcir.framework.runner import resolve_run_dir, run_recipe

from .datasets.conftest import make_release

pytest.importorskip("httpx", reason="needs the llm extra (the OpenAI client)")


def test_plan_calls_no_model_and_counts_the_calls(tmp_path):
    from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion

    with ScriptedServer() as srv:
        srv.script("/chat/completions", [Step(json=chat_completion("{}"))])
        recipe = compose(
            [
                "method=octopus",
                "llm=openai",
                f"llm.base_url={srv.base_url}",
                "llm.model=m",
                "captioner=vlm",
                "run.gallery_captions=captioner",
                "dataset.limit=4",
                f"run.root={tmp_path}",
                "run.prices.llm.input_per_1m=1.0",
                "run.prices.llm.output_per_1m=2.0",
                "+run.prices.verifier.per_call=0.5",
            ]
        )
        plan = plan_recipe(recipe)
        assert srv.requests == []  # the server counted no request
    rows = {(s, c, o): r for (s, c, o), r in plan.rows.items()}
    assert plan.num_queries == 4
    # OCTOPUS per query: target_caption + refine (perceive); filter_objects + textual_proxies (create)
    assert rows[("perceive", "llm:openai", "run_task")].calls == 8
    assert rows[("create", "llm:openai", "run_task")].calls == 8
    assert rows[("create", "generator:retrieval", "generate")].calls == 4
    assert rows[("index", "encoder:catalog", "encode_images")].items == plan.gallery_size
    tin = rows[("perceive", "llm:openai", "run_task")].input_tokens
    assert tin > 8 * 20  # the rendered prompts
    j = plan.to_json()
    ver = rows.get(("verify", "verifier:contrast", "verify"))
    cap = rows[("gallery_captions", "captioner:vlm", "caption")]  # one VLM request per gallery image
    assert cap.calls + cap.cached == plan.gallery_size and cap.input_tokens > cap.calls * 765 and cap.priced_as == "llm"
    want = sum(
        (r.input_tokens * 1.0 + r.output_tokens * 2.0) / 1e6
        for (s, c, o), r in rows.items()
        if c.startswith("llm:") or r.priced_as == "llm"
    ) + (ver.calls * 0.5 if ver else 0)
    assert j["total_cost"] == pytest.approx(want)
    assert not resolve_run_dir(recipe).exists() and not (tmp_path / "_galleries").exists()  # nothing written


def test_plan_reads_the_cache_and_imports(tmp_path, capsys):
    pytest.importorskip("torch")
    root = make_release(tmp_path / "rel", [(f"r/{i % 3}", f"t/{i}", f"edit {i}") for i in range(6)])
    args = [
        "method=image_only",
        "dataset=webvid_covr",
        f"dataset.root={root}",
        "encoder=features",
        f"encoder.path={root}/preload",
        "encoder.arch=ViT-B/32",
        f"run.root={tmp_path / 'runs'}",
        "run.progress=false",
    ]
    before = plan_recipe(compose(args))
    assert before.total_calls == 2  # the index, the reference images
    assert before.rows[("embed", "encoder:features", "encode_images")].items == 3  # 3 distinct references
    run_recipe(compose(args), progress=False)
    after = plan_recipe(compose(args))  # the run directory holds every stage: read, no call
    assert after.total_calls == 0 and all(r.calls == 0 for r in after.rows.values())
    assert any(n.startswith("finished in the run directory (read, no call): stage(s) embed") for n in after.notes)
    elsewhere = plan_recipe(compose([*args, "run.name=elsewhere"]))  # no run directory: the call cache
    assert elsewhere.total_calls == 0 and all(r.calls == 0 for r in elsewhere.rows.values())
    assert elsewhere.rows[("embed", "encoder:features", "encode_images")].cached == 3
    assert main(["run", "--plan", *args]) == 0
    out = capsys.readouterr().out
    assert "no model was called" in out and "total: 0 model calls" in out
    # imported stages make no calls in the plan either
    trace = tmp_path / "reason.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"query": str(i), "record": {"reference_caption": "x", "target_caption": f"y {i}"}}) + "\n"
            for i in range(6)
        )
    )
    p = plan_recipe(compose(["method=cirevl", *args[1:], f"+run.imports.reason={trace}"]))
    assert p.imported["reason"]["queries"] == 6
    assert not any(c.startswith(("llm:", "captioner:")) for _, c, _ in p.rows), p.rows
    assert p.rows[("retrieve", "encoder:features", "encode_texts")].calls == 1


def test_bad_prices_are_named(tmp_path):
    from agentcir.framework.errors import InputError

    with pytest.raises(InputError, match="run.prices.llm: expected a mapping of input_per_1m"):
        plan_recipe(compose([f"run.root={tmp_path}", "+run.prices.llm.per_token=1"]))


def test_xr_fine_filter_asks_every_statement_on_image_and_caption(tmp_path):
    plan = plan_recipe(compose(["method=xr", "dataset.limit=2", f"run.root={tmp_path}"]))
    img = plan.rows[("fine", "verifier:contrast", "check")]
    cap = plan.rows[("fine", "llm:rules", "run_task")]  # entailment on the candidate's caption
    assert img.calls + img.cached == cap.calls + cap.cached > 100  # k_prime = 100 candidates per query
    assert cap.calls > 0.9 * (cap.calls + cap.cached)  # distinct captions: distinct calls
