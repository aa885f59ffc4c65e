"""The ImageSeeker method through the runner: the offline planner (llm=rules / none), and the LLM agent
on the OpenAI-compatible path against a real local server with scripted tool calls (bad calls, the
step budget, context compression, caching and resume)."""

import json

import pytest

from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion
from agentcir.framework.errors import InputError
from agentcir.framework.recipe import ComponentPool, compose
from agentcir.framework.runner import run_recipe

from .conftest import read_jsonl, toy_overrides

CHAT = "/chat/completions"


def recipe(root, tmp_path, *extra):
    toy, _, recipes = toy_overrides(tmp_path / "_recipes")
    return compose(
        [
            "method=imageseeker",
            toy,
            "dataset=disbench",
            f"dataset.root={root}",
            f"run.root={tmp_path / 'runs'}",
            "run.progress=false",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            *extra,
        ],
        extra_dirs=[recipes],
    )


def seek_records(result):
    return {q.id: result.state.traces[q.id]["seek"] for q in result.queries}


def test_offline_planner_end_to_end(history_bench, tmp_path, plugin_path):
    res = run_recipe(recipe(history_bench, tmp_path, "llm=rules"))
    queries = read_jsonl(history_bench / "queries.jsonl")
    assert len(res.queries) == len(queries)
    recs = seek_records(res)
    for qi, q in enumerate(res.queries):
        r = recs[q.id]
        assert r["planner"] == "offline" and r["stopped"] == "answered" and r["ids"]
        assert r["decomposition"]["target"] and r["subset_chain"] and r["reasoning"]
        assert [res.gallery.ids[i] for i in res.candidates.row(qi)] == r["ids"]  # rows = the answer, padded with -1
        assert all(res.gallery.items[i].meta["user"] == q.user for i in res.candidates.row(qi))
        assert [s["tool"] for s in r["steps"]][-1] == "answer"
    m = res.metrics["final"]
    assert {"EM", "F1", "EM_intra", "F1_intra", "EM_inter", "F1_inter"} <= set(m)
    assert (res.dir / "graphs").is_dir() and json.loads((res.dir / "collections.json").read_text())["user0"][
        "photos"
    ] == 30
    assert (res.dir / "subsets" / f"{res.queries[0].id}.json").is_file()


def test_bad_configs(tmp_path, plugin_path):
    from agentcir.registry import METHODS, ConfigError

    with pytest.raises(ConfigError, match="field 'planner': must be one of auto, llm, offline"):
        METHODS.build("imageseeker", {"planner": "magic"}, encoder=object())
    with pytest.raises(InputError, match="planner=llm needs an llm that can call tools"):
        METHODS.build("imageseeker", {"planner": "llm"}, encoder=object())
    with pytest.raises(InputError, match="summarizer=llm needs an llm"):
        METHODS.build("imageseeker", {"summarizer": "llm"}, encoder=object())


def _call(name, args, i=0):
    return {"id": f"call_{name}_{i}", "name": name, "arguments": args}


def _user0_city(root):
    meta = read_jsonl(root / "metadata" / "user0.jsonl")
    return meta[0]["metadata"]["address"].split(",")[0]


