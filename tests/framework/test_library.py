"""Incremental indexing keyed by content (agentcir.framework.library): add, change, rename (no
re-embedding), delete, metadata change, a SIGKILLed update and its rerun, an encoder change
refused, the progress of a build moving per small batch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, GalleryItem, items_from_folder
from agentcir.framework.interfaces import Encoder
from agentcir.framework.library import CONTENT, index_into, recover, staging_dir

ROOT = Path(__file__).resolve().parents[2]


class CountingEncoder(Encoder):
    """Colour statistics through a fixed projection; counts the images it embeds."""

    @dataclass
    class Config:
        batch_size: int = 16
        seed: int = 0

    dim = 12

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.seen: list[int] = []

    def _embed_images(self, images):
        self.seen.append(len(images))
        proj = np.random.default_rng(self.cfg.seed).standard_normal((9, self.dim)).astype(np.float32)
        feats = []
        for im in images:
            a = np.asarray(im.resize((8, 8)), np.float32) / 255.0
            feats.append(np.concatenate([a.mean((0, 1)), a.std((0, 1)), a[:4].mean((0, 1))]))
        return np.stack(feats) @ proj

    def _embed_texts(self, texts):
        return np.ones((len(texts), self.dim), np.float32)

    @property
    def count(self) -> int:
        return sum(self.seen)


def photo(path: Path, seed: int) -> Path:
    from PIL import Image

    arr = (np.random.default_rng(seed).random((20, 20, 3)) * 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def folder_of(d: Path, n: int, start: int = 0) -> Path:
    for i in range(start, start + n):
        photo(d / f"p{i:03d}.png", i)
    return d


def items_with_meta(folder: Path) -> list[GalleryItem]:
    items, _ = items_from_folder(folder)
    for it in items:
        side = Path(it.path).with_suffix(".json")
        it.meta = json.loads(side.read_text()) if side.is_file() else {}
    return items


def index(folder: Path, out: Path, enc) -> tuple[Gallery, object]:
    return index_into(out, items_with_meta(folder), enc, progress=False)


def vector_of(g: Gallery, item_id: str) -> np.ndarray:
    return np.asarray(g.image_emb[g.index_of(item_id)])


@pytest.fixture
def lib(tmp_path):
    folder = folder_of(tmp_path / "photos", 20)
    enc = CountingEncoder()
    g, change = index(folder, tmp_path / "g", enc)
    assert change is None and len(g) == 20 and enc.count == 20 and (tmp_path / "g" / CONTENT).is_file()
    enc.seen.clear()
    return folder, tmp_path / "g", enc


def test_nothing_changed_embeds_nothing(lib):
    folder, out, enc = lib
    g, change = index(folder, out, enc)
    assert enc.count == 0 and not change.rows_changed and len(g) == 20


def test_added_photos_are_the_only_ones_embedded(lib):
    folder, out, enc = lib
    before = vector_of(Gallery.open(out), "p003").copy()
    folder_of(folder, 5, start=100)
    g, change = index(folder, out, enc)
    assert enc.count == 5 and change.embedded == 5 and change.reused == 20
    assert sorted(change.added) == [f"p{i}" for i in range(100, 105)] and not change.removed
    assert len(g) == 25 and np.allclose(vector_of(g, "p003"), before)
    fresh = CountingEncoder().encode_images([g.paths[g.index_of("p102")]])[0]
    assert np.allclose(vector_of(g, "p102"), fresh, atol=1e-6)
    assert not staging_dir(out).exists()


def test_changed_bytes_are_embedded_again(lib):
    folder, out, enc = lib
    photo(folder / "p004.png", 999)  # same name, other picture
    g, change = index(folder, out, enc)
    assert change.changed == ["p004"] and enc.count == 1 and len(g) == 20
    assert np.allclose(vector_of(g, "p004"), CountingEncoder().encode_images([folder / "p004.png"])[0], atol=1e-6)


def test_a_rename_or_move_embeds_nothing(lib):
    folder, out, enc = lib
    old = vector_of(Gallery.open(out), "p007").copy()
    (folder / "trip").mkdir()
    os.rename(folder / "p007.png", folder / "trip" / "renamed.png")
    g, change = index(folder, out, enc)
    assert enc.count == 0 and change.renamed == [("p007", "trip/renamed")] and not change.removed and not change.added
    assert g.index_of("p007") == -1 and np.allclose(vector_of(g, "trip/renamed"), old)
    assert g.paths[g.index_of("trip/renamed")] == str((folder / "trip" / "renamed.png").resolve())


def test_deleted_photos_are_dropped_and_rows_remapped(lib, tmp_path):
    folder, out, enc = lib
    g0 = Gallery.open(out)
    g0.save_captions("capkey", [f"caption of {i}" for i in g0.ids])
    emb_dir = out / "caption_emb"
    emb_dir.mkdir()
    np.save(g0._caption_emb_file("capkey", enc), np.arange(20 * 3, dtype=np.float32).reshape(20, 3))
    keep = {i: vector_of(g0, i).copy() for i in g0.ids}
    for name in ("p000", "p010", "p019"):
        (folder / f"{name}.png").unlink()
    g, change = index(folder, out, enc)
    assert sorted(change.removed) == ["p000", "p010", "p019"] and enc.count == 0 and len(g) == 17
    for r, i in enumerate(g.ids):  # every artefact in the new rows' order
        assert np.allclose(np.asarray(g.image_emb[r]), keep[i])
        assert g.captions("capkey")[r] == f"caption of {i}"
        assert Path(g.paths[r]).stem == i
    cap_emb = np.load(g._caption_emb_file("capkey", enc))
    assert cap_emb.shape == (17, 3) and all(cap_emb[r, 0] == 3 * g0.index_of(i) for r, i in enumerate(g.ids))


def test_new_rows_without_captions_drop_the_stored_captions(lib):
    folder, out, enc = lib
    g0 = Gallery.open(out)
    g0.save_captions("capkey", ["c"] * len(g0))
    folder_of(folder, 1, start=200)
    g, change = index(folder, out, enc)
    assert g.captions("capkey") is None and change.dropped == ["captions capkey"]


def test_metadata_change_is_read_without_embedding(lib):
    folder, out, enc = lib
    (folder / "p005.json").write_text(json.dumps({"keywords": ["frost"]}))  # a sidecar edit
    _, change = index(folder, out, enc)
    assert change.metadata == ["p005"] and enc.count == 0
    g = Gallery.open(out)
    assert g.items[g.index_of("p005")].meta == {"keywords": ["frost"]} and g.items[g.index_of("p006")].meta == {}


def test_an_encoder_change_is_refused(lib):
    folder, out, _ = lib
    folder_of(folder, 1, start=300)
    with pytest.raises(InputError, match="cannot be mixed") as e:
        index(folder, out, CountingEncoder(CountingEncoder.Config(seed=5)))
    assert str(out) in str(e.value)
    assert len(Gallery.open(out)) == 20


def test_an_interrupted_two_rename_swap_is_finished(lib, tmp_path):
    _, out, _ = lib
    prev = out.parent / f".{out.name}.previous"
    shutil.copytree(out, staging_dir(out))
    (staging_dir(out) / "update.json").write_text("{}")
    os.rename(out, prev)  # killed between the two renames
    recover(out)
    assert (out / "gallery.json").is_file() and not prev.exists() and not staging_dir(out).exists()
    # killed after the first rename with the new gallery unfinished: the previous one comes back
    os.rename(out, prev)
    staging_dir(out).mkdir()
    recover(out)
    assert len(Gallery.open(out)) == 20


KILLER = """
import os, signal, sys
import agentcir.framework.library as L
at = os.environ["KILL_AT"]
if at == "embed":  # SIGKILL inside the update's embedding
    orig = L.ReusingEncoder.encode_images
    def enc(self, *a, **k):
        out = orig(self, *a, **k)
        if self.embedded:
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    L.ReusingEncoder.encode_images = enc
else:  # SIGKILL with the new gallery built, before the swap
    L.swap_in = lambda out, staged: os.kill(os.getpid(), signal.SIGKILL)
