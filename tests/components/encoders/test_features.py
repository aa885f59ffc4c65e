"""encoder=features: precomputed features from the OCTOPUS/CoVR pickles, .npy + ids and parquet."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.features import feature_ref
from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.registry import ENCODERS

from ...framework.datasets.conftest import make_release
from .conftest import make_hf_model

ROWS = [("1/10", "2/20", "make it red"), ("1/11", "2/21", "add a dog"), ("1/10", "2/22", "at night")]


def unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture
def release(tmp_path):
    pytest.importorskip("torch")
    return make_release(tmp_path / "rel", ROWS, archs=("ViT-B/32", "ViT-L/14"))


def test_octopus_preload_layout(release):
    enc = ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-B/32"})
    assert set(enc.tables) == {"img_features", "ref_img_features", "gen_img_features"} and enc.dim == 8
    raw = pickle.load(open(release / "preload/img_features/ViT-B/32_webvidcovr_test.pkl", "rb"))
    got = enc.encode_images(
        [
            feature_ref("img_features", "2/21"),
            feature_ref("ref_img_features", "1/10"),
            feature_ref("gen_img_features", "@2"),
        ]
    )
    np.testing.assert_allclose(got[0], unit(raw["index_features"][1].float().numpy()), rtol=1e-6)
    gen = pickle.load(open(release / "preload/gen_img_features/ViT-B/32_webvidcovr_test.pkl", "rb"))
    np.testing.assert_allclose(got[2], unit(gen["gen_tar_features"][2].float().numpy()), rtol=1e-6)
    # the ref file's names are its last batch only (the authors' dump): its rows take gen_img_features' names
    ref = pickle.load(open(release / "preload/ref_img_features/ViT-B/32_webvidcovr_test.pkl", "rb"))
    np.testing.assert_allclose(got[1], unit(ref["ref_features"][0].float().numpy()), rtol=1e-6)
    # gen rows of two queries with one reference differ: the reference id is ambiguous there
    with pytest.raises(InputError, match="id '1/10' names several different rows"):
        enc.encode_images([feature_ref("gen_img_features", "1/10")])
    # a plain path is looked up by its tail in img_features; unknown ids are skipped and reported
    skipped = []
    out = enc.encode_images(
        ["/data/videos/2/20.mp4", feature_ref("img_features", "9/99"), "/x/3.jpg", feature_ref("nope", "1")],
        skipped=skipped,
    )
    assert out.shape == (1, 8) and [s.index for s in skipped] == [1, 2, 3]
    assert (
        "no precomputed feature for id '9/99'" in skipped[0].reason and "no feature table 'nope'" in skipped[2].reason
    )


def test_identity_is_the_files_content_and_arch(release, tmp_path):
    b32 = ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-B/32"})
    l14 = ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-L/14"})
    assert b32.identity != l14.identity
    assert not np.allclose(
        b32.encode_images([feature_ref("img_features", "2/20")]),
        l14.encode_images([feature_ref("img_features", "2/20")]),
    )
    import shutil

    copy = shutil.copytree(release, tmp_path / "copy")
    assert ENCODERS.build("features", {"path": str(copy / "preload"), "arch": "ViT-B/32"}).identity == b32.identity
    other = make_release(tmp_path / "other", ROWS, seed=1)
    assert ENCODERS.build("features", {"path": str(other / "preload"), "arch": "ViT-B/32"}).identity != b32.identity


def test_gallery_is_built_and_reopened_like_any_encoder(release, tmp_path):
    enc = ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-B/32"})
    items = [GalleryItem(v, feature_ref("img_features", v)) for v in ("2/20", "2/21", "2/22", "9/99")]
    g = Gallery.build(tmp_path / "g", items, enc, progress=False)
    assert g.ids == ["2/20", "2/21", "2/22"] and [s["path"] for s in g.skipped] == ["features:img_features/9/99"]
    np.testing.assert_allclose(g.image_emb, enc.encode_images([it.path for it in items[:3]]))
    assert Gallery.open(tmp_path / "g", encoder=enc).ids == g.ids
    with pytest.raises(InputError, match="was indexed with encoder 'features'"):
        Gallery.open(
            tmp_path / "g", encoder=ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-L/14"})
        )


def test_npy_and_parquet_layouts(tmp_path):
    rng = np.random.default_rng(0)
    mat = rng.standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "gallery.npy", mat)
    (tmp_path / "gallery.ids.txt").write_text("a\nb\nc\n")
    enc = ENCODERS.build("features", {"path": str(tmp_path / "gallery.npy")})
    np.testing.assert_allclose(enc.encode_images(["/imgs/c.jpg", "/imgs/a.png"]), unit(mat[[2, 0]]), rtol=1e-6)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d = tmp_path / "pq" / "ViT-B-32"
    d.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["x", "y"], "embedding": [[1.0, 0, 0, 0], [0, 2.0, 0, 0]]}), d / "img.parquet")
    enc = ENCODERS.build("features", {"path": str(tmp_path / "pq"), "arch": "ViT-B-32"})
    np.testing.assert_allclose(enc.encode_images([feature_ref("img", "y"), "/p/x.jpg"]), [[0, 1, 0, 0], [1, 0, 0, 0]])
    # a folder of .npy with json ids; one identity per content
    (tmp_path / "npyd").mkdir()
    np.save(tmp_path / "npyd" / "g.npy", mat)
    (tmp_path / "npyd" / "g.ids.json").write_text(json.dumps(["a", "b", "c"]))
    e2 = ENCODERS.build("features", {"path": str(tmp_path / "npyd")})
    assert e2.encode_images(["b"]).shape == (1, 4)
    before = e2.identity
    (tmp_path / "npyd" / "g.ids.json").write_text(json.dumps(["c", "b", "a"]))
    assert ENCODERS.build("features", {"path": str(tmp_path / "npyd")}).identity != before


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(InputError, match="field 'path' is empty"):
        ENCODERS.build("features", {}).encode_images(["features:img_features/a"])
    with pytest.raises(InputError, match="neither a feature file nor a folder"):
        ENCODERS.build("features", {"path": str(tmp_path / "none")}).tables
    np.save(tmp_path / "g.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(InputError, match="no ids beside it"):
        ENCODERS.build("features", {"path": str(tmp_path / "g.npy")}).tables
    (tmp_path / "g.ids.txt").write_text("only-one\n")
    with pytest.raises(InputError, match="1 id\\(s\\) for a matrix of shape \\(2, 3\\)"):
        ENCODERS.build("features", {"path": str(tmp_path / "g.npy")}).tables
    evil = tmp_path / "evil" / "img_features"
    evil.mkdir(parents=True)
    import os

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (evil / "ViT-B_x.pkl").write_bytes(pickle.dumps({"index_features": Evil(), "index_names": ["a"]}))
    with pytest.raises(InputError, match="refused to load"):
        ENCODERS.build("features", {"path": str(tmp_path / "evil"), "arch": "ViT-B"}).tables
    assert not (tmp_path / "pwned").exists()
    enc = ENCODERS.build("features", {"path": str(tmp_path / "g.npy")})
    with pytest.raises(InputError, match="has no text tower.*encoder.text.name=open_clip"):
        enc.encode_texts(["a red dress"])
    with pytest.raises(InputError, match="cannot embed a Image"):
        from PIL import Image

        enc.encode_images([Image.new("RGB", (4, 4))])


def test_texts_go_to_the_named_encoder(tmp_path):
    pytest.importorskip("transformers", reason="needs the hf extra")
    model = make_hf_model(tmp_path / "clip", "clip")  # a tiny random CLIP, 16-d
    np.save(tmp_path / "g.npy", np.eye(16, dtype=np.float32)[:3])
    (tmp_path / "g.ids.txt").write_text("a\nb\nc\n")
    enc = ENCODERS.build("features", {"path": str(tmp_path / "g.npy"), "text": {"name": "hf_clip", "path": str(model)}})
    direct = ENCODERS.build("hf_clip", {"path": str(model)})
    np.testing.assert_allclose(
        enc.encode_texts(["a red shirt", "blue watch"]),
        direct.encode_texts(["a red shirt", "blue watch"]),
        rtol=1e-5,
        atol=1e-6,
    )
    assert enc.identity != ENCODERS.build("features", {"path": str(tmp_path / "g.npy")}).identity
    np.save(tmp_path / "h.npy", np.eye(8, dtype=np.float32)[:3])
    (tmp_path / "h.ids.txt").write_text("a\nb\nc\n")
    bad = ENCODERS.build("features", {"path": str(tmp_path / "h.npy"), "text": {"name": "hf_clip", "path": str(model)}})
    with pytest.raises(InputError, match="gives 16-d embeddings, the features .* are 8-d"):
        bad.encode_texts(["a"])


def test_unnormalised_features_are_the_stored_rows(release):
    enc = ENCODERS.build("features", {"path": str(release / "preload"), "arch": "ViT-B/32"})
    raw = pickle.load(open(release / "preload/img_features/ViT-B/32_webvidcovr_test.pkl", "rb"))
    got = enc.encode_images([feature_ref("img_features", "2/21")], normalize=False)
    np.testing.assert_allclose(got[0], raw["index_features"][1].float().numpy(), rtol=1e-6)
    assert abs(float(np.linalg.norm(got[0])) - 1.0) > 1e-3  # the stored rows are not unit vectors