def test_llm_agent_with_scripted_tool_calls(history_bench, tmp_path, plugin_path):
    city = _user0_city(history_bench)
    with ScriptedServer() as srv:
        srv.script(
            CHAT,
            [
                Step(
                    json=chat_completion(
                        None,
                        tool_calls=[
                            _call("image_search", {"query": "a photo of a hat", "top_k": 10, "save_as": "hats"})
                        ],
                    )
                ),
                Step(
                    json=chat_completion(
                        None,
                        tool_calls=[
                            _call("teleport", {}),
                            _call("filter_metadata", {"expression": "date >= "}, 1),
                            _call("image_search", {"query": "x", "colour": "red"}, 2),
                        ],
                    )
                ),
                Step(
                    json=chat_completion(
                        None,
                        tool_calls=[
                            _call(
                                "filter_metadata",
                                {"expression": f'place ~ "{city}"', "filter_within": "hats", "save_as": "hats_here"},
                            )
                        ],
                    )
                ),
                Step(json=chat_completion(None, tool_calls=[_call("view_photos", {"subset": "hats_here", "max": 2})])),
                Step(
                    json=chat_completion(
                        None, tool_calls=[{"id": "c9", "name": "get_metadata", "arguments": '{"ids": ['}]
                    )
                ),
                Step(
                    json=chat_completion(
                        None, tool_calls=[_call("answer", {"subset": "hats_here", "reasoning": "hats in " + city})]
                    )
                ),
            ],
        )
        r = recipe(
            history_bench,
            tmp_path,
            "llm=openai",
            f"llm.base_url={srv.base_url}",
            "llm.model=m",
            "llm.retries=0",
            "llm.parse_retries=0",
            "dataset.limit=1",
        )
        res = run_recipe(r)
        rec = seek_records(res)[res.queries[0].id]
        reqs = [q.json for q in srv.requests_to(CHAT)]
        assert len(reqs) == 6
        assert rec["planner"] == "llm" and rec["stopped"] == "answered" and rec["turns"] == 6
        assert rec["reasoning"] == f"hats in {city}"
        here = [s for s in rec["subsets"] if s["name"] == "hats_here"][0]
        assert len(rec["ids"]) == here["size"] > 0
        assert rec["subset_chain"] == ["hats(10)", f"hats_here({here['size']})"]
        assert [res.gallery.ids[i] for i in res.candidates.row(0)] == rec["ids"]
        # the tools were offered as OpenAI function specs, with the system prompt
        assert {t["function"]["name"] for t in reqs[0]["tools"]} == {
            "image_search",
            "get_metadata",
            "filter_metadata",
            "view_photos",
            "web_search",
            "expand_graph",
            "answer",
        }
        assert reqs[0]["messages"][0]["role"] == "system" and "30 photos" in reqs[0]["messages"][0]["content"]
        # bad calls came back to the model as errors, and the session went on
        tool_msgs = {m["tool_call_id"]: m["content"] for m in reqs[2]["messages"] if m["role"] == "tool"}
        assert "unknown tool 'teleport'" in tool_msgs["call_teleport_0"]
        assert "filter expression error at position 8" in tool_msgs["call_filter_metadata_1"]
        assert "unknown argument(s) 'colour' for image_search" in tool_msgs["call_image_search_2"]
        # view_photos put the images in front of the model
        last = reqs[4]["messages"][-1]
        assert last["role"] == "user" and sum(p["type"] == "image_url" for p in last["content"]) == 2
        # arguments that are not JSON: the model is told, not the run crashed
        assert "could not be used" in json.dumps(reqs[5]["messages"][-1])
        # a rerun of the same recipe resumes the finished run; a fresh run replays every call from the cache
        run_recipe(r)
        fresh = recipe(
            history_bench,
            tmp_path,
            "llm=openai",
            f"llm.base_url={srv.base_url}",
            "llm.model=m",
            "llm.retries=0",
            "llm.parse_retries=0",
            "dataset.limit=1",
            "run.fresh=true",
        )
        again = run_recipe(fresh)
        # every completed call came from the cache; only the unusable reply (never cached) was asked again
        assert len(srv.requests_to(CHAT)) == 7
        assert seek_records(again)[res.queries[0].id]["ids"] == rec["ids"]


def test_llm_agent_step_budget(history_bench, tmp_path, plugin_path):
    with ScriptedServer() as srv:
        srv.script(
            CHAT, [Step(json=chat_completion(None, tool_calls=[_call("image_search", {"query": "hat", "top_k": 4})]))]
        )
        res = run_recipe(
            recipe(
                history_bench,
                tmp_path,
                "llm=openai",
                f"llm.base_url={srv.base_url}",
                "llm.model=m",
                "llm.retries=0",
                "dataset.limit=1",
                "method.max_steps=3",
            )
        )
        rec = seek_records(res)[res.queries[0].id]
        assert len(srv.requests_to(CHAT)) == 3
        assert rec["stopped"] == "step_budget" and rec["turns"] == 3 and len(rec["ids"]) == 4
        assert (
            rec["reasoning"]
            == "step budget of 3 turns spent without an answer; answered with the latest subset 'image_search_3'"
        )
        assert rec["subset_chain"] == ["image_search_3(4)"]


def test_llm_agent_context_compression_under_a_small_budget(history_bench, tmp_path, plugin_path):
    steps = [
        Step(
            json=chat_completion(
                f"looking {i}",
                tool_calls=[_call("image_search", {"query": f"hat {i}", "top_k": 8, "save_as": f"s{i}"}, i)],
            )
        )
        for i in range(5)
    ]
    steps.append(Step(json=chat_completion('{"ids": [], "subset": "s4", "reasoning": "done"}')))
    with ScriptedServer() as srv:
        srv.script(CHAT, steps)
        res = run_recipe(
            recipe(
                history_bench,
                tmp_path,
                "llm=openai",
                f"llm.base_url={srv.base_url}",
                "llm.model=m",
                "llm.retries=0",
                "dataset.limit=1",
                "method.context_budget=1500",
                "method.context_keep_last=2",
            )
        )
        rec = seek_records(res)[res.queries[0].id]
        reqs = [q.json for q in srv.requests_to(CHAT)]
        assert (
            rec["stopped"] == "answered" and len(rec["ids"]) == 8 and rec["reasoning"] == "done"
        )  # a JSON final answer
        assert rec["compressions"] and all(c["tokens_after"] < c["tokens_before"] for c in rec["compressions"])
        later = json.dumps(reqs[-1]["messages"])
        assert "[Context memory: earlier steps of this session were compressed]" in later
        assert "subset 's0' = 8 photos from image_search" in later  # pinned findings survive compression
        assert "s0" in rec["context"]["working_memory"] or "s0" in rec["context"]["session_memory"]


