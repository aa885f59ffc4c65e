"""XR: the coarse filter (per-text similarity, RRF), the fine filter (questions on image and
caption, re-rank of the head) and stage 3 equal docs/design/methods.md computed here in numpy; the
upstream answer-parsing bugs under ``upstream_compat``; the ablation rows; bad configurations."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.methods.xr import upstream_image_match, upstream_is_yes, upstream_questions
from agentcir.framework.recipe import compose
from agentcir.registry import METHODS, ConfigError

from .conftest import SetVerifier, assert_ranking, enc_text, topk_desc

VIDEO = " + ".join(f"caption of f{i}" for i in range(5))
REFS = ["caption of g0", "caption of g1", VIDEO]
QUESTIONS = [("it is g3", True), ("it is g5", False), ("it is g7", True)]  # the first 3 of the LLM's 4


def build(world, accept=(), **cfg):
    ver = SetVerifier(accept=accept)
    base = {"top_k": 10, "k_prime": 6, "alpha": 4}
    method = METHODS.build(
        "xr", {**base, **cfg}, encoder=world.encoder, llm=world.llm, captioner=world.captioner, verifier=ver
    )
    return method, ver


def variant_sims(world, tau=0.15):
    """Per variant ``[Q, N]``: mean over its texts of (1 - tau) cos(t, I) + tau cos(t, C); the reference removed."""
    I, C = world.I, world.C
    out = {}
    for v in ("v1", "v2", "aug"):
        rows = []
        for q, ref in zip(world.queries, REFS):
            v1 = [f"{ref} {q.text} d{i}" for i in range(3)]
            v2 = [f"{ref} rewritten {q.text}"]
            texts = {"v1": v1, "v2": v2, "aug": v1 + v2}[v]
            rows.append(np.mean([(1 - tau) * enc_text(t) @ I.T + tau * enc_text(t) @ C.T for t in texts], axis=0))
        S = np.stack(rows)
        S[0, world.row("g0")] = np.nan
        S[1, world.row("g1")] = np.nan
        out[v] = S
    return out


def rrf(world, sims):
    """RRF over the variants' complete rankings, ranks from 1, z = 60."""
    N = sims["v1"].shape[1]
    fused = np.full_like(sims["v1"], np.nan)
    for q in range(fused.shape[0]):
        total = {}
        for S in sims.values():
            ids, _ = topk_desc(S[q : q + 1], N)
            for r, i in enumerate(ids[0][ids[0] >= 0], start=1):
                total[i] = total.get(i, 0.0) + 1.0 / (60 + r)
        for i, s in total.items():
            fused[q, i] = s
    return fused


def fine(world, ids, sims, *, H=6, qa_weight=0.5, image=True, caption=True, compat=False):
    """The fine filter from the formulas: answers on image and caption, re-rank of the head."""
    out_ids, out_s = ids.copy(), sims.copy()
    for q in range(ids.shape[0]):
        head = ids[q, :H]
        qa, cap = [], []
        for r in head:
            stem = world.gallery.ids[r]
            img = sum((st.split()[-1] == stem) == ans for st, ans in QUESTIONS) / 3
            if compat:  # every caption reply holds "not" -> no; expected answers bool("...") -> all true
                txt = sum(False == bool(str(ans)) for _, ans in QUESTIONS) / 3  # noqa: E712
            else:
                txt = sum((st.split()[-1] == stem) == ans for st, ans in QUESTIONS) / 3
            qa.append(img)
            cap.append(txt)
        s = sims[q, :H]
        mm = (s - s.min()) / (s.max() - s.min())
        w = qa_weight if (image and caption) else (1.0 if image else 0.0)
        score = (w * np.array(qa) + (1 - w) * np.array(cap)) * mm
        order = sorted(range(H), key=lambda j: -score[j])  # stable: ties keep their order
        out_ids[q, :H] = head[order]
        out_s[q, :H] = score[order]
    return out_ids, out_s


