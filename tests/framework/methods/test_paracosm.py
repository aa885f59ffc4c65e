"""Paracosm: the gallery index (each image and its synthetic counterpart) and the query (mental image +
its description, and the text, from unnormalised features) equal the released formulas; the
gallery-side pass is stored once per gallery and shared by every run; the prompt folder, the
describer and the query texts; beside the released code when a checkout is given."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.interfaces import Editor, Generator
from agentcir.framework.methods.paracosm import Paracosm, paracosm_index, paracosm_query
from agentcir.framework.prompts import load_prompt
from agentcir.registry import METHODS

from .conftest import N_GALLERY, assert_ranking, image_vectors, save_index_image, text_vector, topk_desc, unit

ROOT = Path(__file__).resolve().parents[3]
PARACOSM = os.environ.get("AGENTCIR_PARACOSM_CHECKOUT", "")


def h(*parts) -> int:
    return int(hashlib.md5("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)


class ScriptEditor(Editor):
    """The mental image of (reference, instruction): image 30 + hash % 20 of the vector table."""

    registry_key = "script_editor"

    def __init__(self, cfg=None, *, root=None, **deps):
        super().__init__(cfg, **deps)
        self.root, self.calls = root, []

    def edit(self, image, instruction):
        self.calls.append((Path(image).stem, instruction))
        i = 30 + h(Path(image).stem, instruction) % 20
        return save_index_image(self.root / "edits" / f"e{i}.png", i)


class ScriptGenerator(Generator):
    """The synthetic counterpart of a description: image 50 + hash % 14."""

    registry_key = "script_generator"

    @dataclass
    class Config:
        salt: str = ""

    def __init__(self, cfg=None, *, root=None, **deps):
        super().__init__(cfg, **deps)
        self.root, self.calls = root, []

    def generate(self, description, *, reference=None):
        self.calls.append(description)
        i = 50 + h(description, self.cfg.salt) % 14
        return save_index_image(self.root / "drawn" / f"s{i}.png", i)


def build(world, **cfg):
    editor = ScriptEditor(root=world.root)
    generator = ScriptGenerator(ScriptGenerator.Config(salt=cfg.pop("salt", "")), root=world.root)
    m = METHODS.build(
        "paracosm",
        {"top_k": 10, **cfg},
        encoder=world.encoder,
        editor=editor,
        generator=generator,
        captioner=world.captioner,
        llm=world.llm,
    )
    return m, editor, generator


def expected(world, synthetic: bool = True, lam: float = 0.3):
    """The released formulas, computed here from the raw vector table."""
    raw = image_vectors().astype(np.float64)
    index = unit(raw[:N_GALLERY])
    if synthetic:
        syn = np.stack([raw[50 + h(f"caption of g{i}", "") % 14] for i in range(N_GALLERY)])
        index = unit(unit(index) + unit(syn))
    rows = []
    for q in world.queries:
        ref = Path(q.reference[len(q.reference) // 2] if len(q.reference) > 1 else q.reference[0]).stem
        instruction = load_prompt("paracosm/edit").render(modification=q.text).strip()
        m = 30 + h(ref, instruction) % 20
        M, D, T = raw[m], text_vector(f"caption of e{m}").astype(np.float64), text_vector(q.text).astype(np.float64)
        rows.append(lam * unit(M + D) + (1 - lam) * unit(T))
    S = np.stack(rows) @ index.T
    S[0, world.row("g0")] = np.nan
    S[1, world.row("g1")] = np.nan
    return topk_desc(S, 10)


def test_stages_equal_the_released_formulas(world):
    m, editor, generator = build(world)
    assert [s.name for s in m.stages()] == ["synthetic_gallery", "imagine", "retrieve"]
    state, ctx = world.run(m)
    assert_ranking(state.candidates, *expected(world))
    # the video reference is edited through its middle keyframe; one edit per query, one drawing per item
    assert [s for s, _ in editor.calls] == ["g0", "g1", "f2"]
    assert sorted(generator.calls) == sorted(f"caption of g{i}" for i in range(N_GALLERY))
    rec = state.record(world.queries[0], "imagine")
    assert rec["instruction"] == "Change the image as this instruction says: make it red."
    assert rec["description"] == f"caption of {Path(rec['mental_image']).stem}" and rec["text"] == ["make it red"]
    assert state.arrays["paracosm_query"].shape == (3, 8)


def test_without_synthetic_counterparts_the_images_alone_are_the_index(world):
    m, _, generator = build(world, synthetic_gallery=False)
    assert [s.name for s in m.stages()] == ["imagine", "retrieve"]
    state, _ = world.run(m)
    assert_ranking(state.candidates, *expected(world, synthetic=False))
    assert generator.calls == []


def run_alone(world, method, folder: str):
    """A run with its own run directory and call cache (nothing shared with the others but the gallery)."""
    import asyncio

    from agentcir.framework.cache import CallCache
    from agentcir.framework.method import RunState
    from agentcir.framework.runner import RunContext, Runner

    ctx = RunContext(
        cache=CallCache(world.root / folder / "cache.sqlite"),
        run_dir=world.root / folder / "run",
        concurrency=4,
        progress=False,
        kernels="reference",
    )
    state = RunState(queries=world.queries, gallery=world.gallery)
    asyncio.run(Runner(method, ctx, state).execute())
    return state, ctx


def test_the_gallery_pass_is_stored_once_per_gallery_and_shared(world):
    m, _, generator = build(world)
    run_alone(world, m, "first")
    desc_key, key = m.gallery_keys(world.gallery)
    assert (world.gallery.root / "derived" / "paracosm" / f"{key}.npy").is_file()
    assert world.gallery.captions(desc_key) == [f"caption of g{i}" for i in range(N_GALLERY)]
    # another run (its own run directory and call cache) reads them: no description, drawing or embedding
    m2, _, gen2 = build(world)
    state, ctx = run_alone(world, m2, "second")
    assert gen2.calls == [] and ctx.stats["synthetic_gallery"].calls == 0
    assert_ranking(state.candidates, *expected(world))
    # another generator is another index (the descriptions are kept: same describer)
    m3, _, gen3 = build(world, salt="other")
    assert m3.gallery_keys(world.gallery)[0] == desc_key and m3.gallery_keys(world.gallery)[1] != key
    _, ctx3 = run_alone(world, m3, "third")
    assert len(gen3.calls) == N_GALLERY and "caption" not in str(ctx3.stats["synthetic_gallery"].by_component)


def test_formulas_on_raw_features():
    rng = np.random.default_rng(0)
    M, D, T = (rng.standard_normal((5, 6)) * rng.uniform(0.5, 9, (5, 1)) for _ in range(3))
    q = paracosm_query(M, D, T, 0.3)
    np.testing.assert_allclose(q, 0.3 * unit(M + D) + 0.7 * unit(T), atol=1e-6)
    # the sum of raw features is not the sum of normalised ones (the norms weigh the two)
    assert np.abs(q - (0.3 * unit(unit(M) + unit(D)) + 0.7 * unit(T))).max() > 1e-2
    img, syn = rng.standard_normal((4, 6)), rng.standard_normal((4, 6)) * 5
    np.testing.assert_allclose(paracosm_index(img, syn), unit(unit(img) + unit(syn)), atol=1e-6)


def test_query_texts_and_bad_configurations(world, tmp_path):
    with pytest.raises(InputError, match="query 'q0'.*both_orders"):
        world.run(build(world, query_text="both_orders", synthetic_gallery=False)[0])
    with pytest.raises(InputError, match="lacks describe_gallery.txt"):
        (tmp_path / "p").mkdir()
        for f in ("edit.txt", "edit_shared.txt", "describe_mental.txt"):
            (tmp_path / "p" / f).write_text("x {{modification}}")
        build(world, prompts=str(tmp_path / "p"))
    with pytest.raises(InputError, match="'lam' must be in"):
        build(world, lam=1.5)
    with pytest.raises(InputError, match="describer=llm needs an llm"):
        METHODS.build(
            "paracosm",
            {"describer": "llm"},
            encoder=world.encoder,
            editor=ScriptEditor(root=tmp_path),
            generator=ScriptGenerator(root=tmp_path),
            captioner=world.captioner,
        )
    needs = Paracosm.needs_for({"describer": "llm", "query_text": "composed"})
    assert needs == {
        "llm": ("images", "task:paracosm_describe_mental", "task:paracosm_describe_gallery", "task:paracosm_compose")
    }
    assert Paracosm.needs_for({"describer": "captioner"}) == {}


def test_shared_concept_and_composed_text(world):
    world.queries[0].meta["shared_concept"] = "a red thing"
    world.llm.replies["paracosm_compose"] = lambda v: f"{v['shared_concept']} / {v['modification']}"
    state, _ = world.run(build(world, query_text="composed", synthetic_gallery=False)[0])
    r0, r1 = (state.record(q, "imagine") for q in world.queries[:2])
    assert "keep 'a red thing'" in r0["instruction"] and "keep" not in r1["instruction"]
    assert r0["text"] == ["a red thing / make it red"] and r1["text"] == [" / add a dog"]


def test_prompts_folder_points_every_prompt(world, tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    for f in ("edit.txt", "edit_shared.txt", "describe_mental.txt", "describe_gallery.txt"):
        (d / f).write_text("EDIT {{modification}}" if f.startswith("edit") else "describe")
    m, _, _ = build(world, prompts=str(d), synthetic_gallery=False)
    assert m.cfg.edit_prompt == str(d / "edit.txt") and m.cfg.compose_prompt == "paracosm/compose"
    state, _ = world.run(m)
    assert state.record(world.queries[0], "imagine")["instruction"] == "EDIT make it red"


@pytest.mark.skipif(
    not PARACOSM, reason="no Paracosm checkout: set AGENTCIR_PARACOSM_CHECKOUT to a checkout of leowangtong/Paracosm"
)
def test_equals_the_released_code():
    pytest.importorskip("torch")
    from .test_upstream_released import bench

    res = bench("upstream_paracosm").check(Path(PARACOSM))
    for name in ("circo", "cirr"):
        assert res[name]["query_vector_max_diff"] < 1e-5 and res[name]["top50_lists_differing"] == 0, res
    assert res["fashioniq"]["query_vector_max_diff"] < 1e-5 and res["fashioniq"]["recall_diff"] < 1e-4, res


@pytest.mark.skipif(
    not PARACOSM, reason="no Paracosm checkout: set AGENTCIR_PARACOSM_CHECKOUT to a checkout of leowangtong/Paracosm"
)
def test_released_prompts_export_with_the_variables(tmp_path):
    from .test_upstream_released import bench

    files = {f.name: f for f in bench("upstream_paracosm").export_prompts(Path(PARACOSM), tmp_path / "p")}
    assert load_prompt(files["edit_shared.txt"]).variables == {"modification", "shared_concept"}
    assert load_prompt(files["edit.txt"]).variables == {"modification"}
    assert load_prompt(files["describe_mental.txt"]).variables == set()
    assert "one sentence" in files["describe_mental.txt"].read_text()


def test_an_index_removed_from_the_gallery_is_made_again_from_the_cache(world):
    """A run resumed after its gallery-side stage finished, whose gallery lost the stored index since:
    the retrieval makes it again from the call cache (no drawing)."""
    import shutil

    m, _, _ = build(world)
    world.run(m, name="a")
    shutil.rmtree(world.gallery.root / "derived")
    for f in (world.root / "a" / "stages").glob("retrieve.*"):
        f.unlink()
    m2, _, gen2 = build(world)
    state, ctx = world.run(m2, name="a")
    assert gen2.calls == [] and ctx.stats["retrieve"].calls == 0 and ctx.stats["retrieve"].cache_hits > N_GALLERY
    assert_ranking(state.candidates, *expected(world))


def test_gallery_derived_arrays_are_checked(world):
    g = world.gallery
    a = np.arange(N_GALLERY * 8, dtype=np.float32).reshape(N_GALLERY, 8)
    np.testing.assert_array_equal(g.save_derived_emb("k", "v1", a), a)
    with pytest.raises(ValueError, match="got an array of shape"):
        g.save_derived_emb("k", "v2", a[:3])
    with pytest.raises(InputError, match="plain name"):
        g.derived_emb("../k", "v1")
    f = g.root / "derived" / "k" / "v1.npy"
    f.write_bytes(f.read_bytes()[:-8] + b"\0" * 8)  # damaged: removed, to be recomputed
    assert g.derived_emb("k", "v1") is None and not f.exists()
