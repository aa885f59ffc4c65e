"""The baselines' scores equal the formulas computed here in numpy (tiny lookup encoder, scripted LLM)."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.registry import METHODS, ConfigError

from .conftest import assert_ranking, enc_text, topk_desc, unit


def _refs(world) -> np.ndarray:
    """Reference embeddings: gallery rows for g0, g1; the normalised mean of the 5 video frames."""
    frames = unit(np.stack([world.image_vector(20 + i) for i in range(5)]))
    return np.stack([world.image_vector(0), world.image_vector(1), unit(frames.mean(0))])


def _removed(S: np.ndarray, world) -> np.ndarray:
    S = S.copy()
    S[0, world.row("g0")] = np.nan
    S[1, world.row("g1")] = np.nan
    return S


@pytest.mark.parametrize(
    "key,image_w,text_w", [("image_only", 1.0, 0.0), ("text_only", 0.0, 1.0), ("image_text_sum", 0.3, 0.7)]
)
def test_embedding_baselines(world, key, image_w, text_w):
    method = METHODS.build(key, {"top_k": 5, "image_weight": 0.3}, encoder=world.encoder)
    state, _ = world.run(method, backend="numba")
    texts = np.stack([enc_text(q.text) for q in world.queries])
    q = unit(image_w * _refs(world) + text_w * texts)
    assert_ranking(state.candidates, *topk_desc(_removed(q @ world.I.T, world), 5))


def test_cirevl_retrieves_with_the_llm_target_caption(world):
    method = METHODS.build("cirevl", {"top_k": 6}, encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    state, ctx = world.run(method)
    video = "caption of f0 + caption of f1 + caption of f2 + caption of f3 + caption of f4"  # summarised keyframes
    refs = ["caption of g0", "caption of g1", video]
    targets = [f"{r} then {q.text}" for r, q in zip(refs, world.queries)]
    assert [state.record(q, "reason")["target_caption"] for q in world.queries] == targets
    assert [t for t, _ in world.llm.calls].count("summarize_captions") == 1
    S = np.stack([enc_text(t) for t in targets]) @ world.I.T
    assert_ranking(state.candidates, *topk_desc(_removed(S, world), 6))
    assert set(state.stage_candidates) == {"retrieve"}


@pytest.mark.parametrize("ensemble", ["adaptive", "mean"])
def test_ldre_adaptive_ensemble(world, ensemble):
    n, m, T = 4, 3, 0.04
    method = METHODS.build(
        "ldre",
        {"top_k": 6, "num_captions": n, "adaptive_topk": m, "temperature": T, "ensemble": ensemble},
        encoder=world.encoder,
        llm=world.llm,
        captioner=world.captioner,
    )
    state, _ = world.run(method, backend="numba")
    I = world.I
    queries = []
    for i, q in enumerate(world.queries):
        ref = state.record(q, "reason")["reference_caption"]
        b = enc_text(ref)
        E = np.stack([enc_text(f"{q.text} div{j}") for j in range(n)])
        if ensemble == "adaptive":
            drops = np.maximum((b @ I.T)[None, :] - E @ I.T, 0.0)  # [n, N]
            s = -np.sort(-drops, axis=1)[:, :m].sum(axis=1)  # the m largest drops
            x = s / s.max() / T
            w = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        else:
            w = np.full(n, 1 / n)
        np.testing.assert_allclose(state.arrays["ldre_weights"][i], w, atol=1e-5)
        queries.append(w @ E)
    assert_ranking(state.candidates, *topk_desc(_removed(np.stack(queries) @ I.T, world), 6))


def test_ldre_pads_a_short_caption_list_and_checks_its_config(world):
    world.llm.replies["divergent_captions"] = '{"captions": ["one", "two"]}'
    method = METHODS.build("ldre", {"num_captions": 4}, encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    state, _ = world.run(method)
    assert state.record(world.queries[0], "reason")["captions"] == ["one", "two", "two", "two"]
    with pytest.raises(ConfigError, match="field 'ensemble': must be one of adaptive, mean, got 'median'"):
        METHODS.build("ldre", {"ensemble": "median"}, encoder=world.encoder, llm=world.llm, captioner=world.captioner)
    with pytest.raises(ConfigError, match="field 'num_captions': must be at least 1, got 0"):
        METHODS.build("ldre", {"num_captions": 0}, encoder=world.encoder, llm=world.llm, captioner=world.captioner)