def test_full_xr_matches_the_formulas(world):
    method, ver = build(world)
    state, ctx = world.run(method, backend="numba")
    sims = variant_sims(world)
    ids, s = topk_desc(sims["aug"], 10)
    assert_ranking(state.stage_candidates["coarse"], ids, s)
    fused_ids, _ = topk_desc(rrf(world, sims), 10)
    np.testing.assert_array_equal(state.arrays["stage1_fused_ids"], fused_ids)
    for v in ("v1", "v2"):
        np.testing.assert_array_equal(state.arrays[f"stage1_{v}_ids"], topk_desc(sims[v], 10)[0])
    qs = state.record(world.queries[0], "questions")["questions"]
    assert [(x["statement"], x["answer"]) for x in qs] == QUESTIONS
    assert_ranking(state.candidates, *fine(world, ids, s))
    assert list(state.stage_candidates) == ["coarse", "fine"]
    # 6 candidates x 3 statements per query on the image (verifier) and on the caption (LLM entail)
    assert [t for t, _ in world.llm.calls].count("entail") + ctx.stats["fine"].cache_hits >= 3 * 6 * 3


@pytest.mark.parametrize("mode", ["qa", "caption"])
def test_single_path_fine_filter(world, mode):
    method, _ = build(world, s2_mode=mode)
    state, _ = world.run(method)
    ids, s = topk_desc(variant_sims(world)["aug"], 10)
    assert_ranking(state.candidates, *fine(world, ids, s, image=mode == "qa", caption=mode == "caption"))


def test_fused_source_reranks_the_rrf_list(world):
    method, _ = build(world, stage2_source="fused")
    state, _ = world.run(method)
    ids, s = topk_desc(rrf(world, variant_sims(world)), 10)
    assert_ranking(state.stage_candidates["coarse"], ids, s)
    assert_ranking(state.candidates, *fine(world, ids, s))


def test_stage3_moves_the_first_yes_to_the_front(world):
    method, ver = build(world, stage3=True, accept=("g2", "g4", "g6", "g8"))
    state, _ = world.run(method)
    ids, s = fine(world, *topk_desc(variant_sims(world)["aug"], 10))
    acc = {world.row(x) for x in ("g2", "g4", "g6", "g8")}
    asked = []
    for q in range(3):
        row = list(ids[q][:4])
        hit = next((j for j, r in enumerate(row) if r in acc), None)
        asked += [world.gallery.ids[r] for r in row[: (hit + 1 if hit is not None else 4)]]
        if hit is not None:
            r, best = row[hit], s[q].max()
            keep = [j for j in range(10) if ids[q, j] != r]
            ids[q], s[q] = [r] + list(ids[q, keep]), [best + 100.0] + list(s[q, keep])
    assert sorted(ver.verify_calls) == sorted(asked)
    assert_ranking(state.candidates, ids, s)


def test_upstream_compat_reproduces_the_released_parsing(world):
    statements = (
        '{"questions": [{"statement": "it is g3", "answer": "True"}, '
        '{"statement": "it is g5", "answer": "False"}, '
        '{"statement": "it is g7", "answer": "True"}]}'
    )
    judge = lambda v: (
        "Yes, it is not wrong"
        if v["statement"].split()[-1] in v["caption"].split()  # noqa: E731
        else "No."
    )
    world.llm.replies.update({"questions": statements, "entail": judge})
    strict, _ = build(world)
    state, _ = world.run(strict, name="strict")
    ids, s = topk_desc(variant_sims(world)["aug"], 10)
    assert_ranking(state.candidates, *fine(world, ids, s))  # "Yes, ..." is yes; "False" is false
    # compat asks with the released prompts, unchecked task names: the replies are read as released
    world.llm.replies.update({"xr_statements_released": statements, "xr_entail_released": judge})
    compat, _ = build(world, upstream_compat=True)
    state, _ = world.run(compat, name="compat")
    qs = state.record(world.queries[0], "questions")["questions"]
    assert [x["caption_answer"] for x in qs] == [True, True, True]  # bool("False") is True
    assert [x["raw"] for x in qs] == ["True", "False", "True"]  # the image path compares the text
    assert_ranking(state.candidates, *fine(world, ids, s, compat=True))


def test_upstream_compat_image_path_never_matches_json_booleans(world):
    # the released QA path compares "True"/"False" strings with the raw answer: JSON booleans
    # (this project's statements prompt) never match, so every image score is 0
    world.llm.replies["xr_statements_released"] = (
        '{"questions": [{"statement": "it is g3", "answer": true}, {"statement": "it is g5", "answer": false}]}'
    )
    world.llm.replies["xr_entail_released"] = "No"
    compat, _ = build(world, upstream_compat=True)
    state, _ = world.run(compat, name="compat-bool")
    for q in world.queries:
        assert state.record(q, "fine")["image_correct"] == [0] * 6
        # caption path: "No" is no and bool(False) is False, so the false statement counts
        assert state.record(q, "fine")["caption_correct"] == [1] * 6


