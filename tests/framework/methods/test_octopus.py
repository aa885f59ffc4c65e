"""OCTOPUS: every stage's scores equal docs/design/methods.md computed here in numpy, for the full method and
each Table 3 ablation switch; the verification gate, order and promotion; bad configurations."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import METHODS, ConfigError

from .conftest import FixedGenerator, SetVerifier, assert_ranking, enc_text, save_index_image, topk_desc, unit

K = 5  # textual proxies asked for; the scripted LLM writes 3 (padded with the last)
FRAMES = [0, 2, 4]  # 3 of the video's 5 keyframes, uniformly sampled


def build(world, tmp_path, *, accept=("g5",), **cfg):
    outside = save_index_image(tmp_path / "generated" / "gen.png", 30)
    refined0 = "refined caption of g0 then make it red"
    gen = FixedGenerator(proxy_of={refined0: world.gallery.paths[3]}, outside=outside)
    ver = SetVerifier(accept=accept)
    base = {"top_k": 8, "num_keyframes": 3, "num_proxies": K, "gate": 0.0, "alpha": 6}
    method = METHODS.build(
        "octopus",
        {**base, **cfg},
        encoder=world.encoder,
        llm=world.llm,
        captioner=world.captioner,
        generator=gen,
        detector=world.detector,
        verifier=ver,
    )
    return method, gen, ver


def expected(
    world,
    *,
    reasoning=True,
    refinement=True,
    proxies=True,
    visual=True,
    objects=True,
    creator=True,
    v2v=False,
    drop_visual=False,
    lam=0.2,
    tau=0.04,
):
    """The OCTOPUS scores of the three queries, from the formulas (docs/design/methods.md)."""
    I, C = world.I, world.C
    frames = unit(np.stack([world.image_vector(20 + i) for i in FRAMES]))
    f_ref = np.stack([world.image_vector(0), world.image_vector(1), unit(frames.mean(0))])
    video = " + ".join(f"caption of f{i}" for i in FRAMES)
    refs = ["caption of g0", "caption of g1", video]
    out = {"S": [], "targets": [], "proxies": []}
    for qi, (q, ref) in enumerate(zip(world.queries, refs)):
        initial = f"{ref} then {q.text}" if reasoning else f"{ref}, {q.text}"
        target = f"refined {initial}" if refinement else initial
        has_gen = creator and visual
        to_g3 = target == "refined caption of g0 then make it red"  # the generator's gallery proxy
        gen_vec = world.image_vector(3) if to_g3 else world.image_vector(30)
        if creator and objects:
            ref_stem = ["g0", "g1", "f2"][qi]  # the middle sampled keyframe of the video
            gen_stem = ("g3" if to_g3 else "gen") if has_gen else None
            kept = [f"obj-{ref_stem}"] + ([f"obj-{gen_stem}"] if gen_stem else [])
        else:
            kept = []
        if creator and proxies:
            texts = [f"{target} #{i} {' '.join(kept)}".strip() for i in range(3)]
            texts += [texts[-1]] * (K - 3)
        else:
            texts = [target]
        P = np.stack([enc_text(t) for t in texts])
        q_t = enc_text(target)
        s = np.maximum((f_ref[qi] @ I.T)[None, :] - P @ I.T, 0.0).mean(axis=1)  # s_i = mean_j relu(S_r - S_E)
        w = np.exp((s - s.max()) / tau) / np.exp((s - s.max()) / tau).sum()
        e = unit(w @ P)
        S_t2v = ((e + q_t) / 2) @ I.T
        if has_gen:
            q_v = unit(gen_vec + gen_vec.max() / (f_ref[qi].max() + 1e-8) * f_ref[qi])
        else:
            q_v = f_ref[qi]
        if drop_visual:
            S = S_t2v
        else:
            S_v2t = q_v @ (I if v2v else C).T
            S = lam * S_t2v + (1 - lam) * (S_v2t * S_t2v)
        if qi < 2:
            S[qi] = -10.0  # the reference item is masked to -10
        out["S"].append(S)
        out["targets"].append(target)
        out["proxies"].append(texts)
    out["S"] = np.stack(out["S"])
    return out


def test_full_octopus_matches_the_formulas(world, tmp_path):
    method, gen, ver = build(world, tmp_path)
    state, ctx = world.run(method, backend="numba")
    exp = expected(world)
    recs = [state.record(q, "create") for q in world.queries]
    assert [state.record(q, "perceive")["target_caption"] for q in world.queries] == exp["targets"]
    assert [r["proxies"] for r in recs] == exp["proxies"]
    assert recs[0]["objects"] == ["obj-g0", "bad-g0", "obj-g3", "bad-g3"] and recs[0]["removed_objects"] == [
        "bad-g0",
        "bad-g3",
    ]
    assert gen.calls == exp["targets"]
    # perceive: the target description alone; create: the text-to-vision path alone
    q_t = np.stack([enc_text(t) for t in exp["targets"]])
    S0 = q_t @ world.I.T
    S0[0, 0], S0[1, 1] = -10.0, -10.0
    assert_ranking(state.stage_candidates["perceive"], *topk_desc(S0, 8))
    assert_ranking(state.stage_candidates["retrieve"], *topk_desc(exp["S"], 8))
    # verification: every query (gate 0), candidates judged in rank order until the first accepted (g5)
    ids, scores = topk_desc(exp["S"], 8)
    g5 = world.row("g5")
    final_ids, final_scores = ids.copy(), scores.copy()
    asked = []
    for qi in range(3):
        row = list(ids[qi][:6])
        stop = row.index(g5) if g5 in row else len(row) - 1
        asked += [world.gallery.ids[r] for r in row[: stop + 1]]
        if g5 in row:
            final_ids[qi] = [g5] + [r for r in ids[qi] if r != g5]
            final_scores[qi] = [scores[qi].max() + 100.0] + [s for r, s in zip(ids[qi], scores[qi]) if r != g5]
    assert sorted(ver.verify_calls) == sorted(asked)
    assert_ranking(state.candidates, final_ids, final_scores, atol=1e-4)
    assert list(state.stage_candidates) == ["perceive", "create", "retrieve", "verify"]
    assert ctx.stats["verify"].calls == len(asked)


@pytest.mark.parametrize(
    "switch,kw",
    [
        ({"modification_reasoning": False}, {"reasoning": False}),
        ({"refinement": False}, {"refinement": False}),
        ({"textual_proxies": False}, {"proxies": False}),
        ({"visual_proxy": False}, {"visual": False}),
        ({"objects": False}, {"objects": False}),
        ({"creator": False}, {"creator": False}),
        ({"cross_modal": "v2v"}, {"v2v": True}),
        ({"visual_proxy": False, "visual_without_proxy": "none"}, {"visual": False, "drop_visual": True}),
        ({"lam": 0.6, "tau": 0.1}, {"lam": 0.6, "tau": 0.1}),
    ],
)
def test_ablation_switches(world, tmp_path, switch, kw):
    method, gen, ver = build(world, tmp_path, verification=False, **switch)
    state, ctx = world.run(method, backend="reference")
    exp = expected(world, **kw)
    assert_ranking(state.candidates, *topk_desc(exp["S"], 8))
    assert "verify" not in state.stage_candidates and ver.verify_calls == []
    if not kw.get("creator", True) or not kw.get("visual", True):
        assert gen.calls == []
    if not kw.get("creator", True):
        assert not any(t in ("filter_objects", "textual_proxies") for t, _ in world.llm.calls)
    if not kw.get("reasoning", True):
        assert not any(t == "target_caption" for t, _ in world.llm.calls)


def test_uncertainty_gate_and_limits(world, tmp_path):
    method, _, ver = build(world, tmp_path, accept=(), verification=True, gate=0.5, max_verified=1)
    state, _ = world.run(method, backend="numba")
    S = expected(world)["S"]
    ids, scores = topk_desc(S, 8)
    H = []
    for row in S:  # entropy of softmax(S / 0.02) over the whole gallery
        x = row / 0.02
        p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        H.append(-(p * np.log(p)).sum())
    H = np.array(H)
    ratio = np.clip(scores[:, 1] / (scores[:, 0] + 1e-8), 0, 1)
    mm = lambda v: (v - v.min()) / (v.max() - v.min() + 1e-8)  # noqa: E731
    u = 0.5 * mm(H) + 0.5 * mm(ratio)
    np.testing.assert_allclose(state.arrays["uncertainty"], u, atol=1e-5)
    chosen = [i for i in np.argsort(-u, kind="stable") if u[i] >= 0.5][:1]
    verified = [q.id for q in world.queries if state.record(q, "verify")]
    assert verified == [world.queries[i].id for i in chosen]
    assert len(ver.verify_calls) == 6 * len(chosen)  # nothing accepted: all alpha candidates judged
    assert_ranking(state.candidates, ids, scores)  # nothing accepted: ranking unchanged


def test_a_single_query_counts_as_uncertain(world, tmp_path):
    # the released min-max over queries gives 0 for one query (never verified); a single
    # search (agentcir search / serve) is verified instead
    method, _, _ = build(world, tmp_path, accept=(), verification=True, gate=0.8)
    scores = np.array([[0.9, 0.5, 0.1]], np.float32)
    u, chosen = method.gate_queries(scores, np.array([1.0], np.float32))
    assert u.tolist() == [1.0] and chosen.tolist() == [0]
    u, chosen = method.gate_queries(np.repeat(scores, 2, axis=0), np.array([1.0, 1.0], np.float32))
    assert u.tolist() == [0.0, 0.0] and chosen.tolist() == []  # two equal queries: the released zeros


def test_bad_configs_and_missing_verifier(world):
    deps = dict(encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    with pytest.raises(ConfigError, match="field 'cross_modal': must be one of v2t, v2v, got 'v2x'"):
        METHODS.build("octopus", {"cross_modal": "v2x"}, **deps)
    with pytest.raises(ConfigError, match="field 'lam': must be within 0..1, got 1.5"):
        METHODS.build("octopus", {"lam": 1.5}, **deps)
    with pytest.raises(ConfigError, match="field 'num_proxies': must be at least 1, got 0"):
        METHODS.build("octopus", {"num_proxies": 0}, **deps)
    with pytest.raises(InputError, match="verification=true needs a verifier"):
        METHODS.build("octopus", {}, **deps).stages()
    # no generator or detector: the Creator still writes textual proxies; q_v is the reference
    method = METHODS.build("octopus", {"verification": False, "top_k": 8, "num_keyframes": 3, "num_proxies": K}, **deps)
    state, _ = world.run(method)
    assert_ranking(state.candidates, *topk_desc(expected(world, visual=False, objects=False)["S"], 8))


def test_a_rerun_is_resumed_without_model_calls(world, tmp_path):
    method, gen, ver = build(world, tmp_path)
    first, _ = world.run(method)
    calls = len(world.llm.calls)
    method2, gen2, ver2 = build(world, tmp_path)
    again, ctx = world.run(method2)
    assert len(world.llm.calls) == calls and gen2.calls == [] and ver2.verify_calls == []
    assert all(s.resumed_queries == 3 for s in ctx.stats.values())  # every stage loaded from the run directory
    np.testing.assert_array_equal(again.candidates.ids, first.candidates.ids)