def test_llm_summariser_runs_through_the_cache(history_bench, tmp_path, plugin_path):
    turns = iter(
        [
            chat_completion(
                f"step {i}",
                tool_calls=[_call("image_search", {"query": f"hat {i}", "top_k": 6, "save_as": f"s{i}"}, i)],
            )
            for i in range(4)
        ]
        + [chat_completion(None, tool_calls=[_call("answer", {"subset": "s3", "reasoning": "r"})])]
    )

    def reply(req):
        if "response_format" in req.json:  # the compress_context task (JSON mode)
            return Step(
                json=chat_completion(
                    json.dumps(
                        {"session_memory": "SUMMARY searched hats s0..", "working_memory": "WORKING next: answer"}
                    )
                )
            )
        return Step(json=next(turns))

    with ScriptedServer() as srv:
        srv.script(CHAT, [reply])
        res = run_recipe(
            recipe(
                history_bench,
                tmp_path,
                "llm=openai",
                f"llm.base_url={srv.base_url}",
                "llm.model=m",
                "llm.retries=0",
                "dataset.limit=1",
                "method.context_budget=1500",
                "method.context_keep_last=2",
                "method.summarizer=llm",
            )
        )
        rec = seek_records(res)[res.queries[0].id]
        reqs = [q.json for q in srv.requests_to(CHAT)]
        summaries = [r for r in reqs if "response_format" in r]
        assert summaries and "Compress its history" in summaries[0]["messages"][0]["content"]
        assert rec["stopped"] == "answered" and rec["compressions"]
        assert "SUMMARY searched hats" in json.dumps(reqs[-1]["messages"])
        assert res.stats["seek"].by_component.get("llm:openai", 0) == len(
            reqs
        )  # every call, summaries too, went through ctx.call


def test_offline_planner_reads_a_captioners_captions(history_bench, labelled_set, tmp_path, plugin_path):
    """With a captioner (here one that names each photo's true label), view_photos shows captions and
    the offline planner's checks read them: every built question is answered exactly."""
    import csv
    from dataclasses import dataclass

    from agentcir.framework.datasets.history_builder import _noun
    from agentcir.framework.interfaces import Captioner

    with open(labelled_set / "photos.csv") as f:
        label = {r["image"]: _noun(r["label"]) for r in csv.DictReader(f)}

    class LabelCaptioner(Captioner):
        @dataclass
        class Config:
            pass

        calls = 0

        def caption(self, image):
            LabelCaptioner.calls += 1
            return f"a photo of {'' if label[image.stem].endswith('s') else 'a '}{label[image.stem]} on a table"

    r = recipe(history_bench, tmp_path, "method.keep_top=0")
    res = run_recipe(r, pool=ComponentPool(r, prebuilt={"captioner": LabelCaptioner()}))
    assert res.metrics["final"]["EM"] == 100.0 and res.metrics["final"]["F1"] == 100.0
    rec = seek_records(res)[res.queries[0].id]
    views = [s for s in rec["steps"] if s["tool"] == "view_photos"]
    assert views and all("caption" in p for p in views[0]["result"]["photos"])
    assert LabelCaptioner.calls <= 60  # each photo captioned at most once (cached calls)


def test_offline_judge_reads_captions_only_when_they_add_information(plugin_path):
    """``offline_judge=auto`` trusts a captioner's captions unless the captioner is derived from the
    encoder itself (the offline ``tagger``): its captions are the encoder's zero-shot tags."""
    from dataclasses import dataclass

    from agentcir.framework.interfaces import Captioner
    from agentcir.registry import CAPTIONERS, ENCODERS, METHODS, ConfigError

    class RealCaptioner(Captioner):
        @dataclass
        class Config:
            pass

        def caption(self, image):
            return "a photo of a hat"

    enc = ENCODERS.build("toy", {})
    tagger = CAPTIONERS.build("tagger", {}, encoder=enc)

    def judge(captioner, mode="auto"):
        deps = {"encoder": enc, **({"captioner": captioner} if captioner else {})}
        return METHODS.build("imageseeker", {"offline_judge": mode}, **deps).judge_by_caption()

    assert judge(RealCaptioner()) is True
    assert judge(tagger) is False and judge(None) is False
    assert judge(tagger, "caption") is True and judge(RealCaptioner(), "encoder") is False
    with pytest.raises(ConfigError, match="field 'offline_judge': must be one of auto, caption, encoder, got 'vlm'"):
        judge(None, "vlm")


def test_memories_are_injected_by_the_recipe_pool():
    """The method receives its context and subsets memories from the pool (framework never imports
    components), configured from its own fields."""
    from agentcir.framework.recipe import ComponentPool, compose

    pool = ComponentPool(compose(["method=imageseeker", "method.context_budget=1234", "method.context_keep_last=3"]))
    m = pool.get("method")
    assert m.context_memory.registry_key == "context" and m.subset_memory.registry_key == "subsets"
    assert (m.context_memory.cfg.budget, m.context_memory.cfg.keep_last) == (1234, 3)
    ctx = m.context_memory.new("goal")
    assert ctx.budget == 1234
    store = m.subset_memory.session("q1")
    store.save("a", ["x"])
    assert m.subset_memory.session("q1").ids("a") == ["x"]