from agentcir.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("at", ["embed", "swap"])
def test_a_sigkilled_update_leaves_the_gallery_usable_and_the_rerun_completes_it(plugin_env, tmp_path, at):
    folder = folder_of(tmp_path / "photos", 30)
    out = tmp_path / "g"
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join([str(ROOT), plugin_env.get("PYTHONPATH", "")])}
    args = ["index", str(folder), "--out", str(out), "encoder=toy", "-q", "--no-metadata"]
    r = subprocess.run(
        [sys.executable, "-m", "agentcir.cli", *args], capture_output=True, text=True, env=env, check=False
    )
    assert r.returncode == 0, r.stderr
    folder_of(folder, 40, start=500)
    (folder / "p001.png").unlink()
    r = subprocess.run(
        [sys.executable, "-c", KILLER, *args], capture_output=True, text=True, env={**env, "KILL_AT": at}, check=False
    )
    assert r.returncode == -9, (r.returncode, r.stderr)
    assert staging_dir(out).exists()
    g = Gallery.open(out)  # the previous gallery, whole
    assert len(g) == 30 and g.index_of("p001") >= 0 and g.image_emb.shape == (30, 24)
    r = subprocess.run(
        [sys.executable, "-m", "agentcir.cli", *args], capture_output=True, text=True, env=env, check=False
    )
    assert r.returncode == 0, r.stderr
    assert "update: 40 new, 0 changed, 0 renamed or moved, 1 deleted" in r.stdout
    g = Gallery.open(out)
    assert len(g) == 69 and g.index_of("p001") == -1 and g.index_of("p539") >= 0 and not staging_dir(out).exists()
    assert np.asarray(g.image_emb).shape == (69, 24)