def test_upstream_readers():
    assert upstream_is_yes("Yes") and upstream_is_yes("yes.")
    for reply in ("Yes, but I do not know", "yes - cannot tell", "No", "false", "Yes, nothing else", "true", "True"):
        assert not upstream_is_yes(reply)  # the released caption path counts only "yes" (and no "no")
    qs = upstream_questions(
        '{"questions": [{"statement": "a", "answer": "False"}, {"statement": "b", "answer": false},'
        ' {"statement": "c", "answer": "maybe"}, {"statement": " "}]}'
    )
    assert [(x["statement"], x["answer"], x["caption_answer"]) for x in qs] == [
        ("a", False, True),
        ("b", False, False),
        ("c", None, True),
    ]
    # the released format: step2 pairs, every one of them (no cut), malformed entries skipped
    qs = upstream_questions(
        '{"step1": "x", "step2": [["Is it red?", "True"], ["Is it big?", "False"], ["bad"], '
        '["Is it round?", "True"], ["Is it old?", "False"]]}'
    )
    assert [(x["statement"], x["raw"], x["caption_answer"]) for x in qs] == [
        ("Is it red?", "True", True),
        ("Is it big?", "False", True),
        ("Is it round?", "True", True),
        ("Is it old?", "False", True),
    ]
    assert upstream_image_match(True, "True") and upstream_image_match(False, "False")
    assert not upstream_image_match(True, True) and not upstream_image_match(False, "false")


def test_upstream_compat_experiment_composes():
    recipe = compose(["+experiment=xr_upstream_compat"])
    assert recipe["method"]["upstream_compat"] is True
    assert recipe["verifier"]["name"] == "vlm" and recipe["verifier"]["reading"] == "released"


@pytest.mark.parametrize(
    "name,tau,stages",
    [
        ("xr_visual_sim", 0.0, ["coarse"]),
        ("xr_text_sim", 0.15, ["coarse"]),
        ("xr_text_qa", 0.15, ["coarse", "fine"]),
        ("xr_visual_qa", 0.15, ["coarse", "fine"]),
    ],
)
def test_ablation_rows(world, name, tau, stages):
    recipe = compose([f"+experiment={name}", "method.top_k=10", "method.k_prime=6"])
    cfg = {k: v for k, v in recipe["method"].items() if k != "name"}
    method = METHODS.build(
        "xr", cfg, encoder=world.encoder, llm=world.llm, captioner=world.captioner, verifier=SetVerifier()
    )
    state, _ = world.run(method)
    assert list(state.stage_candidates) == stages
    ids, s = topk_desc(variant_sims(world, tau)["aug"], 10)
    if stages == ["coarse"]:
        assert_ranking(state.candidates, ids, s)
    else:
        mode = recipe["method"]["s2_mode"]
        assert_ranking(state.candidates, *fine(world, ids, s, image=mode == "both"))


def test_bad_configs(world):
    deps = dict(encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    for cfg, msg in [
        ({"variants": ["v3"]}, "field 'variants' must list some of v1, v2, aug, got \\['v3'\\]"),
        ({"variants": ["v1", "v1"]}, "repeats a variant"),
        ({"stage2_source": "best"}, "field 'stage2_source': must be one of aug, fused, v1, v2, got 'best'"),
        ({"variants": ["v1"], "stage2_source": "fused"}, "stage2_source=fused needs at least two variants"),
        ({"variants": ["v1", "v2"], "stage2_source": "aug"}, "stage2_source=aug is not one of the ranked"),
        ({"s2_mode": "all"}, "field 's2_mode': must be one of both, qa, caption, none"),
        ({"k_prime": 0}, "field 'k_prime': must be at least 1, got 0"),
        ({"tau": 2.0}, "field 'tau': must be within 0..1, got 2"),
    ]:
        with pytest.raises((InputError, ConfigError), match=msg):
            METHODS.build("xr", cfg, **deps)
    with pytest.raises(InputError, match="s2_mode=both asks questions on the candidate images and needs a verifier"):
        METHODS.build("xr", {}, **deps).stages()
    with pytest.raises(InputError, match="stage3=true needs a verifier"):
        METHODS.build("xr", {"s2_mode": "caption", "stage3": True}, **deps).stages()
    assert [s.name for s in METHODS.build("xr", {"s2_mode": "caption"}, **deps).stages()] == [
        "imagine",
        "coarse",
        "questions",
        "fine",
    ]
