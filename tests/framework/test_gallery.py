"""Gallery indexing: counted skips, resumable chunks, memory-mapped embeddings, encoder identity."""

import numpy as np
import pytest

from agentcir.framework import gallery as gallery_mod
from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, GalleryItem, items_from_folder
from agentcir.registry import ENCODERS


@pytest.fixture
def toy(plugin_path):
    return ENCODERS.build("toy", {})


def test_folder_with_broken_and_non_image_files(image_folder, tmp_path, toy, caplog):
    items, others = items_from_folder(image_folder)
    assert len(items) == 13 and [o.name for o in others] == ["notes.txt"]
    g = Gallery.build(tmp_path / "g", items, toy)
    assert len(g) == 12 and len(g.skipped) == 1 and g.skipped[0]["path"].endswith("broken.jpg")
    assert isinstance(g.image_emb, np.memmap) and g.image_emb.shape == (12, 24)
    np.testing.assert_allclose(np.linalg.norm(g.image_emb, axis=1), 1, atol=1e-5)
    assert "sub/img00" in g.ids and g.index_of("broken") == -1
    assert "skipped 1 image(s) that could not be decoded" in caplog.text


def test_empty_and_missing_folders(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError) as e:
        items_from_folder(tmp_path / "empty")
    assert str(e.value).startswith(f"gallery folder '{tmp_path / 'empty'}' holds no image files (0 other file(s)")
    with pytest.raises(InputError, match="does not exist or is not a folder"):
        items_from_folder(tmp_path / "nowhere")


def test_all_unreadable_is_an_error(tmp_path, toy):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "a.jpg").write_bytes(b"nope")
    items, _ = items_from_folder(tmp_path / "x")
    with pytest.raises(InputError, match="none of the 1 image"):
        Gallery.build(tmp_path / "g", items, toy)


def test_other_encoder_is_refused(image_folder, tmp_path, toy):
    items, _ = items_from_folder(image_folder)
    Gallery.build(tmp_path / "g", items, toy)
    other = ENCODERS.build("toy", {"seed": 7})
    with pytest.raises(InputError, match="was indexed with encoder 'toy'"):
        Gallery.open(tmp_path / "g", encoder=other)
    # batch size does not change outputs: not part of the identity
    assert ENCODERS.build("toy", {"batch_size": 3}).identity == toy.identity


def test_build_resumes_finished_chunks(image_folder, tmp_path, toy, monkeypatch):
    monkeypatch.setattr(gallery_mod, "CHUNK", 4)
    items, _ = items_from_folder(image_folder)
    calls = []
    real = toy.encode_images

    def failing(paths, **kw):
        calls.append(len(paths))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(paths, **kw)

    monkeypatch.setattr(toy, "encode_images", failing)
    with pytest.raises(KeyboardInterrupt):
        Gallery.build(tmp_path / "g", items, toy)
    monkeypatch.setattr(toy, "encode_images", lambda paths, **kw: (calls.append(len(paths)), real(paths, **kw))[1])
    g = Gallery.build(tmp_path / "g", items, toy)
    assert calls == [4, 4, 4, 4, 1]  # chunks 0 and 1 were kept, 2 was redone, then 3 and 4
    full = Gallery.build(tmp_path / "g2", items, toy)
    np.testing.assert_allclose(np.asarray(g.image_emb), np.asarray(full.image_emb))


def test_duplicate_ids_and_dtype(tmp_path, toy, image_folder):
    p = str(next(image_folder.glob("*.jpg")))
    with pytest.raises(InputError, match="duplicate item id 'a'"):
        Gallery.build(tmp_path / "g", [GalleryItem("a", p), GalleryItem("a", p)], toy)
    g = Gallery.build(tmp_path / "h", [GalleryItem("a", p)], toy, dtype="float16")
    assert g.image_emb.dtype == np.float16