def test_cli_refuses_another_encoder_with_a_clear_message(plugin_env, tmp_path):
    folder = folder_of(tmp_path / "photos", 5)
    out = tmp_path / "g"
    env = {**plugin_env, "PYTHONPATH": os.pathsep.join([str(ROOT), plugin_env.get("PYTHONPATH", "")])}
    base = [sys.executable, "-m", "agentcir.cli", "index", str(folder), "--out", str(out), "-q", "--no-metadata"]
    assert subprocess.run([*base, "encoder=toy"], capture_output=True, text=True, env=env, check=False).returncode == 0
    r = subprocess.run([*base, "encoder=toy", "encoder.seed=4"], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 2 and "cannot be mixed" in r.stderr and "encoder=toy" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_build_progress_moves_per_small_batch(tmp_path):
    """A 200-photo build reports progress after each encoder batch (16 photos here), not once per
    2,048-photo chunk, and the encoder is called once per chunk (the plan's call counts)."""
    folder = folder_of(tmp_path / "photos", 200)
    items, _ = items_from_folder(folder)
    enc = CountingEncoder()
    updates: list[int] = []
    import tqdm.auto

    real = tqdm.auto.tqdm

    class Bar(real):
        def __init__(self, *a, **k):
            self.name = str(k.get("desc", ""))
            super().__init__(*a, **k)

        def update(self, n=1):
            if self.name.startswith("indexing"):  # the build's bar (not the encoder's own)
                updates.append(n)
            return super().update(n)

    tqdm.auto.tqdm = Bar
    try:
        Gallery.build(tmp_path / "g", items, enc, progress=False)
    finally:
        tqdm.auto.tqdm = real
    assert updates == [16] * 12 + [8] and sum(enc.seen) == 200


def test_a_cached_generator_output_naming_a_vanished_file_is_recomputed(tmp_path):
    """A visual proxy that was a gallery photo since renamed: the call runs again, not fails forever."""
    import asyncio

    from agentcir.framework.cache import CallCache
    from agentcir.framework.runner import RunContext

    class Picker:  # a generator that answers a gallery file
        kind, registry_key, identity = "generator", "picker", "picker-1"

        def __init__(self):
            self.calls, self.answer = 0, None

        def generate(self, description, reference=None):
            self.calls += 1
            return self.answer

    gen = Picker()
    gen.answer = str(photo(tmp_path / "a.png", 1))
    ctx = RunContext(cache=CallCache(":memory:"), run_dir=None, progress=False)
    ask = lambda: asyncio.run(ctx.call(gen, "generate", description="a red dress"))
    assert ask() == gen.answer and ask() == gen.answer and gen.calls == 1  # the second is a cache hit
    os.rename(tmp_path / "a.png", tmp_path / "b.png")
    gen.answer = str(tmp_path / "b.png")
    assert ask() == str(tmp_path / "b.png") and gen.calls == 2
    assert ask() == str(tmp_path / "b.png") and gen.calls == 2


def test_a_sharded_gallery_is_updated_too(tmp_path):
    from agentcir.framework.scale import scale_settings

    folder = folder_of(tmp_path / "photos", 24)
    scale = scale_settings({"shards": 3})
    enc = CountingEncoder()
    g, _ = index_into(tmp_path / "g", items_with_meta(folder), enc, scale=scale, progress=False)
    assert len(g.shards) == 3 and len(g) == 24
    keep = {i: np.asarray(g.image_emb[g.index_of(i)]).copy() for i in g.ids}
    enc.seen.clear()
    (tmp_path / "g" / "ann").mkdir()  # an approximate index made for the old rows
    folder_of(folder, 4, start=50)
    (folder / "p002.png").unlink()
    g, change = index_into(tmp_path / "g", items_with_meta(folder), enc, scale=scale, progress=False)
    assert enc.count == 4 and change.removed == ["p002"] and len(g) == 27 and len(g.shards) == 3
    assert change.dropped == ["ann"] and not (tmp_path / "g" / "ann").exists()
    for i in g.ids:
        if i in keep:
            assert np.allclose(np.asarray(g.image_emb[g.index_of(i)]), keep[i])


def test_an_update_builds_the_approximate_indexes_again_over_the_new_rows(tmp_path):
    """An index folder made by build-index records its settings; an update builds it again over the
    new rows (the old one was made for the old row numbers), and search through it finds the new photo."""
    pytest.importorskip("faiss")
    from agentcir import kernels
    from agentcir.framework.galleries import open_gallery
    from agentcir.framework.scale import ann_dir, scale_settings
    from agentcir.framework.scale.ann import SETTINGS_FILE, build_indexes, check_index

    folder = folder_of(tmp_path / "photos", 24)
    scale = scale_settings({"shards": 2})
    enc = CountingEncoder()
    g, _ = index_into(tmp_path / "g", items_with_meta(folder), enc, scale=scale, progress=False)
    ann = scale_settings({"shards": 2, "search": "ivf_flat", "nlist": 2})
    build_indexes(g, ann, progress=False)
    d = ann_dir(g, ann)
    assert json.loads((d / SETTINGS_FILE).read_text()) == {"search": "ivf_flat", "nlist": 2}
    (tmp_path / "g" / "ann" / "made-elsewhere").mkdir()  # records no settings: dropped
    folder_of(folder, 3, start=50)
    (folder / "p002.png").unlink()
    g, change = index_into(tmp_path / "g", items_with_meta(folder), enc, scale=scale, progress=False)
    assert change.rebuilt == [f"ann/{d.name}"] and change.dropped == ["ann/made-elsewhere"]
    assert "built again over the new rows" in change.line()
    assert sum(check_index(d / f"{s['dir']}.faiss")["n"] for s in g.shards) == len(g) == 26
    searched = open_gallery(tmp_path / "g", scale=ann)
    q = np.asarray(g.image_emb[g.index_of("p051")], np.float32)[None]
    assert searched.ids[int(kernels.cosine_topk(q, searched.image_emb, 1).ids[0, 0])] == "p051"


def test_a_moved_folder_embeds_nothing_and_updates_the_paths(lib, tmp_path):
    folder, out, enc = lib
    moved = tmp_path / "elsewhere"
    os.rename(folder, moved)
    g, change = index(moved, out, enc)
    assert enc.count == 0 and len(change.relocated) == 20 and not (change.added or change.changed or change.removed)
    assert all(p.startswith(str(moved.resolve())) for p in g.paths) and "at a new location" in change.line()
