"""int8 gallery storage (``run.gallery_dtype=int8``): float32 rows plus sealed int8 codes and scales;
searches through ``image_emb`` scan the codes and re-rank exactly (the float32 result)."""

import numpy as np
import pytest

from agentcir import kernels as K
from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, items_from_folder
from agentcir.framework.int8_rows import Int8Rows
from agentcir.framework.integrity import IntegrityError
from agentcir.registry import ENCODERS


@pytest.fixture
def toy(plugin_path):
    return ENCODERS.build("toy", {})


def test_int8_gallery_stores_codes_and_searches_exactly(image_folder, tmp_path, toy, monkeypatch):
    items, _ = items_from_folder(image_folder)
    g = Gallery.build(tmp_path / "g8", items, toy, dtype="int8")
    f = Gallery.build(tmp_path / "g", items, toy)
    assert g.info["dtype"] == "int8"
    for name in ("image_codes.npy", "image_scales.npy"):
        assert (g.root / name).is_file() and (g.root / (name + ".b2")).is_file()
    emb = g.image_emb
    assert isinstance(emb, Int8Rows) and emb.dtype == np.float32 and emb.shape == f.image_emb.shape
    np.testing.assert_array_equal(np.asarray(emb), np.asarray(f.image_emb))
    q8 = emb.int8
    assert q8.codes.dtype == np.int8 and q8.scales.shape == (len(g),)
    np.testing.assert_array_equal(q8.codes, K.quantize_int8(np.asarray(f.image_emb)).codes)
    assert emb[:3].int8 is None and np.asarray(emb[[0, 2]]).shape == (2, emb.shape[1])

    from agentcir.kernels import _int8

    calls = []
    real = _int8.rerank_topk
    monkeypatch.setattr(
        "agentcir.kernels.api.rerank_topk", lambda *a, **kw: (calls.append(a[2].shape), real(*a, **kw))[1]
    )
    X = np.asarray(f.image_emb[[1, 4]])
    got = K.cosine_topk(X, emb, 5, exclude=[1, 4])
    ref = K.cosine_topk(X, f.image_emb, 5, exclude=[1, 4], backend="reference")
    np.testing.assert_array_equal(got.ids, ref.ids)
    assert calls == [tuple(emb.shape)]  # the int8 scan with the re-rank against the float32 rows
    P = np.stack([X, X[::-1]], axis=1)
    kw = dict(visual=X, captions=np.asarray(f.image_emb), exclude=[1, 4])
    o8 = K.octopus_topk(X, P, X, emb, 4, **kw)
    np.testing.assert_array_equal(o8.ids, K.octopus_topk(X, P, X, f.image_emb, 4, backend="reference", **kw).ids)
    assert Gallery.open(g.root, encoder=toy).image_emb.int8 is not None


def test_damaged_codes_are_refused(image_folder, tmp_path, toy):
    items, _ = items_from_folder(image_folder)
    g = Gallery.build(tmp_path / "g8", items, toy, dtype="int8")
    raw = bytearray((g.root / "image_codes.npy").read_bytes())
    raw[-1] ^= 0x55
    (g.root / "image_codes.npy").write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="image_codes.npy"):
        Gallery.open(g.root, encoder=toy)
    with pytest.raises(InputError, match="gallery dtype must be one of float32, float16, int8"):
        Gallery.build(tmp_path / "x", items, toy, dtype="int4")
