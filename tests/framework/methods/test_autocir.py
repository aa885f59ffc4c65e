"""AutoCIR: the planner's description ranks the gallery by text-to-image cosine; the corrector loop
(stop phrase kept for good, suggestions read as released, re-planner fallback) round by round; the
released reply readings under ``upstream_compat``; the rules LLM's answers; bad configurations."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.components.llms.rules import RulesLLM
from agentcir.framework.errors import InputError
from agentcir.framework.methods.autocir import edited_description, extract_suggestions, released_list, says_stop
from agentcir.framework.prompts import load_prompt
from agentcir.registry import METHODS

from .conftest import assert_ranking, enc_text, topk_desc


def build(world, **cfg):
    return METHODS.build(
        "autocir", {"top_k": 10, **cfg}, encoder=world.encoder, llm=world.llm, captioner=world.captioner
    )


def ranking_of(world, descriptions):
    S = np.stack([enc_text(d) @ world.I.T for d in descriptions])
    S[0, world.row("g0")] = np.nan
    S[1, world.row("g1")] = np.nan
    return topk_desc(S, 10)


def script(world):
    world.llm.replies["autocir_plan"] = lambda v: f"Some reasoning.\nEdited Description: target {v['modification']}"
    world.llm.replies["autocir_check"] = lambda v: (
        "Step 2: all met.\nGood retrieval, no more loops needed."
        if v["modification"] == "make it red"
        else "Step 1: x\nStep 3: Suggestions: be bolder\nand brighter"
    )
    world.llm.replies["autocir_replan"] = lambda v: f"Edited Description: {v['last_description']} +"


def test_plan_ranks_by_the_description_and_the_loop_stops_for_good(world):
    script(world)
    state, ctx = world.run(build(world, max_check_num=2))
    plan = [f"target {q.text}" for q in world.queries]
    np.testing.assert_array_equal(state.stage_candidates["plan"].ids[:, :10], ranking_of(world, plan)[0])
    r1 = [plan[0], plan[1] + " +", plan[2] + " +"]
    r2 = [plan[0], plan[1] + " + +", plan[2] + " + +"]
    assert_ranking(state.stage_candidates["round1"], *ranking_of(world, r1))
    assert_ranking(state.candidates, *ranking_of(world, r2))
    checks = [v for t, v in world.llm.calls if t == "autocir_check"]
    assert [v["modification"] for v in checks] == ["make it red", "add a dog", "faster", "add a dog", "faster"]
    # the corrector reads the gallery captions of the current top 10, as the released prompt renders a list
    ids0 = ranking_of(world, plan)[0][1]
    assert checks[1]["top_captions"] == str([f"caption of g{i}" for i in ids0]) and checks[1]["n"] == 10
    replans = [v for t, v in world.llm.calls if t == "autocir_replan"]
    assert [v["suggestions"] for v in replans] == ["be bolder\nand brighter"] * 4
    rec = state.record(world.queries[0], "round2")
    assert rec == {"round": 2, "asked": False, "stopped": True, "description": plan[0], "active": False}
    assert state.record(world.queries[0], "round1")["verdict"].endswith("no more loops needed.")


def test_round_zero_only_and_the_fallbacks(world):
    world.llm.replies["autocir_plan"] = "no marker here"
    state, _ = world.run(build(world, max_check_num=0))
    assert list(state.stage_candidates) == ["plan"]
    assert [state.record(q, "plan")["description"] for q in world.queries] == [q.text for q in world.queries]
    assert not [t for t, _ in world.llm.calls if t.startswith("autocir_check")]


def test_upstream_compat_readings():
    reply = "Edited Description: a dress: blue\nEdited Description: second"
    assert edited_description(reply, "fb", upstream_compat=True) == "a dress"
    assert edited_description(reply, "fb") == "a dress: blue"
    assert edited_description('**Edited Description:** "a blue dress"', "fb") == "a blue dress"
    assert edited_description("**Edited Description:** a blue dress", "fb", upstream_compat=True) == "fb"
    assert edited_description("Edited Description:   ", "fb") == "fb"
    assert edited_description("Edited Description:", "fb", upstream_compat=True) == "fb"
    text = "Step 2: no\nSuggestions: make it blue\nadd a dog\n"
    assert extract_suggestions(text, upstream_compat=True) == ": make it blueadd a dog"
    assert extract_suggestions(text) == "make it blue\nadd a dog"
    assert extract_suggestions("nothing") == "" and extract_suggestions("nothing", upstream_compat=True) == ""
    assert says_stop("good retrieval, no more loops needed.") and not says_stop(
        "good retrieval, no more loops needed.", upstream_compat=True
    )
    assert says_stop("Good retrieval, no more loops needed", upstream_compat=True)
    assert released_list(["a 'x'", "b"]) == str(["a 'x'", "b"])


def test_upstream_compat_error_reply_keeps_the_last_description(world):
    script(world)
    world.llm.replies["autocir_replan"] = "Error: Edited Description: broken"
    state, _ = world.run(build(world, max_check_num=1, upstream_compat=True))
    assert state.record(world.queries[1], "round1")["description"] == "target add a dog"
    assert state.record(world.queries[1], "round1")["suggestions"] == ": be bolderand brighter"


def test_rules_answer_the_loop_honestly():
    r = RulesLLM()
    plan = r.run_task("autocir_plan", {"reference_caption": "a red dress", "modification": "make it blue"})
    assert edited_description(plan, "fb") == "a blue dress"
    unmet = r.run_task(
        "autocir_check",
        {
            "reference_caption": "a red dress",
            "modification": "make it blue",
            "top_captions": released_list(["a red dress", "a blue dress"]),
            "n": 2,
        },
    )
    assert not says_stop(unmet) and extract_suggestions(unmet) == "make it blue"
    met = r.run_task(
        "autocir_check",
        {
            "reference_caption": "a red dress",
            "modification": "make it blue",
            "top_captions": released_list(["a blue dress"]),
            "n": 1,
        },
    )
    assert says_stop(met, upstream_compat=True)
    again = r.run_task(
        "autocir_replan",
        {
            "reference_caption": "a red dress",
            "modification": "make it blue",
            "last_description": "a green dress",
            "suggestions": "make it blue",
        },
    )
    assert edited_description(again, "fb") == "a blue dress"


def test_prompts_folder_and_bad_config(world, tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    for f, task in (("planner.txt", "plan"), ("corrector.txt", "check"), ("replanner.txt", "replan")):
        (d / f).write_text(load_prompt(f"tasks/autocir_{task}").text + "\n(the authors' wording)\n")
    m = build(world, prompts=str(d))
    assert m.cfg.planner_prompt == str((d / "planner.txt").resolve())
    assert m.prompt("corrector_prompt").text.endswith("(the authors' wording)\n")
    assert m.identity != build(world).identity
    (d / "corrector.txt").unlink()
    with pytest.raises(InputError, match="lacks corrector.txt"):
        build(world, prompts=str(d))
    with pytest.raises(ValueError, match="max_check_num"):  # the config's range (ConfigError)
        build(world, max_check_num=-1)
    with pytest.raises(ValueError, match="check_top"):
        build(world, check_top=0)
