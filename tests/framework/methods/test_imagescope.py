"""ImageScope: stage-1 similarity averaged over the reasoner's descriptions (image + caption, tau),
the stage-2 proposition values and the stable head re-sort, the stage-3 first yes to the front, the
released fallbacks and ``upstream_compat`` readings, the released-prompt placeholders; bad configurations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentcir.components.llms.rules import RulesLLM
from agentcir.framework.errors import InputError
from agentcir.framework.methods.imagescope import atomic_text, parse_propositions, parse_reason, stable_value_rerank
from agentcir.framework.prompts import load_prompt
from agentcir.registry import METHODS

from .conftest import SetVerifier, assert_ranking, enc_text, topk_desc

VIDEO = " + ".join(f"caption of f{i}" for i in range(5))
REFS = ["caption of g0", "caption of g1", VIDEO]


def fenced(obj) -> str:
    return "Reasoning first.\n```json\n" + json.dumps(obj) + "\n```\nDone."


def build(world, accept=(), **cfg):
    ver = SetVerifier(accept=accept)
    m = METHODS.build(
        "imagescope",
        {"top_k": 10, "k": 6, "alpha": 3, **cfg},
        encoder=world.encoder,
        llm=world.llm,
        captioner=world.captioner,
        verifier=ver,
    )
    return m, ver


def stage1(world, tau=0.15):
    rows = []
    for q, ref in zip(world.queries, REFS):
        texts = [f"d1 {q.text}", f"d2 {ref}"]
        rows.append(
            np.mean([(1 - tau) * enc_text(t) @ world.I.T + tau * enc_text(t) @ world.C.T for t in texts], axis=0)
        )
    S = np.stack(rows)
    S[0, world.row("g0")] = np.nan
    S[1, world.row("g1")] = np.nan
    return topk_desc(S, 10)


def script(world, answers=("True", "False")):
    world.llm.replies["imagescope_reason"] = lambda v: fenced(
        {
            "step1": [["Modification", v["instruction"]], ["bad"]],
            "step2": [f"d1 {v['instruction']}", f"d2 {v['ref_image_desc']}"],
        }
    )
    world.llm.replies["imagescope_propositions"] = fenced(
        {"step1": [], "step2": [["it is g3", answers[0]], ["it is g5", answers[1]], ["not a pair"]]}
    )


def test_stages_equal_the_released_steps(world):
    script(world)
    m, ver = build(world, accept={"g9", "g3", "g5"})
    state, _ = world.run(m)
    ids1, sc1 = stage1(world)
    assert_ranking(state.stage_candidates["retrieve"], ids1, sc1)
    props = [v for t, v in world.llm.calls if t == "imagescope_propositions"]
    assert props[0]["atomic_inst"] == "\n   (1) Modification: make it red\n"
    # stage 2: value = answers equal to the expected ones (g3: 2, g5: 0, others 1); stable sort of the head
    re = state.stage_candidates["rerank"].ids
    for q in range(3):
        head = [int(i) for i in ids1[q, :6]]
        val = {world.row("g3"): 2, world.row("g5"): 0}
        want = sorted(head, key=lambda i: -val.get(i, 1))
        assert [int(i) for i in re[q, :6]] == want
        np.testing.assert_array_equal(re[q, 6:10], ids1[q, 6:10])
        s = state.stage_candidates["rerank"].scores[q]
        assert np.all(np.diff(s[np.isfinite(s)]) <= 0)
    # stage 3: the first accepted of the top alpha moves to the front; judging stops there
    for q in range(3):
        top3 = [world.gallery.ids[i] for i in re[q, :3]]
        first = next((j for j, s in enumerate(top3) if s in {"g9", "g3", "g5"}), None)
        final = [world.gallery.ids[i] for i in state.candidates.ids[q, :3]]
        if first is None:
            assert final == top3
        else:
            assert final[0] == top3[first]
    assert state.record(world.queries[0], "reason")["step2"] == ["d1 make it red", "d2 caption of g0"]


def test_upstream_compat_answers_compare_as_strings(world):
    script(world, answers=(True, False))  # JSON booleans: never equal to the released "True"/"False"
    m, _ = build(world, upstream_compat=True, stages=["s1", "s2"])
    state, _ = world.run(m)
    np.testing.assert_array_equal(state.candidates.ids[:, :6], stage1(world)[0][:, :6])
    assert all(v == 0 for q in world.queries for v in state.record(q, "rerank")["values"])


def test_correct_reading_accepts_booleans(world):
    script(world, answers=(True, False))
    m, _ = build(world, stages=["s1", "s2"])
    state, _ = world.run(m)
    assert max(state.record(world.queries[0], "rerank")["values"]) == 2


def test_released_fallbacks_and_readings():
    ok = fenced({"step1": [["Addition", "a dog"]], "step2": ["x", "y"]})
    assert parse_reason(ok, "inst", "ref") == {"step1": [["Addition", "a dog"]], "step2": ["x", "y"], "parsed": True}
    for compat in (False, True):
        assert parse_reason("no json", "inst", "ref", upstream_compat=compat) == {
            "step1": [["Modification", "inst"]],
            "step2": ["ref"],
            "parsed": False,
        }
        assert parse_reason(fenced({"step1": [], "step2": []}), "i", "ref", upstream_compat=compat)["step2"] == ["ref"]
    # the released brace fallback is non-greedy: a nested object is cut at its first "}" and repaired
    nested = 'Answer: {"step1": [["Addition", "x"]], "step2": ["a {b} c", "d"]}'
    assert parse_reason(nested, "i", "ref")["step2"] == ["a {b} c", "d"]
    assert parse_reason(nested, "i", "ref", upstream_compat=True)["step2"] != ["a {b} c", "d"]
    # stage 2: only a fenced json block counts in the released reading
    bare = '{"step2": [["Is it red?", "True"]]}'
    assert parse_propositions(bare, upstream_compat=True) is None
    assert parse_propositions(bare) == [{"question": "Is it red?", "raw": "True", "answer": True}]
    trailing = '```json\n{"step1": ["s"], "step2": [["Is it red?", "False"],],}\n```'
    assert parse_propositions(trailing, upstream_compat=True) == [
        {"question": "Is it red?", "raw": "False", "answer": False}
    ]
    assert atomic_text([["A", "x"], ["bad"], ["B", "y"]]) == "\n   (1) A: x\n   (2) B: y\n"


def test_stable_value_rerank_keeps_tie_order_and_the_tail():
    ids = np.array([[5, 4, 3, 2, 1, -1]], np.int32)
    sc = np.array([[0.9, 0.8, 0.7, 0.6, 0.5, -np.inf]], np.float32)
    out = stable_value_rerank(ids, sc, [[1, 2, 1, 2]], k=4)
    assert out.ids.tolist() == [[4, 2, 5, 3, 1, -1]]
    assert out.scores[0, :4].tolist() == [2, 2, 1, 1] and out.scores[0, 4] < 1 and np.isneginf(out.scores[0, 5])


def test_released_prompt_folder_placeholders(world, tmp_path):
    d = tmp_path / "CIRR"
    d.mkdir()
    (d / "prompt1_stage1_reasoner.txt").write_text("Instruction: [[INSTRUCTION]]\nReference: [[REF_IMAGE_DESC]]\n")
    (d / "prompt2_stage2_reasoner.txt").write_text("Instruction: [[INSTRUCTION]]\nAtomic:[[ATOMIC_INST]]")
    m, _ = build(world, prompts=str(d))
    p = load_prompt(m.cfg.reason_prompt)
    assert p.variables == {"instruction", "ref_image_desc"}
    assert (
        p.render({"instruction": "add a dog", "ref_image_desc": "a cat"})
        == "Instruction: add a dog\nReference: a cat\n"
    )
    assert (
        load_prompt(m.cfg.propositions_prompt).render(instruction="i", atomic_inst="\n   (1) A: x\n")
        == "Instruction: i\nAtomic:\n   (1) A: x\n"
    )
    with pytest.raises(InputError, match="is not a folder"):
        build(world, prompts=str(tmp_path / "nope"))


def test_rules_reply_in_the_released_format():
    r = RulesLLM()
    got = parse_reason(
        r.run_task("imagescope_reason", {"instruction": "make it blue", "ref_image_desc": "a red dress"}),
        "make it blue",
        "a red dress",
        upstream_compat=True,
    )
    assert got["parsed"] and got["step1"][0][0] == "Modification" and len(got["step2"]) == 3
    assert all("blue" in d for d in got["step2"])
    qs = parse_propositions(
        r.run_task("imagescope_propositions", {"instruction": "make it blue", "atomic_inst": "\n"}),
        upstream_compat=True,
    )
    assert qs and all(x["raw"] in ("True", "False") for x in qs)


def test_bad_config(world):
    with pytest.raises(InputError, match="stages"):
        build(world, stages=["s2"])
    with pytest.raises(InputError, match="tau"):
        build(world, tau=2.0)
    m = METHODS.build("imagescope", {}, encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    with pytest.raises(InputError, match="need a verifier"):
        m.stages()
    assert [
        s.name
        for s in METHODS.build(
            "imagescope", {"stages": ["s1"]}, encoder=world.encoder, llm=world.llm, captioner=world.captioner
        ).stages()
    ] == ["reason", "retrieve"]
